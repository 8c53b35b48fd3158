"""`datahunt regen`, `datahunt monitor`, `datahunt plan`: the regeneration stage's front door.

`regen` answers every curated prompt again through the target's inference server(s) into a run folder and
resumes when run again; `monitor` shows a run live; `plan` measures the server and writes the plan. Bad
input ends with a one-line error and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import typer

from core.regenerated_set import ERRORS_FILE
from inference.backend_choice import Api
from server.commands.failure import EXIT_FAILED, EXIT_USAGE, fail

if TYPE_CHECKING:
    from curation.manifest import Manifest
    from inference.backend import GenerationBackend, HttpBackend
    from inference.generation import Reasoning
    from inference.runner import RunConfig, RunSummary

T = TypeVar("T")


def _find_manifest(manifest: Path | None, input_path: Path) -> Path | None:
    """Return the manifest given, else `manifest.json` beside (or inside) the curated set, else None."""
    if manifest is not None:
        return manifest
    folder = input_path if input_path.is_dir() else input_path.parent
    return folder / "manifest.json" if (folder / "manifest.json").is_file() else None


def _load_target(manifest: Path | None, input_path: Path) -> Manifest | None:
    """Return the manifest (given, or `manifest.json` beside the curated set), or None."""
    from curation.manifest import ManifestError, load_manifest

    manifest = _find_manifest(manifest, input_path)
    if manifest is None:
        return None
    try:
        return load_manifest(manifest)
    except ManifestError as exc:
        fail(str(exc))


def _chosen(build: Callable[[], T]) -> T:
    """Return what `build` returns; end the command with its message when the backend cannot be built."""
    from inference.backend_choice import BackendChoiceError

    try:
        return build()
    except BackendChoiceError as exc:
        fail(str(exc), EXIT_USAGE if exc.usage else EXIT_FAILED)


def _http_backend(api: Api, plan: Manifest | None, *, model: str | None, tokenizer: str | None,
                  reasoning: Reasoning, send_text: bool) -> HttpBackend:
    """The server backend `api`; SGLang's renders with `--tokenizer`, else the manifest target's tokenizer."""
    from inference.backend_choice import http_backend

    target = plan.target if plan is not None else None
    source = tokenizer or (target.tokenizer or target.model if target is not None else None)
    return _chosen(lambda: http_backend(api, model=model, tokenizer=source, reasoning=reasoning, send_text=send_text,
                                        chat_template=target.chat_template if target is not None else None))


def _choose_backend(api: Api, plan: Manifest | None, *, servers: list[str], model: str | None,
                    tokenizer: str | None, concurrency: int, max_tokens: int, seed: int | None, force: bool,
                    reasoning: Reasoning, send_text: bool) -> tuple[GenerationBackend, str | None]:
    """Return the run's backend and the model the server says it serves (local: the model folder's name),
    after refusing a server that serves another model than the manifest's target (unless `force`)."""
    from inference.backend_choice import check_servers, local_backend
    from inference.server_info import seed_warning

    target = plan.target if plan is not None else None
    if api is Api.LOCAL:
        template = target.chat_template if target is not None else None
        backend = _chosen(lambda: local_backend(model, servers=servers, chat_template=template, batch=concurrency,
                                                max_tokens=max_tokens))
        return backend, Path(str(model)).name
    if not servers:
        fail("pass --server URL (or --api local --model DIR)", EXIT_USAGE)
    check = asyncio.run(check_servers(servers, target.model if target is not None else None))
    if check.mismatches and not force:
        fail("; ".join(check.mismatches) + " (use --force to regenerate anyway)")
    warning = seed_warning(check.info, seed)
    if warning:
        typer.echo(f"warning: {warning}", err=True)
    return _http_backend(api, plan, model=model or check.served, tokenizer=tokenizer, reasoning=reasoning,
                         send_text=send_text), check.served


def _run(config: RunConfig, backend: GenerationBackend, *, progress: bool) -> RunSummary:
    """Run the regeneration with live bars (when asked); end the command with one line when it fails."""
    from rich.console import Console

    from inference.errors import InferenceError
    from inference.monitor import LiveStatus
    from inference.runner import regenerate

    out = config.out_dir
    live = LiveStatus(out, Console(stderr=True)) if progress else contextlib.nullcontext()
    try:
        with live:
            return regenerate(config, backend)
    except InferenceError as exc:
        fail(str(exc))
    except OSError as exc:  # a full disk or a read-only folder: finished rows are kept, the run resumes
        where = f" ({exc.filename})" if exc.filename else ""
        fail(f"cannot write the run's outputs{where}: {exc.strerror or exc}; free space and run the same "
             f"command again to resume ({out})")
    except KeyboardInterrupt:
        fail(f"interrupted; run the same command again to resume ({out})", 130)


