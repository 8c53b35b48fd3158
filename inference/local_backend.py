"""An in-process generation backend: the target loaded with `transformers`, many turns batched per `generate`.

For machines with a GPU but no inference server (`datahunt regen --api local --model DIR`). It implements the
same `GenerationBackend` interface as the HTTP backends (`inference.backend`), so the runner's journal, resume,
retries and status work unchanged; it has no endpoint (`has_endpoints` is False: nothing to balance or probe)
and names itself in the records' `server` field (`describe()`, e.g. `in-process transformers (gemma-3-270m)`):
every worker's `generate_turn` puts its rendered prompt on a queue and awaits a future; one batcher task takes
up to `max_batch` pending prompts at a time, left-pads them, runs one `generate` call in a worker thread (the
event loop keeps collecting the next batch meanwhile) and resolves the futures. Prompts are rendered with the
tokenizer's chat template (or `chat_template`, for a base model without one). Sampling is seeded per batch
(`seed + batch number`), so a run is reproducible for a given batch order. `save_gguf_tokenizer` builds the
tokenizer of a GGUF target (e.g. the base Gemma 3 270M, which has no chat template) with a current
`transformers` and saves it with the Gemma turn-marker template, so a machine with an older `transformers`,
whose GGUF tokenizer conversion gives other ids, loads the right one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.chat_render import Reasoning, ToolRendering, render_ids, tool_support
from core.tool_calls import Tool
from inference.backend import RawBackend
from inference.generation import RowError, Sampling, TurnResult

logger = logging.getLogger(__name__)

# Gemma's turn markers, for a base checkpoint that ships no template (a system turn joins the first user turn).
GEMMA_TURN_TEMPLATE = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set first = messages[0]['content'] + '\\n\\n' %}"
    "{% set turns = messages[1:] %}{% else %}{% set first = '' %}{% set turns = messages %}{% endif %}"
    "{% for m in turns %}{% set role = 'model' if m['role'] == 'assistant' else m['role'] %}"
    "<start_of_turn>{{ role }}\n{{ (first if loop.first else '') + m['content'] }}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)


def save_gguf_tokenizer(gguf_file: Path, out_dir: Path, *, chat_template: str = GEMMA_TURN_TEMPLATE) -> Any:
    """Build the tokenizer stored in `gguf_file`, give it `chat_template`, save it into `out_dir`; return it."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name)
    tokenizer.chat_template = chat_template
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(str(out_dir))
    return tokenizer


def render_prompt(tokenizer: Any, chat_template: str | None, history: list[dict[str, Any]], limit: int, *,
                  tools: list[Tool] | None = None, reasoning: Reasoning = Reasoning.KEEP,
                  tool_rendering: ToolRendering = ToolRendering.NATIVE) -> list[int]:
    """Prompt ids for `history` with the generation prompt, rendered once by the one renderer (tools, reasoning
    switch; the template holds the special tokens); RowError when they exceed `limit`."""
    ids = render_ids(tokenizer, history, tools=tools, reasoning=reasoning, tool_rendering=tool_rendering,
                     chat_template=chat_template, add_generation_prompt=True)
    if len(ids) > limit:
        raise RowError(f"prompt of {len(ids)} tokens exceeds the local backend's {limit}")
    return ids


@dataclass
class _Pending:
    ids: list[int]
    sampling: Sampling
    future: asyncio.Future[TurnResult]
    queued_at: float


