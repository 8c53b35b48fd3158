"""`datahunt watch`: a sidecar that tells, every interval, whether the served draft's speculation is paying.

It reads the serving engine's speculative counters (vLLM's `/metrics`; SGLang's `/metrics` and `/server_info`),
keeps a rolling window of rounds, and judges it against what the draft carries (`expectations.json`, written
by export and `eval-accept --record`) or what is given here. Lines go to stdout, alerts to stderr (and to the
webhook); `--once` judges everything since the server started and exits 1 on an alert; `--metrics-port`
serves the watcher's own Prometheus metrics. The loop lives in `inference/watcher.py`, the rules in
`inference/watch_rules.py`.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

import typer

from server.commands.failure import EXIT_FAILED, EXIT_USAGE, fail


def _baseline(value: str | None) -> float | None:
    """`--baseline`: an acceptance length, or a JSON file holding `accept_length` (an eval-accept report, a
    watch --once --json line)."""
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    path = Path(value)
    if not path.is_file():
        fail(f"--baseline {value!r} is neither an acceptance length nor a file", EXIT_USAGE)
    try:
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        found = json.loads(lines[-1]).get("accept_length") if lines else None
    except (OSError, UnicodeDecodeError, ValueError, AttributeError) as exc:
        fail(f"--baseline {path}: not a JSON report ({exc})", EXIT_USAGE)
    if not isinstance(found, int | float) or found < 1:
        fail(f"--baseline {path}: its last JSON line has no accept_length of at least 1", EXIT_USAGE)
    return float(found)


def _stamp() -> str:
    return datetime.now(UTC).strftime("%H:%M:%S")


def watch(
    server: str = typer.Option(..., "--server", help="The serving engine's base URL (vLLM or SGLang, detected)."),
    draft: Path | None = typer.Option(None, "--draft", help="The served draft's folder: its expectations.json gives "
                                      "the recorded acceptance per position and the break-even."),
    interval: float = typer.Option(10.0, "--interval", min=0.1, help="Seconds between readings."),
    window: int = typer.Option(2000, "--window", min=1, help="Verification rounds the rolling figures cover; no "
                               "rule judges a window holding fewer."),
    once: bool = typer.Option(False, "--once", help="One reading, judged over everything since the server "
                              "started; exit 1 on an alert."),
    webhook: str | None = typer.Option(None, "--webhook", help="POST each alert as JSON to this URL."),
    metrics_port: int | None = typer.Option(None, "--metrics-port", min=0, help="Serve this watcher's Prometheus "
                                            "metrics on this port (0: any free port, said on stderr)."),
    metrics_host: str = typer.Option("127.0.0.1", "--metrics-host"),
    break_even: float | None = typer.Option(None, "--break-even", min=1.0, help="The acceptance length speculation "
                                            "must beat (default: the draft's recorded round cost)."),
    baseline: str | None = typer.Option(None, "--baseline", help="The deployment's baseline acceptance length, or "
                                        "a JSON report holding accept_length: a drift below it alerts."),
    drift: float = typer.Option(0.10, "--drift", min=0.0, max=1.0, help="Relative fall below --baseline that alerts."),
    position0_fraction: float = typer.Option(0.5, "--position0-fraction", min=0.0, max=1.0,
                                             help="Alert when position-0 acceptance falls below this fraction of "
                                             "the draft's recorded rate."),
    min_accept: float = typer.Option(1.05, "--min-accept", help="Alert at or below this acceptance length."),
    ticks: int | None = typer.Option(None, "--ticks", min=1, help="Stop after this many intervals (default: never)."),
    as_json: bool = typer.Option(False, "--json", help="Each interval as one JSON line instead of words."),
) -> None:
    """Watch a served draft: whether speculation pays, and alerts on its known failures."""
    from core.draft_expectations import ExpectationsError, read_expectations
    from inference.watch_metrics import WatchMetrics
    from inference.watch_rules import Thresholds
    from inference.watcher import Tick, Watcher, WatchSettings, check_once, run_watch

    expectations = None
    if draft is not None:
        if not (draft / "config.json").is_file():
            fail(f"--draft {draft} is not a draft folder (no config.json)", EXIT_USAGE)
        try:
            expectations = read_expectations(draft)
        except ExpectationsError as exc:
            fail(str(exc), EXIT_USAGE)
        if expectations is None or not expectations.measured:
            typer.echo(f"note: {draft} has no recorded acceptance: run `datahunt eval-accept --draft {draft} --target "
                       "TARGET --prompts HELDOUT --record` so the position-0 rule and the break-even apply", err=True)
    thresholds = Thresholds(min_accept_length=min_accept, position0_fraction=position0_fraction, drift=drift,
                            min_rounds=window)
    settings = WatchSettings(url=server, interval_s=interval, window_rounds=window, thresholds=thresholds,
                             break_even=break_even, baseline_accept_length=_baseline(baseline), webhook=webhook)
    metrics = WatchMetrics(server)
    if metrics_port is not None:
        try:
            http = metrics.serve(metrics_port, metrics_host)
        except OSError as exc:
            fail(f"cannot serve metrics on {metrics_host}:{metrics_port}: {exc.strerror or exc}", EXIT_USAGE)
        typer.echo(f"metrics: http://{metrics_host}:{http.server_port}/metrics", err=True)
    watcher = Watcher(settings, expectations, metrics)

    def emit(tick: Tick) -> None:
        for note in tick.notes:
            typer.echo(f"warning: {note}", err=True)
        if as_json:
            stats = tick.stats
            typer.echo(json.dumps({"at": _stamp(), "up": tick.up, "restarted": tick.restarted, "line": tick.line,
                                   "accept_length": stats.accept_length if stats else None,
                                   "rounds": stats.rounds if stats else 0,
                                   "per_position_accept": list(stats.per_position) if stats else [],
                                   "tokens_per_s": stats.tokens_per_s if stats else None,
                                   "firing": [a.kind for a in tick.firing]}), nl=True)
        else:
            typer.echo(f"{_stamp()} {tick.line}")
        for alert in tick.started:
            typer.echo(f"ALERT {alert.kind}: {alert.message}", err=True)
        for kind in tick.resolved:
            typer.echo(f"resolved {kind}", err=True)

    def warn(message: str) -> None:
        typer.echo(f"warning: {message}", err=True)

    if once:
        from inference.server_info import ServerInfoError

        try:
            tick = asyncio.run(check_once(watcher))
        except ServerInfoError as exc:
            fail(str(exc), EXIT_FAILED)
        emit(tick)
        if tick.firing:
            raise typer.Exit(EXIT_FAILED)  # the alerts are printed above
        return
    try:
        asyncio.run(run_watch(watcher, emit, warn, ticks))
    except KeyboardInterrupt:
        typer.echo("stopped", err=True)


def register(app: typer.Typer) -> None:
    """Attach `watch` to the main app."""
    app.command("watch")(watch)