def _report(summary: RunSummary, out: Path, max_tokens: int) -> None:
    """Print what the run did, its quality warnings and the next steps."""
    from inference.quality import warnings

    typer.echo(
        f"{summary.done} regenerated, {summary.failed} failed, {summary.skipped} already finished "
        f"of {summary.total} rows; {summary.completion_tokens:,} tokens → {out}"
    )
    for line in warnings(summary.status.get("quality") or {}, max_tokens):
        typer.echo(f"warning: {line}", err=True)
    stopped = summary.status.get("stopped") or {}
    if stopped:
        reasons = ", ".join(f"{reason} {n}" for reason, n in stopped.items())
        typer.echo(f"{sum(stopped.values())} row(s) stopped where the target's tool calls left the recording "
                   f"(the prefix is kept): {reasons}")
    if summary.failed:
        typer.echo(f"next: datahunt regen … --retry-failed runs the {summary.failed} failed row(s) again "
                   f"({out / ERRORS_FILE})")
    typer.echo(f"next: datahunt train --data {out} --target TARGET_DIR --out DRAFT")


def regen(
    input_path: Path = typer.Option(..., "--input",
                                    help="Curated folder (data/*.parquet or samples.jsonl) or a JSONL file."),
    servers: list[str] = typer.Option([], "--server",
                                      help="Server base URL; repeat for several (or one sglang-router URL)."),
    out: Path = typer.Option(..., "--out", help="Run folder: regenerated.jsonl, errors.jsonl, status.json."),
    api: Api = typer.Option(Api.OPENAI, "--api", help="openai: /v1/chat/completions; sglang: native /generate; "
                            "local: in-process transformers, batched (--model DIR, no --server)."),
    concurrency: int = typer.Option(32, "--concurrency", min=1,
                                    help="Requests in flight per server (local: batch size)."),
    model: str | None = typer.Option(None, "--model", help="Model name sent to the server (default: the served one); "
                                     "--api local: the model folder."),
    tokenizer: str | None = typer.Option(None, "--tokenizer",
                                         help="Target tokenizer for --api sglang (path or Hub id)."),
    manifest: Path | None = typer.Option(None, "--manifest",
                                         help="Manifest naming the target (default: beside the input)."),
    temperature: float = typer.Option(0.7, "--temperature", min=0.0),
    top_p: float = typer.Option(0.95, "--top-p", min=0.0, max=1.0),
    max_tokens: int = typer.Option(2048, "--max-tokens", min=1),
    seed: int | None = typer.Option(None, "--seed"),
    reasoning: str = typer.Option("keep", "--reasoning", help="How the target's thinking is served: served-off "
                                  "(enable_thinking false), served-on (true), keep (the template's default, "
                                  "thinking kept), drop (default, thinking left out). Recorded on every row; "
                                  "train and eval-accept render the same way."),
    tool_rendering: str = typer.Option("native", "--tool-rendering", help="native: tool calls through the "
                                       "template's own tokens; text: datahunt's text blocks, for a template "
                                       "without tool support. Recorded on every row."),
    send_text: bool = typer.Option(False, "--send-text", help="--api sglang: send the rendered text instead of token "
                                   "ids (SGLang then adds special tokens: a template's BOS arrives twice)."),
    retry_failed: bool = typer.Option(False, "--retry-failed", help="Run the rows in errors.jsonl again."),
    max_attempts: int = typer.Option(6, "--max-attempts", min=1, help="Attempts per turn on 429/5xx/timeouts."),
    request_timeout: float = typer.Option(600.0, "--request-timeout", min=0.1, help="Seconds one request may take."),
    limit: int | None = typer.Option(None, "--limit", min=1, help="Only the first N input rows (a trial run; a "
                                     "curated set lists its rows category by category: see --sample)."),
    sample: int | None = typer.Option(None, "--sample", min=1, help="A trial run of N rows spread over the "
                                      "categories (one of each in turn, in input order)."),
    samples: int = typer.Option(1, "--samples", min=1, help="Answers per prompt (ids <id>#s1.. after the first; "
                                "with --seed, seed + k for answer k). Run again with a larger N to add answers."),
    force: bool = typer.Option(False, "--force", help="Regenerate even through a server serving another model, "
                               "or resume a run with other sampling settings."),
    progress: bool = typer.Option(True, "--progress/--no-progress",
                                  help="Draw live bars on stderr (only when it is a terminal)."),
) -> None:
    """Regenerate every curated prompt with the target model; run again to resume."""
    from core.chat_render import ToolRendering
    from inference.generation import Reasoning, Sampling
    from inference.runner import RunConfig

    try:
        mode = Reasoning(reasoning)
    except ValueError:
        fail(f"--reasoning must be served-off, served-on, keep or drop, not {reasoning!r}", EXIT_USAGE)
    try:
        rendering = ToolRendering(tool_rendering)
    except ValueError:
        fail(f"--tool-rendering must be native or text, not {tool_rendering!r}", EXIT_USAGE)
    if not input_path.exists():
        fail(f"input {input_path} does not exist", EXIT_USAGE)
    if limit is not None and sample is not None:
        fail("pass --limit N (the first N rows) or --sample N (N rows over the categories), not both", EXIT_USAGE)
    plan = _load_target(manifest, input_path)
    backend, served = _choose_backend(api, plan, servers=servers, model=model, tokenizer=tokenizer,
                                      concurrency=concurrency, max_tokens=max_tokens, seed=seed, force=force,
                                      reasoning=mode, send_text=send_text)
    expected = plan.target.model if plan is not None and plan.target is not None else None
    config = RunConfig(
        input_path=input_path, out_dir=out, endpoints=list(servers), concurrency=concurrency,
        sampling=Sampling(temperature=temperature, top_p=top_p, max_tokens=max_tokens, seed=seed),
        reasoning=mode, tool_rendering=rendering, max_attempts=max_attempts, request_timeout_s=request_timeout,
        retry_failed=retry_failed,
        limit=limit, sample=sample, model=model or served or expected, allow_new_sampling=force, samples=samples,
    )
    _report(_run(config, backend, progress=progress), out, max_tokens)


