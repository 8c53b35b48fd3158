"""`datahunt eval-accept`: a draft's acceptance length, measured locally or on the server that serves it.

Locally the target and the draft decode the prompts side by side (`training.local_eval`), one run per batch
and chain length under a bar on stderr, each report's table on stderr and its JSON on stdout; `--record`
writes the measured sets into the draft's expectations.json. With `--server` the preflight runs first
(`server.commands.check_server`), then the server is measured (`inference.served_acceptance`: SGLang's
per-answer counters or vLLM's `/metrics`). Bad input ends with a one-line error and a non-zero exit.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from server.commands.check_server import preflight, print_checks
from server.commands.failure import EXIT_FAILED, EXIT_USAGE, fail
from server.commands.retraining_errors import user_errors

if TYPE_CHECKING:
    from training.data import Rendering
    from training.eval_prompts import PromptRow
    from training.local_eval import LocalDecoding


def _read_prompt_rows(path: Path, limit: int | None) -> list[PromptRow]:
    """Every prompt row of `path`, checked before any model loads: a bad file or row is one line, exit 2."""
    from training.data import DataError
    from training.eval_prompts import read_prompts

    try:
        return read_prompts(path, limit=limit)
    except DataError as exc:
        fail(str(exc), EXIT_USAGE)


def eval_accept(
    prompts: Path = typer.Option(..., "--prompts", help="JSONL of prompts: EAGLE-bench/MT-bench 'turns', SpecForge "
                                 "'conversations', OpenAI 'messages', or {'text': ...} taken literally."),
    draft: Path | None = typer.Option(None, "--draft", help="Exported draft folder."),
    target: Path | None = typer.Option(None, "--target", help="Target folder (model + tokenizer; with --server "
                                       "only its config.json and tokenizer are read)."),
    steps: list[int] = typer.Option([5], "--steps", min=1, help="Draft chain length k (repeat to compare, e.g. "
                                    "--steps 3 --steps 5: the k to run is then recommended per batch)."),
    max_new: int = typer.Option(64, "--max-new", help="New tokens per prompt."),
    limit: int | None = typer.Option(None, "--limit", help="Use only the first N prompts."),
    server: str | None = typer.Option(None, "--server", help="Measure on this SGLang or vLLM server instead (vLLM: "
                                      "from its /metrics counters, so nothing else may use it meanwhile)."),
    baseline: str | None = typer.Option(None, "--baseline", help="A server without speculation, for tok/s."),
    target_config: Path | None = typer.Option(None, "--target-config", help="For the preflight (with --server)."),
    device: str = typer.Option("cpu", "--device", help="cpu or cuda, for local evaluation."),
    temperature: float = typer.Option(0.0, "--temperature", min=0.0,
                                      help="Local: 0 = greedy chain; above 0 = speculative sampling at it."),
    seed: int = typer.Option(0, "--seed", help="Sampling seed (with --temperature above 0)."),
    send_text: bool = typer.Option(False, "--send-text", help="With --server: send prompts as text instead of "
                                   "token ids (SGLang then adds special tokens: a template's BOS arrives twice)."),
    batch: list[int] = typer.Option([1], "--batch", min=1, help="Local: B prompts decoded at once (greedy above 1; "
                                    "repeat for several runs, e.g. --batch 1 --batch 8)."),
    schedule: str = typer.Option("continuous", "--schedule", help="Batches above 1: 'continuous' (a finished row "
                                 "takes the next prompt at once, as a serving engine does) or 'static' (groups of "
                                 "B, each as slow as its slowest row)."),
    reasoning: str | None = typer.Option(None, "--reasoning", help="served-on | served-off | keep | drop: how the "
                                         "prompts are rendered (default: as the draft's training rows were)."),
    tool_rendering: str | None = typer.Option(None, "--tool-rendering", help="native | text (default: as the "
                                              "draft's training rows were)."),
    record: bool = typer.Option(False, "--record", help="Local, greedy: write the acceptance per prompt set (a row's "
                                "`set` or `category`) and the round cost per batch into the draft's expectations.json, "
                                "what `datahunt watch` compares the served draft with."),
    record_as: str = typer.Option("eval", "--record-as", help="With --record: eval (public eval prompts) or heldout "
                                  "(your own held-out prompts: the watcher's reference when recorded)."),
) -> None:
    """Acceptance length: local speculative decoding, or a server's spec_verify_ct after the preflight.

    Break-even (local runs): a round (k draft steps, then one (k+1)-token
    verify) costs c target decode steps and yields AL tokens, so speculation
    breaks even at AL = c and runs at AL / c times the target's speed. c is
    the run's time per round over the baseline's time per step at the same
    batch; one table per batch prints it next to the AL, e.g.
    'AL 2.09 vs break-even 1.42 at k=5: 1.47x expected, 1.44x measured'.
    """
    if server and len(steps) > 1:
        fail("--server measures the chain length the server runs: pass one --steps", EXIT_USAGE)
    if record and (server or temperature > 0 or record_as not in {"eval", "heldout"}):
        fail("--record measures locally and greedily (no --server, --temperature 0), with --record-as eval or "
             "heldout", EXIT_USAGE)
    rows = _read_prompt_rows(prompts, limit)
    rendering = _eval_rendering(draft, reasoning, tool_rendering)
    if server:
        _eval_server(rows, server, baseline, draft, target, target_config, max_new, send_text, rendering)
        return
    if draft is None or target is None:
        fail("local evaluation needs --draft and --target (or pass --server URL)", EXIT_USAGE)
    sampling: LocalDecoding = {"max_new": max_new, "temperature": temperature, "seed": seed, "schedule": schedule}
    reports, per_set = _eval_local(rows, draft, target, device, steps, batch, sampling, rendering, record)
    if record:
        _record(draft, per_set, reports, record_as, prompts, device)
    _print_reports(reports, steps, batch)
    typer.echo(f"next: datahunt sglang-command --target {target} --draft {draft} (or vllm-command): serve it and "
               f"measure there with eval-accept --server URL", err=True)


def _eval_rendering(draft: Path | None, reasoning: str | None, tool_rendering: str | None) -> Rendering:
    """How the prompts are rendered: the options given, else what the draft's config records of its training
    rows (`datahunt.rendering`), else the template's defaults."""
    from core.chat_render import Reasoning, ToolRendering
    from training.data import Rendering, recorded_rendering
    from training.export import read_config

    recorded: Rendering | None = None
    if draft is not None and (draft / "config.json").is_file():
        try:
            recorded = recorded_rendering((read_config(draft).get("datahunt") or {}).get("rendering"))
        except user_errors() as exc:
            fail(str(exc), EXIT_FAILED)
    base = recorded or Rendering()
    try:
        return Rendering(Reasoning(reasoning) if reasoning else base.reasoning,
                         ToolRendering(tool_rendering) if tool_rendering else base.tool_rendering)
    except ValueError as exc:
        fail(f"{exc} (--reasoning: keep, served-on, served-off, drop; --tool-rendering: native, text)", EXIT_USAGE)


