"""The one JSON Lines reader of datahunt: records are separated by "\\n" and by nothing else.

`str.splitlines()` also splits on U+2028, U+2029, "\\x1c"–"\\x1e", "\\x85" and a lone "\\r", all of which
may sit unescaped inside a JSON string (GSM8K holds U+2028), so a reader built on it cuts a valid row in
two. Every JSONL file the project reads goes through `iter_jsonl` (a file, `.gz` read transparently) or
`parse_jsonl` (text already in memory). Blank lines are skipped; a "\\r" before the "\\n" is JSON
whitespace and is ignored by the parser. Line numbers in errors count from 1.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any


class JsonlError(ValueError):
    """A line that is not JSON (or not the expected shape). `where` is `path:line`."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where}: {reason}")
        self.where = where
        self.reason = reason


def split_records(text: str) -> list[str]:
    """Return the non-blank lines of `text`, split on "\\n" only (never on U+2028, U+2029 or "\\r")."""
    return [line for line in text.split("\n") if line.strip()]


def _parse(line: str, where: str) -> Any:
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise JsonlError(where, f"not valid JSON ({exc.msg})") from None


def _numbered(lines: Iterable[str], name: str, objects: bool) -> Iterator[tuple[int, Any]]:
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        value = _parse(line, f"{name}:{number}")
        if objects and not isinstance(value, dict):
            raise JsonlError(f"{name}:{number}", "expected a JSON object per line")
        yield number, value


def parse_jsonl(text: str, where: str = "<text>", *, objects: bool = False) -> Iterator[tuple[int, Any]]:
    """Yield `(line number, value)` for every non-blank line of `text`.

    Raises JsonlError naming `where:line` for a line that is not JSON, or (with `objects`) not an object.
    """
    return _numbered(text.split("\n"), where, objects)


def _open(path: Path) -> IO[bytes] | gzip.GzipFile:
    if path.name.endswith(".gz"):
        return gzip.open(path, "rb")
    return path.open("rb")


def _decoded(handle: Iterable[bytes], errors: str, where: str) -> Iterator[str]:
    # A binary file iterates on b"\n" only, unlike a text-mode file (universal newlines split on "\r").
    try:
        for number, raw in enumerate(handle, start=1):
            try:
                yield raw.decode("utf-8", errors=errors)
            except UnicodeDecodeError as exc:  # strict policy: name the line and the byte, not a traceback
                raise JsonlError(f"{where}:{number}", f"not UTF-8 (byte {raw[exc.start]:#04x} at byte "
                                 f"{exc.start + 1} of the line)") from None
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:  # a truncated or damaged .gz file
        raise JsonlError(where, f"not a readable gzip file ({exc})") from None


def iter_jsonl(path: Path, *, objects: bool = False, errors: str = "strict") -> Iterator[tuple[int, Any]]:
    """Stream `(line number, value)` from a JSONL file (gzip when its name ends in `.gz`).

    `errors` is the UTF-8 decoding policy (`strict`, `replace`, `surrogatepass`, …). Raises JsonlError for a
    line that is not JSON (or, with `objects`, not an object), or not UTF-8 under `strict`, and OSError when
    the file cannot be read.
    """
    with _open(Path(path)) as handle:
        yield from _numbered(_decoded(handle, errors, str(path)), str(path), objects)


def iter_jsonl_lines(lines: Iterable[bytes], where: str, *, objects: bool = False) -> Iterator[tuple[int, Any]]:
    """Stream `(line number, value)` from binary lines already open (`where` names them in errors), as
    `iter_jsonl` does for a file: a reader that hashes what it reads passes its own handle."""
    return _numbered(_decoded(lines, "strict", where), where, objects)


def read_jsonl(path: Path, *, objects: bool = False, errors: str = "strict") -> list[Any]:
    """Return every value of a JSONL file, in order (see `iter_jsonl`)."""
    return [value for _, value in iter_jsonl(path, objects=objects, errors=errors)]

