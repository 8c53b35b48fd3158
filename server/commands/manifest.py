"""`datahunt manifest …`: export the approved set from the catalog, or build a manifest from a local mirror.

`from-mirror` writes a manifest over a local mirror's `MIRROR.json` (train entries as sources, eval entries as
decontamination sets).
`export` uses the same builder as the API's `POST /manifest/export` and writes only inside the data directory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from server.commands.failure import EXIT_USAGE, fail, outage_line

if TYPE_CHECKING:
    from curation.manifest import Manifest

manifest_app = typer.Typer(help="Manifests: the approved set, pinned, ready for curation.", no_args_is_help=True)


@manifest_app.command("export")
def export(
    out: str = typer.Option(
        None, "--out", "-o", help="File to write, inside the data directory: a relative path is read from the data "
        "directory, not the current folder (default manifests/manifest-<time>.json). `manifest from-mirror --out` "
        "takes any path, relative to the current folder."
    ),
    target: str = typer.Option(None, "--target", help="Target model (Hub id or path) the data is meant for."),
    tokenizer: str = typer.Option(None, "--tokenizer", help="Tokenizer id/path, if not the target's."),
    budget_total: int = typer.Option(None, "--budget-total", min=1, help="Samples overall (default: keep all)."),
    share: list[str] = typer.Option([], "--share", help="category=fraction of the budget; repeatable."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed for budget sampling."),
    as_json: bool = typer.Option(False, "--json", help="Print {path, manifest} as JSON."),
) -> None:
    """Write the manifest of the approved catalog entries (pinned revision, config, split, mapping, license)."""
    from sqlalchemy.exc import SQLAlchemyError

    from core.settings import get_settings
    from curation.errors import CurationError
    from server.commands.failure import EXIT_FAILED
    from server.manifest_builder import ExportPathError, parse_shares
    from server.usecases.catalog import empty_catalog_note, open_catalog
    from server.usecases.manifest import export_approved_manifest

    settings = get_settings()
    try:
        shares = parse_shares(share)
        engine = open_catalog(settings=settings)
    except (CurationError, ValueError) as exc:
        fail(str(exc), EXIT_USAGE)
    except SQLAlchemyError as exc:
        fail(outage_line(exc), EXIT_FAILED)
    try:
        exported = export_approved_manifest(engine=engine, settings=settings, path=out, target_model=target,
                                   tokenizer=tokenizer, budget_total=budget_total, shares=shares, seed=seed)
    except (ExportPathError, CurationError, ValueError, OSError) as exc:
        fail(str(exc), EXIT_USAGE)
    except SQLAlchemyError as exc:
        fail(outage_line(exc), EXIT_FAILED)
    finally:
        engine.dispose()
    if exported.warning:
        typer.echo(f"warning: {exported.warning}", err=True)
    if exported.empty_catalog:
        typer.echo(f"note: {empty_catalog_note(settings=settings)}", err=True)
    if as_json:
        typer.echo(json.dumps({"path": str(exported.path), "manifest": exported.manifest.model_dump(mode="json")},
                              indent=2))
    else:
        _say_exported(exported.manifest, exported.path, out, settings.resolved_data_dir)
        _say_eval_sets(exported.manifest)


def _say_eval_sets(manifest: Manifest) -> None:
    """The eval sets the manifest names, and in all with those the mirror adds at curation: curate's count."""
    from core.settings import get_settings
    from curation.errors import CurationError
    from server.usecases.manifest import eval_set_count

    named = len(manifest.eval_sets)
    try:
        in_all = eval_set_count(manifest=manifest, settings=get_settings())
    except CurationError:  # an unreadable mirror: curate names it
        in_all = named
    adds = f"; curate adds the mirror's {in_all - named}: {in_all} in all" if in_all != named else ""
    typer.echo(f"eval sets (kept out of training, decontaminated against): {named} named{adds}")


def _say_exported(manifest: Manifest, path: Path, out: str | None, data_dir: Path) -> None:
    """Where the manifest went, the next command, its notes and a warning per source of risky license."""
    from curation.licenses import risky_sources

    typer.echo(f"manifest with {len(manifest.sources)} approved source(s) written to {path}")
    if out and not Path(out).is_absolute() and path != (Path.cwd() / out).resolve():
        typer.echo(f"note: --out {out} is read inside the data directory {data_dir}, not the current folder")
    typer.echo(f"next: datahunt curate --manifest {path} --out OUT")
    for note in manifest.notes:
        typer.echo(f"note: {note}")
    for hub_id, lic, risk in risky_sources(s.model_dump() for s in manifest.sources):
        typer.echo(f"warning: {hub_id}: license {lic or 'not stated'} ({risk.replace('_', '-')}); "
                   "publish will ask for --accept-license-risk")


@manifest_app.command("from-mirror")
def from_mirror(
    mirror_dir: Annotated[Path, typer.Argument(help="Mirror folder holding MIRROR.json.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Manifest file to write: any path, relative to the "
                                      "current folder (`manifest export --out` is read inside the data directory).")],
    target: Annotated[
        str | None, typer.Option("--target", help="Target model (Hub id or local path).")
    ] = None,
) -> None:
    """Write a manifest over a local mirror: train entries become sources, eval entries decontamination sets."""
    from curation.errors import CurationError
    from curation.manifest import dump_manifest
    from curation.mirror import manifest_from_mirror

    try:
        manifest = manifest_from_mirror(mirror_dir, target=target)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(dump_manifest(manifest), encoding="utf-8")
    except (CurationError, ValueError, OSError) as exc:
        fail(str(exc), EXIT_USAGE)
        return
    typer.echo(
        f"manifest with {len(manifest.sources)} source(s) and {len(manifest.eval_sets)} eval set(s) written to "
        f"{out.resolve()}"
    )
    for note in manifest.notes:
        typer.echo(f"note: {note}")


def register(app: typer.Typer) -> None:
    """Attach the `manifest` group to the main app."""
    app.add_typer(manifest_app, name="manifest")