def _record(draft: Path, per_set: dict[str, Any], reports: list[Any], label: str, prompts: Path, device: str) -> None:
    """Write the measured sets and round costs into the draft's expectations.json; say what was written."""
    from training.expectations import record_measurements

    try:
        done = record_measurements(draft, per_set, reports, label="heldout" if label == "heldout" else "eval",
                                   prompts_file=prompts, device=device)
    except user_errors() as exc:
        fail(str(exc), EXIT_FAILED)
    typer.echo(f"recorded {len(per_set)} {label} set(s) ({', '.join(sorted(per_set))}) and "
               f"{len(done.round_costs)} round cost(s) into {draft / 'expectations.json'}", err=True)


def _eval_local(rows: list[PromptRow], draft: Path, target: Path, device: str, steps: list[int],
                batch: list[int], sampling: LocalDecoding, rendering: Rendering, by_set: bool = False
                ) -> tuple[list[Any], dict[str, Any]]:
    """`training.local_eval.evaluate_locally` under a bar on stderr (one line per (batch, k) run, started once
    the models are loaded); return its reports and, with `by_set`, the first run's report per prompt set."""
    from contextlib import ExitStack

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from server.commands.failure import exit_code_for
    from training.local_eval import device_available, evaluate_locally

    if not device_available(device):
        fail(f"--device {device} is not available here (cpu, or cuda with a GPU)", EXIT_USAGE)
    columns = (TextColumn("eval-accept {task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    try:
        with ExitStack() as stack:
            bars: list[Progress] = []

            def on_run(b: int, k: int, prompts: int) -> Callable[[int], None]:
                if not bars:
                    bars.append(stack.enter_context(Progress(*columns, console=Console(stderr=True), transient=True)))
                task = bars[0].add_task(f"batch {b}, k={k}", total=prompts)
                return lambda _: bars[0].advance(task)

            done = evaluate_locally(rows=rows, draft=draft, target=target, device=device, steps=steps, batch=batch,
                                    sampling=sampling, rendering=rendering, by_set=by_set, on_run=on_run)
    except user_errors() as exc:  # a stage error keeps its mapped code (a row with no user turn: 2)
        fail(str(exc), exit_code_for(exc) or EXIT_FAILED)
    return done.reports, done.per_set


def _print_reports(reports: list[Any], steps: list[int], batch: list[int]) -> None:
    """Each report's table and summary on stderr and its JSON on stdout; the k to run per batch when several
    were compared; exit 1 when a speculative output differed from the target's greedy one."""
    from rich.console import Console

    from server.commands.accept_table import accept_table, recommend_line

    err = Console(stderr=True)
    for report in reports:
        err.print(accept_table(report))
        err.print(f"{report.prompts} prompts: {report.summary()}", highlight=False)
        if report.break_even():
            err.print(report.break_even(), highlight=False)
        typer.echo(json.dumps(report.as_dict()))
    if len(steps) > 1:
        for b in batch:
            line = recommend_line([r for r in reports if r.batch == b])
            if line:
                typer.echo(line, err=True)
    if not all(r.identical for r in reports):
        fail("speculative output differs from the target's greedy output: the verifier is broken", EXIT_FAILED)


def _server_prompts(rows: list[PromptRow], target: Path | None, send_text: bool, rendering: Rendering
                    ) -> list[Any]:
    """The prompts for `/generate` (`training.eval_prompts.server_prompt`): token ids rendered once from the
    target's tokenizer, or with `send_text` the rendered text; `text` rows are taken literally either way."""
    from inference.chat_template import ChatRenderer
    from training.eval_prompts import server_prompt

    renderer = None
    if not send_text or any("text" not in r for r in rows):
        if target is None:
            fail("--server needs --target for the tokenizer and chat template (the native API applies none); "
                 "only its config.json and tokenizer files are read", EXIT_USAGE)
        renderer = ChatRenderer.load(target)  # a TemplateError ends as one line, exit 1 (failure.py's map)
    return [server_prompt(row, renderer, send_text, rendering) for row in rows]  # no user turn: exit 2


def _eval_server(rows: list[PromptRow], server: str, baseline: str | None, draft: Path | None,
                 target: Path | None, target_config: Path | None, max_new: int, send_text: bool,
                 rendering: Rendering) -> None:
    """Run the preflight (its table and exit 1 when it fails), then measure the server; its report as JSON."""
    from inference.served_acceptance import ServerEvalReport, VllmEvalReport, evaluate_server, evaluate_vllm

    if draft is None:
        fail("--server needs --draft so the preflight can run first", EXIT_USAGE)
    ok, checks, info = preflight(server, draft, target_config or target)
    if not ok:
        print_checks(checks, as_json=False)
        fail("preflight failed; not measuring a misconfigured server", EXIT_FAILED)
    prompts = _server_prompts(rows, target, send_text, rendering)
    report: ServerEvalReport | VllmEvalReport
    if info.engine == "vllm":  # a ServerEvalError ends as one line, exit 1 (server/commands/failure.py)
        model = str(info.raw.get("served_model_name") or info.model_path or "")
        report = evaluate_vllm(server, model, prompts, max_new_tokens=max_new, baseline_url=baseline)
    else:
        report = evaluate_server(server, prompts, max_new_tokens=max_new, baseline_url=baseline,
                                 speculating=info.speculating)
    typer.echo(json.dumps({"engine": info.engine, "engine_version": info.version, **report}))
