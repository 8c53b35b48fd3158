"""`datahunt manifest …`: export the approved set from the catalog, or build a manifest from a local mirror.

The group object `manifest_app` is shared: `export` is defined here, `from-mirror` by the curation commands.
"""

from __future__ import annotations

import typer

manifest_app = typer.Typer(help="Manifests: the approved set, pinned, ready for curation.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    """Attach the `manifest` group to the main app."""
    app.add_typer(manifest_app, name="manifest")
