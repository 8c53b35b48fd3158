"""`datahunt curate` and `datahunt manifest from-mirror`: the curation stage's front door.

`from-mirror` turns a local mirror (`MIRROR.json`) into a manifest; `curate` turns a manifest into the
curated set (Parquet shards, report, summary, plot). The work lives in `curation/`; this module parses
options, prints a short rich summary, and ends bad input with a one-line error and exit code 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from server.commands.manifest import manifest_app


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


@manifest_app.command("from-mirror")
def from_mirror(
    mirror_dir: Annotated[Path, typer.Argument(help="Mirror folder holding MIRROR.json.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Manifest file to write.")],
    target: Annotated[
        str | None, typer.Option("--target", help="Target model (Hub id or local path).")
    ] = None,
) -> None:
    """Write a manifest over a local mirror: train entries become sources, eval entries decontamination sets."""
    from curation.manifest import ManifestError, dump_manifest
    from curation.mirror import manifest_from_mirror

    try:
        manifest = manifest_from_mirror(mirror_dir, target=target)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(dump_manifest(manifest), encoding="utf-8")
    except (ManifestError, ValueError, OSError) as exc:
        _fail(str(exc))
        return
    print(
        f"manifest with {len(manifest.sources)} source(s) and {len(manifest.eval_sets)} eval set(s) written to {out}"
    )
    for note in manifest.notes:
        print(f"note: {note}")


def curate(
    manifest: Annotated[
        Path, typer.Option("--manifest", "-m", help="Manifest JSON (`manifest export|from-mirror`).")
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder for the curated set.")],
    seed: Annotated[
        int | None, typer.Option("--seed", min=0, help="Sampling seed (default: the budget's).")
    ] = None,
    jsonl: Annotated[bool, typer.Option("--jsonl", help="Also write OUT/samples.jsonl.")] = False,
    mirror: Annotated[
        Path | None,
        typer.Option("--mirror", help="Mirror folder (default: the manifest's, then DATAHUNT_MIRROR)."),
    ] = None,
    engine: Annotated[
        str,
        typer.Option("--engine", help="local (in-process, default) or datatrove (the same steps out of core)."),
    ] = "local",
    workers: Annotated[
        int | None, typer.Option("--workers", min=1, help="Engine worker processes (default: the CPU count).")
    ] = None,
) -> None:
    """Load, clean, deduplicate, decontaminate and mix the manifest's sources into OUT."""
    from rich.console import Console
    from rich.table import Table

    from curation.engine import EngineError, check_engine, curate_on
    from curation.manifest import ManifestError, dump_manifest, load_manifest
    from curation.shards import atomic_write_bytes

    if mirror is not None and not (mirror / "MIRROR.json").is_file():
        _fail(f"{mirror} is not a mirror folder (no MIRROR.json)")
    try:
        check_engine(engine)
    except EngineError as exc:
        _fail(str(exc))
    try:
        loaded = load_manifest(manifest)
        result = curate_on(
            engine, loaded, out, seed=seed, jsonl=jsonl, mirror=mirror, workers=workers,
            progress=lambda line: typer.echo(f"[{engine}] {line}", err=True),
        )
        atomic_write_bytes(out / "manifest.json", dump_manifest(loaded).encode("utf-8"))
    except (ManifestError, OSError) as exc:
        _fail(str(exc))
        return
    report = result.report
    console = Console()
    table = Table(title=f"curated set in {out}")
    for column in ("category", "available", "quota", "selected"):
        table.add_column(column, justify="left" if column == "category" else "right")
    for category, mix in report["per_category"].items():
        quota = "all" if mix["quota"] is None else str(mix["quota"])
        table.add_row(category, str(mix["available"]), quota, str(mix["selected"]))
    console.print(table)
    console.print(
        f"rows in {report['rows_in']} → out {report['rows_out']} "
        f"({report['needs_regeneration']} to regenerate, {report['target_native']} target-native); "
        f"dropped {sum(report['drops'].values())}, duplicates {report['duplicates']['exact']} exact + "
        f"{report['duplicates']['near']} near, decontaminated {report['decontaminated']}"
    )
    for key in report["failed_sources"]:
        console.print(f"[red]failed source[/red] {key}: {report['per_source'][key]['error']}")
    for category, short in report["unmet_budgets"].items():
        console.print(f"[yellow]budget unmet[/yellow] {category}: {short} rows short")
    if result.reused:
        console.print(f"reused {len(result.reused)} step(s) whose inputs had not changed")


def register(app: typer.Typer) -> None:
    """Attach `curate` to the main app (`manifest from-mirror` is attached to the shared manifest group above)."""
    app.command("curate")(curate)