class LocalTransformersBackend(RawBackend):
    """Answers turns with a local `transformers` causal LM, batching concurrent requests into one `generate`."""

    api = "local"
    has_endpoints = False

    def __init__(
        self, model: Any, tokenizer: Any, *, chat_template: str | None = None, max_batch: int = 256,
        max_prompt_tokens: int = 2048, gather_s: float = 0.05, name: str | None = None,
    ) -> None:
        if chat_template is None and not getattr(tokenizer, "chat_template", None):
            raise ValueError("the tokenizer has no chat template; pass chat_template (e.g. the manifest's)")
        self.model = model
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self.max_batch = max_batch
        self.max_prompt_tokens = max_prompt_tokens
        self.gather_s = gather_s
        self.name = name
        self.batches = 0
        self.batch_sizes: list[int] = []
        self._queue: asyncio.Queue[_Pending] | None = None
        self._task: asyncio.Task[None] | None = None
        self._pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self._stop_ids = _stop_ids(model, tokenizer)

    def describe(self) -> str:
        """Return how records name this backend as their server: in-process plain `generate`, and the model."""
        return f"in-process transformers ({self.name or 'model'})"

    @classmethod
    def load(cls, folder: Path, *, device: str = "auto", chat_template: str | None = None, engine: str = "auto",
             decode_attention: str = "sdpa", **kwargs: Any) -> RawBackend:
        """Load the model (bf16 on GPU, fp32 on CPU) and tokenizer from a local folder.

        engine: `static` answers through the continuous-batching static-cache engine (Llama-family targets),
        `generate` through plain batched `generate`, `auto` the engine where the model allows it.
        decode_attention: how the engine's decode steps attend to the cache (`StaticLlama`'s choices).
        """
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from inference.decoding.static_llama import SUPPORTED

        if engine not in {"auto", "static", "generate"}:
            raise ValueError(f"engine must be auto, static or generate, not {engine!r}")
        use_cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
        dtype = torch.bfloat16 if use_cuda else torch.float32
        model: Any = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype)
        model = model.to("cuda" if use_cuda else "cpu").eval()
        tokenizer = AutoTokenizer.from_pretrained(str(folder))
        supported = model.config.model_type in SUPPORTED
        if engine == "static" and not supported:
            raise ValueError(f"the static-cache engine supports {sorted(SUPPORTED)}, not {model.config.model_type!r}")
        if engine == "generate" or not supported:
            return cls(model, tokenizer, chat_template=chat_template, name=folder.name, **kwargs)
        from inference.engine_backend import LocalEngineBackend

        return LocalEngineBackend(model, tokenizer, stop_ids=_stop_ids(model, tokenizer), chat_template=chat_template,
                                  slots=kwargs.get("max_batch", 256),
                                  max_prompt_tokens=kwargs.get("max_prompt_tokens", 2048), name=folder.name,
                                  decode_attention=decode_attention)

    def render_ids(self, history: list[dict[str, Any]], tools: list[Tool] | None = None) -> list[int]:
        """Prompt ids for `history` with the generation prompt (the template holds the special tokens)."""
        return render_prompt(self.tokenizer, self.chat_template, history, self.max_prompt_tokens, tools=tools,
                             reasoning=self.reasoning, tool_rendering=self.tool_rendering)

    def tool_support_problem(self) -> str | None:
        """Return why the chat template prompts are rendered with cannot render tool use, else None."""
        return tool_support(self.tokenizer, self.chat_template)

    async def generate_turn(self, history: list[dict[str, Any]], sampling: Sampling, *,
                            endpoint: str | None = None, tools: list[Tool] | None = None) -> TurnResult:
        """Queue this turn for the next batch and wait for its answer (there is no endpoint: it is ignored)."""
        return await self.generate_ids(self.render_ids(history, tools), sampling)

    async def generate_ids(self, ids: list[int], sampling: Sampling, *, stop: tuple[str, ...] = (),
                           endpoint: str | None = None) -> TurnResult:
        """Continue the raw prompt `ids` (no template applied) until an end-of-turn id: the model's, plus each
        `stop` marker that is one token of the vocabulary."""
        self._stop_ids |= marker_ids(self.tokenizer, stop)
        if len(ids) > self.max_prompt_tokens:
            raise RowError(f"prompt of {len(ids)} tokens exceeds the local backend's {self.max_prompt_tokens}")
        if self._queue is None or self._task is None or self._task.done():
            self._queue = asyncio.Queue()
            self._task = asyncio.create_task(self._batcher(self._queue))
        future: asyncio.Future[TurnResult] = asyncio.get_running_loop().create_future()
        await self._queue.put(_Pending(ids, sampling, future, time.monotonic()))
        return await future

    async def aclose(self) -> None:
        """Stop the batcher task (the runner's loop ends it anyway when the run finishes)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _batcher(self, queue: asyncio.Queue[_Pending]) -> None:
        while True:
            first = await queue.get()
            await asyncio.sleep(self.gather_s)  # let the other workers' turns arrive
            batch = [first]
            while len(batch) < self.max_batch and not queue.empty():
                batch.append(queue.get_nowait())
            live = [p for p in batch if not p.future.done()]
            # One generate call per sampling setting (a run normally has one). The seed does not split a batch:
            # it differs per sample of a prompt (--samples), and this backend seeds per batch anyway.
            groups: dict[Sampling, list[_Pending]] = {}
            for pending in live:
                groups.setdefault(pending.sampling.model_copy(update={"seed": None}), []).append(pending)
            for group in groups.values():
                sampling = group[0].sampling
                try:
                    results = await asyncio.to_thread(self._generate, [p.ids for p in group], sampling)
                except Exception as exc:  # an OOM or a model error fails these turns as row errors
                    logger.exception("local generate failed for a batch of %d", len(group))
                    for p in group:
                        if not p.future.done():
                            p.future.set_exception(RowError(f"local generate failed: {type(exc).__name__}: {exc}"))
                    continue
                now = time.monotonic()
                for p, (text, n_new, finish) in zip(group, results, strict=True):
                    if not p.future.done():
                        p.future.set_result(TurnResult(
                            content=text, reasoning=None, finish_reason=finish, prompt_tokens=len(p.ids),
                            completion_tokens=n_new, latency_s=now - p.queued_at, model=self.name))

    def _generate(self, prompts: list[list[int]], sampling: Sampling) -> list[tuple[str, int, str]]:
        """Left-pad, run one `generate`, return (text, new tokens, finish reason) per prompt."""
        import torch

        device = next(self.model.parameters()).device
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self._pad, dtype=torch.long)
        attn = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, width - len(p) :] = torch.tensor(p)
            attn[i, width - len(p) :] = 1
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed + self.batches)
        greedy = sampling.temperature == 0
        kwargs: dict[str, bool | float | int] = {"do_sample": False} if greedy else {
            "do_sample": True, "temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": 0}
        with torch.no_grad():
            out = self.model.generate(
                input_ids=ids.to(device), attention_mask=attn.to(device), max_new_tokens=sampling.max_tokens,
                eos_token_id=sorted(self._stop_ids), pad_token_id=self._pad, **kwargs)
        self.batches += 1
        self.batch_sizes.append(len(prompts))
        results = []
        for row in out[:, width:].tolist():
            stop = next((i for i, t in enumerate(row) if t in self._stop_ids), None)
            tokens = row if stop is None else row[:stop]
            finish = "stop" if stop is not None else "length"
            text = self.tokenizer.decode(tokens, skip_special_tokens=True)
            results.append((text, len(tokens) + (stop is not None), finish))
        return results


def marker_ids(tokenizer: Any, markers: tuple[str, ...]) -> set[int]:
    """Return the ids of the `markers` that are single tokens of the tokenizer's vocabulary."""
    vocab = tokenizer.get_vocab()
    return {int(vocab[m]) for m in markers if m in vocab}


def _stop_ids(model: Any, tokenizer: Any) -> set[int]:
    """End-of-turn ids: the generation config's and tokenizer's eos, plus `<end_of_turn>` where it exists."""
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), getattr(model, "config", None), tokenizer):
        eos = getattr(source, "eos_token_id", None)
        if isinstance(eos, int):
            ids.add(eos)
        elif isinstance(eos, list):
            ids.update(int(e) for e in eos)
    for marker in ("<end_of_turn>", "<|im_end|>", "<|eot_id|>"):
        token = tokenizer.convert_tokens_to_ids(marker) if marker in tokenizer.get_vocab() else None
        if isinstance(token, int):
            ids.add(token)
    return ids
