"""How a hidden-state server's storage folder says which layers it extracts (shared by the launch line that
names it and the capture that reads it back).

vLLM's extraction records no layer ids in its files and shows none through its API. datahunt's launch line
therefore writes the states under a folder named for them (`<storage>/layers-2-15-27-30`), and every answer
carries the file's path, so a capture can check, from the first answer on, that the server extracts the
layers it needs. A server started by hand into another folder still works; its layers are then taken on trust
(the count is checked, and the last one by the target's own head).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import PurePath

_FOLDER = re.compile(r"^layers-(\d+(?:-\d+)*)$")


def layers_folder(ids: Iterable[int]) -> str:
    """The folder name for an extraction of `ids` (sorted, each once, as the engine keeps them)."""
    return "layers-" + "-".join(str(i) for i in sorted(set(ids)))


def layers_in_path(path: str) -> tuple[int, ...] | None:
    """The layer ids a states file's folder names, or None when no folder of its path is named that way."""
    for part in reversed(PurePath(path).parts[:-1]):
        match = _FOLDER.match(part)
        if match:
            return tuple(int(i) for i in match.group(1).split("-"))
    return None
