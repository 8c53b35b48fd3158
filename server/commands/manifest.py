"""`datahunt manifest …`: export the approved set from the catalog, or build a manifest from a local mirror.

The group object `manifest_app` is shared: `export` is defined here, `from-mirror` by the curation commands.
`export` uses the same builder as the API's `POST /manifest/export` and writes only inside the data directory.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

manifest_app = typer.Typer(help="Manifests: the approved set, pinned, ready for curation.", no_args_is_help=True)


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


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
    from curation.catalog import store
    from curation.errors import CurationError
    from curation.licenses import mirror_licenses, risky_sources
    from curation.manifest import TargetModel
    from curation.mirror import read_mirror_index
    from server.commands.catalog import say_empty_catalog
    from server.manifest_builder import (
        ExportPathError,
        build_manifest,
        make_budget,
        parse_shares,
        resolve_export_path,
        write_manifest,
    )

    settings = get_settings()
    try:
        budget = make_budget(budget_total, parse_shares(share), seed)
        path = resolve_export_path(settings.resolved_data_dir, out)
        licenses = mirror_licenses(read_mirror_index(settings.mirror)) if settings.mirror else {}
        engine = store.make_engine(settings.resolved_database_url)
        try:
            store.upgrade_database(engine)
            with store.open_session(engine) as session:
                store.adopt_licenses(session, licenses, source="mirror index")
                approved = store.approved_entries(session)
                if not approved and not store.list_entries(session, limit=1)[1]:
                    say_empty_catalog()
                manifest = build_manifest(
                    approved,
                    budget=budget,
                    target=TargetModel(model=target, tokenizer=tokenizer) if target else None,
                    eval_entries=store.benchmark_entries(session),
                    licenses=licenses,
                )
        finally:
            engine.dispose()
        write_manifest(manifest, path, data_dir=settings.resolved_data_dir)
    except (ExportPathError, CurationError, ValueError, OSError) as exc:
        _fail(str(exc))
        return
    except SQLAlchemyError as exc:
        _fail(f"catalog database unavailable: {type(exc).__name__}: {str(exc).splitlines()[0]}")
        return
    if as_json:
        typer.echo(json.dumps({"path": str(path), "manifest": manifest.model_dump(mode="json")}, indent=2))
    else:
        print(f"manifest with {len(manifest.sources)} approved source(s) written to {path}")
        if out and not Path(out).is_absolute() and path != (Path.cwd() / out).resolve():
            print(f"note: --out {out} is read inside the data directory {settings.resolved_data_dir}, not the "
                  "current folder")
        print(f"next: datahunt curate --manifest {path} --out OUT")
        for note in manifest.notes:
            print(f"note: {note}")
        for hub_id, lic, risk in risky_sources(s.model_dump() for s in manifest.sources):
            print(f"warning: {hub_id}: license {lic or 'not stated'} ({risk.replace('_', '-')}); "
                  "publish will ask for --accept-license-risk")


def register(app: typer.Typer) -> None:
    """Attach the `manifest` group to the main app."""
    app.add_typer(manifest_app, name="manifest")
