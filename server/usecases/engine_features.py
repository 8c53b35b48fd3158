"""Target features from a serving engine, for `capture --engine vllm` and `train --features-server`.

The one place that joins inference's engine client with training's feature code (the stages never import each
other): `engine_session` opens a client to a running extraction server (or starts one, when no URL is given),
probes it, and hands training a plain synchronous `fetch(rows) -> answers` that any thread may call (the
client's event loop runs in a thread of its own); `capture_from_engine` writes the offline cache through it,
and `feature_source` builds the trainer's online source over it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from core.json_types import JSONObject

T = TypeVar("T")


class _LoopThread:
    """An event loop running in a daemon thread; `run(coro)` waits for a coroutine from any thread.

    `close` refuses new work first, then cancels what is still running (a trainer's prefetch thread may be
    waiting on a fetch when the session ends on an error) and waits for it to unwind, then stops the loop: no
    coroutine is left never awaited, and no caller waits on a loop that will not run it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self.loop.run_forever, name="engine-client", daemon=True)
        self._thread.start()

    def run(self, coro: Any) -> Any:
        with self._lock:
            if self._closed:
                coro.close()
                raise RuntimeError("the engine session is closed")
            future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True

        async def cancel_the_rest() -> None:
            rest = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in rest:
                task.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(cancel_the_rest(), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


@dataclass
class EngineSession:
    """An open extraction server: what it said about itself (training's `EngineFacts`) and the row fetcher."""

    facts: Any  # training.engine_capture.EngineFacts
    fetch: Callable[[Sequence[Sequence[int]]], list[Any]]
    tokenize_chat: Callable[[list[JSONObject], dict[str, bool]], list[int] | None]


@contextlib.contextmanager
def engine_session(url: str | None, *, target: Path, layer_ids: list[int], storage: Path, python: str,
                   concurrency: int = 32, max_model_len: int | None = None, dtype: str | None = None,
                   memory_fraction: float | None = None, log_file: Path | None = None,
                   on_wait: Callable[[float], None] | None = None) -> Iterator[EngineSession]:
    """Yield a session on the extraction server at `url`, or on one started here for `target` (stopped after)."""
    from inference.hidden_states_client import HiddenStatesClient, RowStates, probe
    from inference.local_server import free_port
    from inference.vllm_extract import VllmExtractServer, VllmStartError, has_vllm, plan_extract_launch
    from training.engine_capture import EngineFacts

    with contextlib.ExitStack() as stack:
        if url is None:
            if not has_vllm(python):
                raise VllmStartError(f"{python} cannot import vllm: pass --vllm-python with the interpreter of the "
                                     "environment vLLM is installed in, or --server URL of a running server")
            storage.mkdir(parents=True, exist_ok=True)
            port = free_port()
            cpu = not _has_cuda(python)
            if cpu and memory_fraction is None:
                memory_fraction = 0.3  # vLLM's CPU build reserves most of the RAM otherwise
            launch = plan_extract_launch(str(target), layer_ids, storage, cpu=cpu, python=python, port=port,
                                         max_model_len=max_model_len, dtype=dtype, memory_fraction=memory_fraction)
            server = stack.enter_context(VllmExtractServer(launch, port, log_file or storage / "vllm.log",
                                                           on_wait=on_wait))
            url = server.url
        loop = _LoopThread()
        stack.callback(loop.close)

        async def opened() -> HiddenStatesClient:
            import httpx

            async with httpx.AsyncClient(timeout=30) as http:
                facts = await probe(http, url.rstrip("/"))
            return HiddenStatesClient(facts, concurrency=concurrency)

        client: HiddenStatesClient = loop.run(opened())
        stack.callback(lambda: loop.run(client.aclose()))
        server_facts = client.server

        def fetch(rows: Sequence[Sequence[int]]) -> list[Any]:
            answers: list[RowStates] = loop.run(client.fetch_many(rows))
            return [(a.states, a.token_ids, a.next_token, a.layer_ids) for a in answers]

        facts = EngineFacts(name="vllm", url=server_facts.url, version=server_facts.version, served=server_facts.root)
        yield EngineSession(facts=facts, fetch=fetch,
                            tokenize_chat=lambda messages, kwargs: loop.run(client.tokenize_chat(messages, kwargs)))


def _has_cuda(python: str) -> bool:
    import subprocess

    try:
        done = subprocess.run([python, "-c", "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 3)"],
                              capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def capture_from_engine(cfg: Any, *, url: str | None, python: str, concurrency: int, storage: Path,
                        on_wait: Callable[[float], None] | None = None,
                        on_progress: Callable[[int, int, int], None] | None = None) -> Any:
    """Write the offline cache of cfg (training's `EngineCaptureConfig`) from the engine at `url` (or one
    started here); return training's `CaptureResult`."""
    from dataclasses import replace

    from training.engine_capture import run_engine_capture
    from training.engine_features import EngineLayers

    layers = _engine_layers(cfg.target, cfg.aux_layer_ids)
    with engine_session(url, target=cfg.target, layer_ids=layers.extract_ids, storage=storage, python=python,
                        concurrency=concurrency, max_model_len=cfg.max_length + 16, dtype=cfg.dtype,
                        on_wait=on_wait) as session:
        probe_ids = _probe_ids(session, cfg.data, cfg.messages_field)
        facts = replace(session.facts, probe_ids=probe_ids)
        assert isinstance(layers, EngineLayers)
        return run_engine_capture(cfg, facts, session.fetch, on_progress)


def _engine_layers(target: Path, aux: tuple[int, int, int] | None) -> Any:
    from transformers import AutoConfig

    from inference.decoding.hidden_states import AuxLayers, default_aux_layers
    from training.engine_features import EngineLayers

    config = AutoConfig.from_pretrained(str(target))
    text = getattr(config, "text_config", None) or config
    layers = int(text.num_hidden_layers)
    return EngineLayers(AuxLayers(aux, "input") if aux else default_aux_layers(layers), layers)


def _probe_ids(session: EngineSession, data: Path, field: str) -> list[int] | None:
    """The engine's ids for the probe conversation of `data` (None: no probe row, or no /tokenize)."""
    from training.engine_capture import probe_conversation

    probe = probe_conversation(data, field)
    return None if probe is None else session.tokenize_chat([dict(t) for t in probe[0]], probe[1])


@contextlib.contextmanager
def training_features(cfg: Any, *, concurrency: int = 32) -> Iterator[Callable[[Sequence[Sequence[int]]], list[Any]]]:
    """Yield the fetcher `train` reads an engine's states through (cfg: training's `TrainConfig` with
    `features_server`), after the checks a capture makes: the layers the server extracts, the target it serves,
    its tokenizer's rendering of the first row, and its head agreeing with its states on that row."""
    from transformers import AutoTokenizer

    from training.checkpoint_head import read_target_head
    from training.engine_capture import check_engine_head, check_served, check_tokenizer
    from training.offline_cache import target_identity

    data = cfg.data
    layers = _engine_layers(cfg.target, cfg.aux_layer_ids)
    with engine_session(cfg.features_server.rstrip("/"), target=cfg.target, layer_ids=layers.extract_ids,
                        storage=cfg.out, python="python", concurrency=concurrency) as session:
        check_served(session.facts, cfg.target, target_identity(cfg.target))
        tokenizer = AutoTokenizer.from_pretrained(str(cfg.target))
        facts = session.facts
        from dataclasses import replace

        facts = replace(facts, probe_ids=_probe_ids(session, data, cfg.messages_field))
        check_tokenizer(facts, tokenizer, data, cfg.messages_field)
        first = _first_row(data, cfg.messages_field, cfg.max_length, tokenizer)
        head = read_target_head(cfg.target)
        check_engine_head(session.fetch, first, layers, head, int(head.embed.shape[1]), session.facts.url)
        yield session.fetch


def _first_row(data: Path, field: str, max_length: int, tokenizer: Any) -> Any:
    """The first row of `data` with a supervised token, rendered and masked as `train` does."""
    from training.data import load_conversations, run_rendering, tokenize_rows
    from training.errors import TrainingError

    conversations = load_conversations(data, field)
    rendering = run_rendering(conversations)
    for row in conversations[:64]:
        rendered = tokenize_rows(tokenizer, [row], max_length, rendering)[0]
        if sum(rendered.loss_mask):
            return rendered
    raise TrainingError(f"{data}: none of the first 64 rows has a supervised token within {max_length} tokens")
