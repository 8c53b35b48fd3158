"""What text the catalog can store: no NUL character (PostgreSQL text refuses it) and no lone surrogate (UTF-8
cannot encode one, so neither database driver can send it).

Text a person typed (a reviewer, a note, a search, an id) is refused with `InvalidValueError` naming the
field, so the API answers 422 and the CLI prints one line, alike on SQLite and PostgreSQL. Text the world
sent (a dataset's description from the Hub, an exception's message) is made storable instead: each bad
character becomes U+FFFD, and nothing else changes. `guard_session` is the net under both: a flush that would
still send such text raises `InvalidValueError` rather than a driver error.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

from sqlalchemy import event, inspect
from sqlmodel import Session

from curation.catalog.errors import InvalidValueError

REPLACEMENT = "\ufffd"
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")

T = TypeVar("T")


def unstorable_reason(value: str) -> str | None:
    """Return why `value` cannot be stored ('a NUL character', 'a lone surrogate'), or None when it can."""
    found = _UNSTORABLE.search(value)
    if found is None:
        return None
    return "a NUL character" if found.group() == "\x00" else "an unpaired surrogate (not encodable as UTF-8)"


def checked(value: str, what: str) -> str:
    """Return `value` when the catalog can store and search it; else raise InvalidValueError naming `what`."""
    reason = unstorable_reason(value)
    if reason is not None:
        raise InvalidValueError(f"{what} contains {reason}")
    return value


def checked_optional(value: str | None, what: str) -> str | None:
    """`checked` for an optional value: None passes."""
    return None if value is None else checked(value, what)


def storable(value: T) -> T:
    """Return `value` (a string, or lists and dicts of them at any depth) with every NUL and lone surrogate
    replaced by U+FFFD; keys too. Other values are returned as they are."""
    if isinstance(value, str):
        return _UNSTORABLE.sub(REPLACEMENT, value)  # type: ignore[return-value]
    if isinstance(value, dict):
        return {storable(k): storable(v) for k, v in value.items()}  # type: ignore[return-value]
    if isinstance(value, list):
        return [storable(v) for v in value]  # type: ignore[return-value]
    return value


def _refuse_unstorable_text(session: Session, _context: Any, _instances: Any) -> None:
    for obj in (*session.new, *session.dirty):
        state = inspect(obj)
        for attr in state.mapper.column_attrs:
            value = state.attrs[attr.key].loaded_value
            if isinstance(value, str):
                checked(value, f"{state.mapper.local_table.name}.{attr.key}")
            elif isinstance(value, dict | list) and storable(value) != value:
                raise InvalidValueError(f"{state.mapper.local_table.name}.{attr.key} contains a NUL character or"
                                        " an unpaired surrogate")


def guard_session(session: Session) -> Session:
    """Make `session` refuse, at flush, any row whose text the database could not take; return it."""
    event.listen(session, "before_flush", _refuse_unstorable_text)
    return session
