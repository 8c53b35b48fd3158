"""Recursive JSON types for raw JSON from outside (a server's answer, a dataset row), narrowed where it is read."""

from __future__ import annotations

JSONScalar = str | int | float | bool | None
JSONValue = JSONScalar | list["JSONValue"] | dict[str, "JSONValue"]
JSONObject = dict[str, JSONValue]
