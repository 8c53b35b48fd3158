"""The root of every error the curation stage raises on purpose, so a caller can catch the stage as one name.

    CurationError
    ├── CatalogError      the catalog store (curation.catalog.errors holds its own subtree)
    ├── ManifestError     a manifest that is missing, not JSON or off the schema (manifest)
    ├── SourceLoadError   a source that cannot be loaded at all (loading)
    ├── FormatError       no adapter fits, or a mapping names missing columns (adapters)
    ├── EngineError       the requested engine cannot run: UnknownEngine, EngineUnavailable (engine)
    └── PublishError      a folder that is not a curated set or regeneration run (publish)

Each subclass also keeps the builtin base it had (ValueError, RuntimeError), so older handlers still match.
"""

from __future__ import annotations


class CurationError(Exception):
    """Base of every error the curation stage raises on purpose."""
