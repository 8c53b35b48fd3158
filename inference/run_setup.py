"""What a regeneration run settles before its first request: its settings (`RunConfig`), the run file that
records them in the output folder, the rows it covers, whether the target's template can render their tools,
and the pool of request slots it answers through. `inference.runner` drives the run from here on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from core.chat_render import ToolRendering, has_tool_turns
from inference.backend import GenerationBackend
from inference.endpoints import EndpointPool
from inference.errors import InferenceError
from inference.generation import Reasoning, Sampling
from inference.records import InputError, InputRow, expand_samples, load_rows, stratified


@dataclass
class RunConfig:
    """Everything one regeneration run needs besides the backend."""

    input_path: Path
    out_dir: Path
    endpoints: list[str]  # the servers' URLs; empty for a backend without endpoints (in process)
    concurrency: int = 32
    sampling: Sampling = field(default_factory=Sampling)
    reasoning: Reasoning = Reasoning.KEEP
    tool_rendering: ToolRendering = ToolRendering.NATIVE  # how tool calls reach the prompts (recorded per row)
    max_attempts: int = 6
    backoff_base_s: float = 0.5
    backoff_cap_s: float = 30.0
    connect_timeout_s: float = 10.0
    request_timeout_s: float = 600.0
    retry_failed: bool = False
    status_interval_s: float = 1.0
    fsync_interval_s: float = 1.0
    reprobe_interval_s: float = 2.0
    dead_after_s: float = 600.0
    limit: int | None = None
    sample: int | None = None  # a stratified trial: this many rows spread over the categories (records.stratified)
    model: str | None = None
    allow_new_sampling: bool = False  # resume a run whose earlier rows used other sampling settings
    samples: int = 1  # answers per prompt to regenerate (expand_samples)


class ToolTemplateError(InferenceError, ValueError):
    """Rows use tools but the template prompts are rendered with cannot render them natively."""


def run_file_data(config: RunConfig, backend: GenerationBackend) -> dict[str, object]:
    """Return what the run file records of a run: its input, servers, backend, model and settings."""
    return {
        "input": str(config.input_path),
        "endpoints": config.endpoints,
        "api": backend.api,
        "backend": backend.describe(),
        "model": config.model,
        "sampling": config.sampling.model_dump(),
        "reasoning": config.reasoning.value,
        "tool_rendering": config.tool_rendering.value,
        "concurrency": config.concurrency,
        "samples": config.samples,
    }


def read_run_file(path: Path) -> dict[str, object]:
    """The run file an earlier run of this folder wrote; InputError when it is not one (garbage, another file)."""
    try:
        before = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: not JSON, or not UTF-8
        raise InputError(f"{path} is not a run file regen wrote ({type(exc).__name__}); use another --out, or "
                         "remove it to start the run over") from None
    if not isinstance(before, dict):
        raise InputError(f"{path} is not a run file regen wrote (not a JSON object); use another --out, or remove "
                         "it to start the run over")
    return before


def select_rows(config: RunConfig) -> tuple[list[InputRow], int]:
    """Return the rows this run covers (limit, stratified sample, samples per prompt) and the duplicates dropped."""
    rows, duplicates = load_rows(config.input_path)
    if config.limit is not None:
        rows = rows[: config.limit]
    if config.sample is not None:
        rows = stratified(rows, config.sample)
    rows = expand_samples(rows, config.samples)
    if not rows:
        raise InputError(f"{config.input_path} holds no rows to regenerate")
    return rows, duplicates


def check_tool_template(rows: list[InputRow], backend: GenerationBackend, rendering: ToolRendering) -> None:
    """Raise ToolTemplateError, in one line with the two ways on, when rows use tools and the backend renders
    them natively through a template that cannot."""
    using = sum(1 for r in rows if r.needs_regeneration and has_tool_turns(r.messages, r.tools))
    problem = backend.tool_support_problem() if using and rendering is ToolRendering.NATIVE else None
    if problem is not None:
        raise ToolTemplateError(
            f"the target's chat template does not render tool use ({problem}) and {using} rows use tools: give the "
            "target a template that does (datahunt target prepare SOURCE --out DIR --chat-template FILE) or "
            "regenerate with datahunt's text rendering of tool calls (--tool-rendering text)")


def endpoint_pool(config: RunConfig, backend: GenerationBackend) -> EndpointPool:
    """Return the run's pool of request slots: one group per server, or, for a backend without endpoints,
    one group named by the backend itself."""
    if backend.has_endpoints and not config.endpoints:
        raise InputError(f"the {backend.api} backend answers through servers: give at least one endpoint")
    if not backend.has_endpoints and config.endpoints:
        raise InputError(f"{backend.describe()} runs in this process: it takes no endpoints ({config.endpoints})")
    names = config.endpoints if backend.has_endpoints else [backend.describe()]
    return EndpointPool.from_urls(names, config.concurrency, reprobe_interval_s=config.reprobe_interval_s,
                                  dead_after_s=config.dead_after_s)
