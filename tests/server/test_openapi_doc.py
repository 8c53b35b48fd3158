"""The OpenAPI document says what the service does: security only where a token is checked, every error
status an operation can answer, one error schema for string and list details, the Hub id's pattern."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from core.settings import Settings
from core.types import HUB_PART_SCHEMA_PATTERN, is_hub_id
from server.app import create_app


def document(tmp_path: Path, **changes: Any) -> dict[str, Any]:
    settings = Settings(home=tmp_path / "home", api_token=SecretStr("t"), **changes)
    with TestClient(create_app(settings, resume_unfinished=False)) as client:
        schema: dict[str, Any] = client.get("/openapi.json").json()
    return schema


def operations(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(path, method, op) for path, item in schema["paths"].items() for method, op in item.items()]


def test_open_reads_are_not_declared_secured_and_writes_are(tmp_path: Path) -> None:
    ops = operations(document(tmp_path))
    assert len(ops) >= 13
    for path, method, op in ops:
        if path.startswith("/session"):  # the login takes the token in its body: no bearer
            assert "security" not in op
            continue
        assert ("security" in op) == (method != "get"), (method, path)
        assert ({"401", "403"} <= set(op["responses"])) == (method != "get"), (method, path)
    locked = operations(document(tmp_path, api_read_requires_token=True))
    assert all("security" in op and "401" in op["responses"] for path, _, op in locked
               if not path.startswith("/session"))


def test_every_error_status_is_declared_with_one_error_schema(tmp_path: Path) -> None:
    schema = document(tmp_path)
    detail = schema["components"]["schemas"]["Error"]["properties"]["detail"]["anyOf"]
    assert {d.get("type") for d in detail} == {"string", "array"}
    for path, _method, op in operations(schema):
        codes = set(op["responses"])
        assert {"400", "422", "503"} <= codes
        # A bulk review names its entries in the body: an unknown one is a 404 too.
        assert ("404" in codes) == ("{" in path or path in {"/catalog/approve", "/catalog/reject"}), path
        assert ("409" in codes) == path.endswith(("/approve", "/reject", "/rerun", "/manifest/export")), path
        assert ("413" in codes) == ("requestBody" in op), path
        assert op["responses"]["422"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}


@pytest.mark.parametrize("part", ["openai", "gsm8k", "a", "Meta-Llama_3.1", "x" * 96])
def test_the_documented_hub_pattern_accepts_what_the_service_accepts(part: str) -> None:
    assert re.match(HUB_PART_SCHEMA_PATTERN, part) and is_hub_id(f"{part}/{part}")


@pytest.mark.parametrize("part", ["a--b", "a..b", "-a", "a.", "a/b", "", "x" * 97, "a\n", "a b"])
def test_the_documented_hub_pattern_refuses_what_the_service_refuses(part: str, tmp_path: Path) -> None:
    assert not re.match(HUB_PART_SCHEMA_PATTERN, part)
    assert not is_hub_id(f"{part}/ok")
    params = document(tmp_path)["paths"]["/catalog/{owner}/{name}"]["get"]["parameters"]
    assert [p["schema"]["pattern"] for p in params] == [HUB_PART_SCHEMA_PATTERN] * 2