def monitor(
    run_dir: Path = typer.Argument(..., help="A regeneration run folder."),
    once: bool = typer.Option(False, "--once", help="Print the status once and exit."),
    as_json: bool = typer.Option(False, "--json", help="Print the raw status JSON once."),
) -> None:
    """Show a regeneration run live: rows, tokens, tok/s, ETA and per-server load."""
    from inference.monitor import watch
    from inference.status import UnreadableStatusError, read_status

    try:
        if as_json:
            status = read_status(run_dir)
            if status is None:
                fail(f"{run_dir} has no status.json: not a regeneration run (or not started yet)")
            typer.echo(json.dumps(status, indent=1))
            return
        status = watch(run_dir, once=once)
    except (FileNotFoundError, UnreadableStatusError) as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        raise typer.Exit(0) from None
    if status.get("state") == "running":
        typer.echo(f"next: `datahunt monitor {run_dir}` to follow it live; once it finishes, "
                   f"`datahunt train --data {run_dir} --target TARGET --out DRAFT`")
    else:
        typer.echo(f"next: datahunt train --data {run_dir} --target TARGET --out DRAFT (a stopped run resumes with "
                   "the same regen command)")


def plan(
    curated: Path = typer.Option(..., "--curated", help="Curated folder or JSONL file."),
    server: str = typer.Option(..., "--server", help="Server base URL to measure."),
    manifest: Path | None = typer.Option(None, "--manifest", help="Manifest (default: beside the curated set)."),
    out: Path | None = typer.Option(None, "--out", help="Plan file (.md; the .json is written beside it)."),
    api: Api = typer.Option(Api.OPENAI, "--api"),
    tokenizer: str | None = typer.Option(None, "--tokenizer"),
    model: str | None = typer.Option(None, "--model"),
    probe_rows: int = typer.Option(16, "--probe-rows", min=1, help="Real prompts in the throughput probe."),
    concurrency: int = typer.Option(8, "--concurrency", min=1),
    temperature: float = typer.Option(0.7, "--temperature", min=0.0),
    top_p: float = typer.Option(0.95, "--top-p", min=0.0, max=1.0),
    max_tokens: int = typer.Option(2048, "--max-tokens", min=1),
) -> None:
    """Measure the server with a short probe and write the regeneration plan (Markdown and JSON)."""
    from inference.backend_choice import check_servers
    from inference.generation import Reasoning, Sampling
    from inference.plan import build_plan, probe_throughput, render_markdown
    from inference.records import InputError, load_rows

    try:
        rows, _ = load_rows(curated)
    except InputError as exc:
        fail(str(exc))
    plan_manifest = _load_target(manifest, curated)
    served = asyncio.run(check_servers([server], None)).served
    backend = _http_backend(api, plan_manifest, model=model or served, tokenizer=tokenizer, reasoning=Reasoning.KEEP,
                            send_text=False)
    sampling = Sampling(temperature=temperature, top_p=top_p, max_tokens=max_tokens)
    sample = [r for r in rows if r.needs_regeneration][:probe_rows]
    if not sample:
        fail(f"{curated} has no rows that need regeneration")
    probe = asyncio.run(probe_throughput(backend, server, sample, sampling=sampling, concurrency=concurrency))
    if probe.failed == probe.requests:
        fail(f"every probe request to {server} failed; is the server up?")
    result = build_plan(rows, probe, server=server, sampling=sampling,
                        manifest=plan_manifest.model_dump(mode="json") if plan_manifest is not None else None)
    found = _find_manifest(manifest, curated)
    result["manifest"]["path"] = str(found.resolve()) if found else None
    out = out or (curated if curated.is_dir() else curated.parent) / "regen_plan.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_markdown(result), encoding="utf-8")
    out.with_suffix(".json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    typer.echo(f"plan written to {out.resolve()} and {out.with_suffix('.json').resolve()}")


def register(app: typer.Typer) -> None:
    """Attach `regen`, `monitor` and `plan` to the main app."""
    app.command("regen")(regen)
    app.command("monitor")(monitor)
    app.command("plan")(plan)
