"""Curation past one machine: the same pipeline steps on an existing distributed engine (`--engine`).

`local` is the in-process run (`curation.pipeline.curate`); `datatrove` runs the same steps as datatrove
tasks with out-of-core dedup (`curation.engine.datatrove_run`), keeping exactly the rows the local run
keeps. datatrove is an optional extra (`pip install 'datahunt[engine]'`); asking for it without the
package raises `EngineUnavailable` with that one line, and an unknown name raises `UnknownEngine` listing
the known ones.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from curation.errors import CurationError

ENGINES = ("local", "datatrove")
EXTRA = {"datatrove": "engine"}


class EngineError(CurationError, RuntimeError):
    """The requested engine cannot run."""


class UnknownEngine(EngineError):
    """An engine name that is not one of ENGINES."""


class EngineUnavailable(EngineError):
    """A known engine whose package is not installed."""


def check_engine(name: str) -> str:
    """Return `name` when it can run here; raise UnknownEngine or EngineUnavailable with a one-line reason."""
    if name not in ENGINES:
        raise UnknownEngine(f"unknown curation executor {name!r}; known executors: {', '.join(ENGINES)}")
    if name != "local" and importlib.util.find_spec(name) is None:
        raise EngineUnavailable(
            f"the {name} executor is not installed: pip install 'datahunt[{EXTRA[name]}]' (the {EXTRA[name]} extra)"
        )
    return name


def curate_on(engine: str, manifest: Any, out_dir: Path, **kwargs: Any) -> Any:
    """Run curation on `engine` and return its CurateResult (the same for every engine)."""
    check_engine(engine)
    if engine == "local":
        from curation.pipeline import curate

        kwargs.pop("workers", None)
        kwargs.pop("progress", None)
        return curate(manifest, out_dir, **kwargs)
    from curation.engine.datatrove_run import curate_datatrove

    return curate_datatrove(manifest, out_dir, **kwargs)
