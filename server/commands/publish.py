"""`datahunt publish DIR --repo owner/name`: a curated or regenerated set as a Hub dataset repository.

The folder (Parquet shards under `data/`, a dataset card `README.md`) is always written first, by default
beside DIR as `DIR-hub`. With the Hub reachable it is then uploaded (repository created private unless
`--public`); offline (`DATAHUNT_OFFLINE`, huggingface_hub's offline mode, or a Hub that does not answer
its probe) the command says so and stops after writing the folder.
"""

from __future__ import annotations

import json
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Annotated

import typer

from server.commands.failure import EXIT_FAILED, EXIT_USAGE, fail


def _version() -> str:
    try:
        return version("datahunt")
    except PackageNotFoundError:
        return "unknown"


def _offline_reason() -> str | None:
    from core.settings import get_settings
    from server.hub_probe import hub_problem

    if get_settings().offline:
        return "offline mode (DATAHUNT_OFFLINE)"
    return hub_problem()


def _mirror_pins() -> dict[str, str]:
    """Where the configured mirror's index says each dataset's files were taken from, at which commit."""
    from core.settings import get_settings
    from curation.dataset_card import mirror_pins
    from curation.mirror import read_mirror_index

    mirror = get_settings().mirror
    return mirror_pins(read_mirror_index(mirror)) if mirror else {}


def _mirror_licenses() -> dict[str, str]:
    """The licences the configured mirror's index states (none without a mirror)."""
    from core.settings import get_settings
    from curation.licenses import mirror_licenses
    from curation.mirror import read_mirror_index

    mirror = get_settings().mirror
    return mirror_licenses(read_mirror_index(mirror)) if mirror else {}


def publish(
    src: Annotated[Path, typer.Argument(help="A curated folder (curate --out) or a regeneration run (regen --out).")],
    repo: Annotated[str, typer.Option("--repo", help="Hub dataset repository, owner/name.")],
    out: Annotated[Path | None, typer.Option("--out", help="Folder to write (default: DIR-hub beside DIR).")] = None,
    public: Annotated[bool, typer.Option("--public", help="Create the repository public (default: private).")] = False,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print {folder, rows, shards, uploaded, url} as JSON.",
    )] = False,
    accept_license_risk: Annotated[bool, typer.Option(
        "--accept-license-risk",
        help="Publish although a source's licence is non-commercial, restricted or unknown (the card names them).",
    )] = False,
) -> None:
    """Write DIR as a Hub dataset folder (Parquet shards and a dataset card), then upload it when online."""
    from core.settings import get_settings
    from core.types import parse_hub_id
    from curation.atomic_files import FolderBusyError
    from curation.errors import CurationError
    from curation.publish import build_folder, upload

    try:
        repo_id = parse_hub_id(repo)
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)
        return
    if not src.is_dir():
        fail(f"{src} is not a folder", EXIT_USAGE)
    folder = (out or src.resolve().parent / f"{src.resolve().name}-hub").resolve()
    try:
        written = build_folder(src, folder, repo_id=repo_id, version=_version(), licenses=_mirror_licenses(),
                               accept_license_risk=accept_license_risk, pins=_mirror_pins())
    except FolderBusyError as exc:  # another publish to the same --out is running: tried, not a usage error
        fail(str(exc), EXIT_FAILED)
    except (CurationError, OSError, ValueError, KeyError) as exc:
        fail(f"{type(exc).__name__}: {exc}" if isinstance(exc, KeyError) else str(exc), EXIT_USAGE)
        return
    offline = _offline_reason()
    url = None
    if offline is None:
        token = get_settings().hf_token
        try:
            url = upload(folder, repo_id, private=not public, token=token.get_secret_value() if token else None)
        except Exception as exc:  # huggingface_hub's HTTP errors and httpx's: the folder stays for a later try
            fail(f"upload to {repo_id} failed ({type(exc).__name__}: {str(exc).splitlines()[0]}); "
                 f"the folder is written at {folder}", EXIT_FAILED)
    if as_json:
        typer.echo(json.dumps({"folder": str(folder), "kind": written.kind, "rows": written.rows,
                               "shards": len(written.shards), "uploaded": url is not None, "url": url,
                               "offline": offline, "license_warnings": written.license_warnings}))
        return
    for line in written.license_warnings:
        typer.echo(f"warning: published with --accept-license-risk: {line}", err=True)
    typer.echo(f"{written.kind} set of {written.rows:,} rows written as a Hub dataset folder: {folder}")
    if url is not None:
        typer.echo(f"uploaded to {url} ({'public' if public else 'private'})")
    else:
        typer.echo(f"not uploaded: {offline}; run the same command again when the Hub is reachable")
    typer.echo(f"next: read {folder / 'README.md'} (the card: sources, licences, decontamination), then share the "
               "folder or upload it")


def register(app: typer.Typer) -> None:
    """Attach `publish` to the main app."""
    app.command("publish")(publish)
