"""`datahunt write-prompts`: prompts written by the target itself, per category, as a source a manifest names.

The target continues its own chat template's user-turn opening (after a seed topic line from
`prompts/seed_topics/<category>.md`) through the same backends as `regen` (`--api openai|sglang` against a
server's raw-completion endpoint, `--api local` in process), resumable like `regen` (run it again). The work
lives in `inference/prompt_writer.py`; this module parses options, draws the live bars, prints the counts, and
with `--manifest` adds one `kind: target-written` source per category to that manifest.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from core.types import Category
from server.commands.failure import EXIT_FAILED, EXIT_USAGE, fail

if TYPE_CHECKING:
    from inference.backend import RawBackend
    from inference.prompt_writer import PrefixBackend, WriterConfig, WriterReport
    from inference.runner import RunSummary


def _categories(value: str | None) -> list[str]:
    if not value:
        return [c.value for c in Category]
    names = [v.strip() for v in value.split(",") if v.strip()]
    known = {c.value for c in Category}
    unknown = [n for n in names if n not in known]
    if unknown:
        fail(f"unknown categories {unknown}; known: {', '.join(sorted(known))}", EXIT_USAGE)
    return names


def _tokenizer(target: Path, chat_template: str | None) -> tuple[Any, Any]:
    from transformers import AutoTokenizer

    from inference.chat_template import TemplateError
    from inference.template_prefix import user_turn_prefix

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(target))
    except (OSError, ValueError) as exc:
        fail(f"cannot load the target tokenizer from {target}: {exc}", EXIT_USAGE)
    try:
        return tokenizer, user_turn_prefix(tokenizer, chat_template)
    except TemplateError as exc:
        fail(str(exc), EXIT_USAGE)


def _inner_backend(api: str, target: Path, model: str | None, servers: list[str], concurrency: int,
                   chat_template: str | None, max_tokens: int) -> tuple[RawBackend, str | None]:
    """The backend that continues the prefixes, and the model name it records (local: the folder's name)."""
    from inference.backend_choice import Api, BackendChoiceError, http_backend, local_backend

    try:
        choice = Api(api)
    except ValueError:
        fail(f"--api must be openai, sglang or local, not {api!r}", EXIT_USAGE)
    if choice is not Api.LOCAL and not servers:
        fail("pass --server URL (or --api local)", EXIT_USAGE)
    try:
        if choice is Api.LOCAL:
            return local_backend(target, servers=servers, chat_template=chat_template, batch=concurrency,
                                 max_tokens=max_tokens), target.name
        return http_backend(choice, model=model, tokenizer=str(target), chat_template=chat_template), model
    except BackendChoiceError as exc:
        fail(str(exc), EXIT_USAGE if exc.usage else EXIT_FAILED)


def _read_template(chat_template: Path | None) -> str | None:
    """Return the text of the `--chat-template` file, None when none is given."""
    if chat_template is None:
        return None
    if not chat_template.is_file():
        fail(f"chat template {chat_template} does not exist", EXIT_USAGE)
    return chat_template.read_text(encoding="utf-8")


def _run_writer(config: WriterConfig, backend: PrefixBackend, *, progress: bool) -> tuple[RunSummary, WriterReport]:
    """Run the prompt writer with live bars (when asked); end the command with one line when it fails."""
    from rich.console import Console

    from inference.errors import InferenceError
    from inference.monitor import LiveStatus
    from inference.prompt_writer import GENERATION_DIR
    from inference.prompt_writer import write_prompts as run_writer

    out = config.out_dir
    live = LiveStatus(out / GENERATION_DIR, Console(stderr=True)) if progress else contextlib.nullcontext()
    try:
        with live:
            return run_writer(config, backend)
    except InferenceError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot write {out}: {exc.strerror or exc}; run the same command again to resume")
    except KeyboardInterrupt:
        fail(f"interrupted; run the same command again to resume ({out})", 130)


def _report(summary: RunSummary, report: WriterReport, out: Path, manifest: Path | None) -> None:
    """Print the counts per category, then add the sources to `manifest` (or say how to)."""
    for category, counts in report.per_category.items():
        drops = ", ".join(f"{r} {n}" for r, n in counts["drops"].items()) or "none"
        pending = f", {counts['pending']} not answered" if counts["pending"] else ""
        typer.echo(f"{category}: {counts['kept']} of {counts['requested']} kept (dropped: {drops}){pending}")
    typer.echo(f"{report.kept} prompts in {out / 'prompts'}; {summary.completion_tokens:,} tokens written")
    if manifest is not None:
        added = _add_to_manifest(manifest, out, {c: f for c, f in report.files.items()
                                                 if report.per_category[c]["kept"]})
        typer.echo(f"{added} target-written source(s) in {manifest}")
    else:
        typer.echo("next: add them to a manifest: datahunt write-prompts … --manifest FILE (or a source "
                   '{"kind": "target-written", "path": "…/prompts/<category>.jsonl", "category": …})')


def _add_to_manifest(manifest: Path, out: Path, files: dict[str, str]) -> int:
    """Add (or replace) one target-written source per category file in `manifest`; return how many."""
    from curation.errors import CurationError
    from curation.manifest import Manifest, Source, dump_manifest, load_manifest

    folder = manifest.resolve().parent
    if not out.resolve().is_relative_to(folder):
        fail(f"{out} is not inside the manifest's folder {folder}: local sources must lie below it", EXIT_USAGE)
    try:
        loaded = load_manifest(manifest) if manifest.exists() else Manifest()
        paths = {(out.resolve() / name).relative_to(folder).as_posix(): c for c, name in files.items()}
        sources = [s for s in loaded.sources if not (s.kind == "target-written" and s.path in paths)]
        sources += [Source(kind="target-written", path=p, hub_id=f"target-written/{c}", category=Category(c))
                    for p, c in paths.items()]
        updated = loaded.model_copy(update={"sources": sources})
        Manifest.model_validate(updated.model_dump())  # the same rules as a loaded file (unique names, …)
    except (CurationError, ValueError) as exc:
        fail(str(exc), EXIT_USAGE)
    manifest.write_text(dump_manifest(updated), encoding="utf-8")
    return len(paths)


def write_prompts(
    target: Path = typer.Option(..., "--target", help="Target folder (tokenizer with its chat template; "
                                "--api local: the model too)."),
    out: Path = typer.Option(..., "--out", "-o", help="Output folder: prompts/<category>.jsonl, report.json, …"),
    per_category: int = typer.Option(100, "--per-category", min=1, help="Prompts requested per category."),
    categories: str | None = typer.Option(None, "--categories", help="Comma-separated categories (default: all ten)."),
    servers: list[str] = typer.Option([], "--server", help="Server base URL (repeatable)."),
    api: str = typer.Option("openai", "--api", help="openai (/v1/completions) | sglang (/generate) | local."),
    model: str | None = typer.Option(None, "--model", help="Model name sent to the server."),
    concurrency: int = typer.Option(16, "--concurrency", min=1, help="Requests in flight per server (local: batch)."),
    temperature: float = typer.Option(1.0, "--temperature", min=0.0),
    top_p: float = typer.Option(1.0, "--top-p", min=0.0, max=1.0),
    max_tokens: int = typer.Option(512, "--max-tokens", min=1, help="Most tokens one written prompt may take."),
    seed: int | None = typer.Option(None, "--seed", help="Request k is sampled with seed + k."),
    min_words: int = typer.Option(4, "--min-words", min=1, help="Fewer words than this is `too_short`."),
    topics: bool = typer.Option(True, "--topics/--no-topics", help="Steer each prompt with a seed topic line "
                                "(prompts/seed_topics/); without, every category continues the bare prefix."),
    chat_template: Path | None = typer.Option(None, "--chat-template", help="A Jinja chat template file to use "
                                              "instead of the tokenizer's."),
    manifest: Path | None = typer.Option(None, "--manifest", help="Add one target-written source per category to "
                                         "this manifest (created if missing; OUT must lie in its folder)."),
    retry_failed: bool = typer.Option(False, "--retry-failed", help="Ask again for the requests that failed."),
    force: bool = typer.Option(False, "--force", help="Resume a run with other sampling settings."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Draw live bars on stderr (a terminal)."),
) -> None:
    """Have the target write new user prompts per category (Magpie-style); run again to resume."""
    from inference.generation import Sampling
    from inference.prompt_writer import PrefixBackend, WriterConfig
    from prompts import seed_topics

    names = _categories(categories)
    template = _read_template(chat_template)
    tokenizer, turn = _tokenizer(target, template)
    inner, served = _inner_backend(api, target, model, servers, concurrency, template, max_tokens)
    config = WriterConfig(
        out_dir=out, categories=names, per_category=per_category, endpoints=servers if inner.has_endpoints else [],
        topics={c: seed_topics(c) for c in names} if topics else {}, concurrency=concurrency,
        sampling=Sampling(temperature=temperature, top_p=top_p, max_tokens=max_tokens, seed=seed),
        min_words=min_words, model=served, retry_failed=retry_failed, allow_new_sampling=force,
    )
    summary, report = _run_writer(config, PrefixBackend(inner, tokenizer, turn), progress=progress)
    _report(summary, report, out, manifest)


def register(app: typer.Typer) -> None:
    """Attach `write-prompts` to the main app."""
    app.command("write-prompts")(write_prompts)
