"""The in-process backend at full speed: turns answered by the continuous-batching engine in a worker thread.

Same interface as every backend (`inference.backend`), so the runner's journal, resume and status are unchanged:
each worker renders its prompt with the target's chat template, hands it to the engine thread and awaits a
future; the thread keeps `slots` rows decoding, refills a slot as soon as its row ends, and resolves futures
on the event loop. The engine (and its CUDA graph) is built at the first turn, sized from that turn's
`max_tokens`: `max_len = max_prompt_tokens + max_tokens` positions per slot, and `slots` is the runner's
concurrency (`start`). Like the plain backend it has no endpoint and names itself (`describe()`). A
Llama-family target only (`inference.decoding.static_llama`); `LocalTransformersBackend` (plain `generate`)
remains for the others and is the baseline the benchmark compares against.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from pathlib import Path
from typing import Any

from core.chat_render import tool_support
from core.tool_calls import Tool
from inference.backend import DEFAULT_TIMEOUTS, RawBackend, Timeouts
from inference.generation import RowError, Sampling, TurnResult

logger = logging.getLogger(__name__)


class LocalEngineBackend(RawBackend):
    """Answers turns with a local Llama-family model through `ContinuousEngine`."""

    api = "local"
    has_endpoints = False

    def __init__(self, model: Any, tokenizer: Any, *, stop_ids: set[int], chat_template: str | None = None,
                 slots: int = 256, max_prompt_tokens: int = 2048, name: str | None = None,
                 use_graph: bool = True, decode_attention: str = "sdpa") -> None:
        if chat_template is None and not getattr(tokenizer, "chat_template", None):
            raise ValueError("the tokenizer has no chat template; pass chat_template (e.g. the manifest's)")
        self.model, self.tokenizer, self.chat_template = model, tokenizer, chat_template
        self.slots, self.max_prompt_tokens, self.name = slots, max_prompt_tokens, name
        self.stop_ids, self.use_graph, self.decode_attention = stop_ids, use_graph, decode_attention
        self.engine: Any = None
        self.stats: Any = None  # the engine's counters, kept after close
        self._inbox: queue.Queue[Any] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._max_tokens: int | None = None
        self._error: RowError | None = None

    def describe(self) -> str:
        """Return how records name this backend as their server: the in-process engine, and the model."""
        return f"in-process static-cache engine ({self.name or 'model'})"

    # Runner-facing statistics (the plain-generate backend reports batches; here the engine's counters).
    @property
    def batches(self) -> int:
        return int(self.stats.steps) if self.stats else 0

    @property
    def batch_sizes(self) -> list[int]:
        return [self.slots]

    def in_flight_tokens(self) -> int:
        """Tokens the engine has written for answers not finished yet (the status counts them in tok/s)."""
        return int(self.stats.in_flight_tokens) if self.stats else 0

    def kv_bytes(self, max_tokens: int) -> int:
        """Bytes the engine's KV cache takes for `max_tokens` new tokens a row (keys and values, every layer)."""
        cfg = self.model.config
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        per_position = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * self.model.dtype.itemsize
        return int(per_position * self.slots * (self.max_prompt_tokens + max_tokens))

    def check_fits(self, max_tokens: int, *, headroom: float = 0.8) -> None:
        """Raise ValueError, saying what to lower, when the KV cache would not fit the device's free memory."""
        import torch

        need = self.kv_bytes(max_tokens)
        device = next(self.model.parameters()).device
        free = torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else _available_ram()
        if free is not None and need > headroom * free:
            raise ValueError(
                f"the local engine's KV cache needs {need / 2**30:.1f} GiB ({self.slots} slots x "
                f"{self.max_prompt_tokens + max_tokens} positions) but {free / 2**30:.1f} GiB is free on {device}: "
                "lower --concurrency or --max-tokens")

    def start(self, requests: int, timeouts: Timeouts = DEFAULT_TIMEOUTS) -> None:
        """Size the engine for at most `requests` turns in flight (the run's workers) when that is below `slots`.

        Every decode step computes all slots, live or not, so a short run (6 prompts at --concurrency 32) would
        otherwise decode 26 empty rows a step (`benchmarks/regen_local_cpu.py`). Only before the engine starts
        (its thread starts at the first turn); there are no timeouts in process.
        """
        with self._lock:
            if self._thread is None and 0 < requests < self.slots:
                self.slots = requests

    def render_ids(self, history: list[dict[str, Any]], tools: list[Tool] | None = None) -> list[int]:
        """Prompt ids for `history` with the generation prompt (the template holds the special tokens)."""
        from inference.local_backend import render_prompt

        return render_prompt(self.tokenizer, self.chat_template, history, self.max_prompt_tokens, tools=tools,
                             reasoning=self.reasoning, tool_rendering=self.tool_rendering)

    def tool_support_problem(self) -> str | None:
        """Return why the chat template prompts are rendered with cannot render tool use, else None."""
        return tool_support(self.tokenizer, self.chat_template)

    async def generate_turn(self, history: list[dict[str, Any]], sampling: Sampling, *,
                            endpoint: str | None = None, tools: list[Tool] | None = None) -> TurnResult:
        """Hand this turn to the engine thread and wait for its answer (there is no endpoint: it is ignored)."""
        return await self.generate_ids(self.render_ids(history, tools), sampling)

    async def generate_ids(self, ids: list[int], sampling: Sampling, *, stop: tuple[str, ...] = (),
                           endpoint: str | None = None) -> TurnResult:
        """Continue the raw prompt `ids` (no template applied) until an end-of-turn id (`stop_ids`, plus each
        `stop` marker that is one token, when the engine has not started yet)."""
        from inference.decoding.continuous import Request
        from inference.local_backend import marker_ids

        if self._thread is None:
            self.stop_ids = self.stop_ids | marker_ids(self.tokenizer, stop)

        if len(ids) > self.max_prompt_tokens:
            raise RowError(f"prompt of {len(ids)} tokens exceeds the local backend's {self.max_prompt_tokens}")
        self._start(sampling)
        if sampling.max_tokens != self._max_tokens:
            raise RowError(f"this engine was sized for max_tokens={self._max_tokens}, not {sampling.max_tokens}")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[TurnResult] = loop.create_future()
        queued = time.monotonic()
        request = Request(ids, sampling.max_tokens, sampling.temperature, sampling.top_p, tag=(loop, future, queued))
        self._inbox.put(request)
        if self._error is not None:  # the engine died: nobody will read the inbox again
            raise self._error
        return await future

    def _start(self, sampling: Sampling) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._max_tokens = sampling.max_tokens
            self._thread = threading.Thread(target=self._serve, args=(sampling,), name="datahunt-engine",
                                            daemon=True)
            self._thread.start()

    def _build(self, sampling: Sampling) -> Any:
        from inference.decoding.continuous import ContinuousEngine
        from inference.decoding.static_llama import StaticLlama

        runner = StaticLlama(self.model, slots=self.slots, max_len=self.max_prompt_tokens + sampling.max_tokens,
                             decode_attention=self.decode_attention)
        return ContinuousEngine(runner, self.stop_ids, seed=sampling.seed, use_graph=self.use_graph)

    def _serve(self, sampling: Sampling) -> None:
        try:
            self.engine = self._build(sampling)
            self.stats = self.engine.stats
        except Exception as exc:  # e.g. out of memory: every turn fails as a row error, the log says why
            logger.exception("the local engine could not start")
            self._fail_all(RowError(f"local engine failed to start: {type(exc).__name__}: {exc}"))
            return
        engine = self.engine
        while not self._closed.is_set():
            self._drain(block=not engine.busy)
            if not engine.busy:
                continue
            try:
                finished = engine.pump()
            except Exception as exc:  # a model error ends the run's live rows as row errors
                logger.exception("the local engine failed")
                self._fail_all(RowError(f"local engine failed: {type(exc).__name__}: {exc}"))
                return
            for done in finished:
                self._resolve(done)

    def _drain(self, *, block: bool) -> None:
        try:
            item = self._inbox.get(timeout=0.05) if block else self._inbox.get_nowait()
        except queue.Empty:
            return
        while True:
            try:
                self.engine.submit(item)
            except ValueError as exc:
                loop, future, _ = item.tag
                loop.call_soon_threadsafe(_set_exception, future, RowError(str(exc)))
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return

    def _resolve(self, done: Any) -> None:
        loop, future, queued = done.request.tag
        tokens = done.tokens[:-1] if done.finish_reason == "stop" else done.tokens
        result = TurnResult(content=self.tokenizer.decode(tokens, skip_special_tokens=True), reasoning=None,
                            finish_reason=done.finish_reason, prompt_tokens=len(done.request.ids),
                            completion_tokens=len(done.tokens), latency_s=time.monotonic() - queued,
                            model=self.name)
        loop.call_soon_threadsafe(_set_result, future, result)

    def _fail_all(self, error: RowError) -> None:
        self._error = error
        pending = list(self.engine.waiting) if self.engine else []
        pending += [r for r in (self.engine.owner if self.engine else []) if r is not None]
        while True:
            try:
                pending.append(self._inbox.get_nowait())
            except queue.Empty:
                break
        for request in pending:
            loop, future, _ = request.tag
            loop.call_soon_threadsafe(_set_exception, future, error)

    async def aclose(self) -> None:
        """Stop the engine thread and drop the engine (its KV cache and CUDA graph free their memory)."""
        self._closed.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 30.0)
        if self._thread is None or not self._thread.is_alive():
            self.engine = None


def _available_ram() -> int | None:
    """MemAvailable from /proc/meminfo, in bytes (None where there is none to read)."""
    try:
        for line in Path("/proc/meminfo").read_text().split("\n"):
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _set_result(future: asyncio.Future[TurnResult], result: TurnResult) -> None:
    if not future.done():
        future.set_result(result)


def _set_exception(future: asyncio.Future[TurnResult], error: Exception) -> None:
    if not future.done():
        future.set_exception(error)
