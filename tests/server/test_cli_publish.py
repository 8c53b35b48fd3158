"""`datahunt publish`: offline it writes the folder and says so; online it uploads through huggingface_hub.

The online test routes huggingface_hub's own HTTP client to recorded Hub API answers
(tests/data/recorded/hub/publish/), so `create_repo` and `upload_folder` run unchanged.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from core.settings import get_settings
from core.types import Category
from curation.manifest import Manifest, Source, dump_manifest
from curation.pipeline import curate
from server.cli import app

DATA = Path(__file__).resolve().parents[1] / "data"
RECORDED = DATA / "recorded" / "hub" / "publish"
runner = CliRunner()


def curated_set(out: Path) -> Path:
    """Curate 20 GSM8K (MIT) and 10 alpaca (CC BY-NC) rows from the test mirror, manifest.json beside them."""
    manifest = Manifest(
        sources=[
            Source(hub_id="openai/gsm8k", config="main", category=Category.MATH, max_rows=20, license="MIT"),
            Source(hub_id="tatsu-lab/alpaca", category=Category.GENERAL_CHAT, max_rows=10, license="CC BY-NC 4.0"),
        ],
        mirror=str(DATA / "mirror"),
    )
    curate(manifest, out, settings=get_settings())
    (out / "manifest.json").write_text(dump_manifest(manifest))
    return out


@pytest.mark.slow
def test_offline_writes_the_folder_and_says_it_was_not_uploaded(tmp_path: Path) -> None:
    src = curated_set(tmp_path / "curated")
    result = runner.invoke(app, ["publish", str(src), "--repo", "me/eagle-set", "--accept-license-risk"])
    assert result.exit_code == 0, result.output
    folder = (tmp_path / "curated-hub").resolve()
    assert f"curated set of 30 rows written as a Hub dataset folder: {folder}" in result.output
    assert "not uploaded: offline mode (DATAHUNT_OFFLINE)" in result.output
    assert (folder / "README.md").is_file() and (folder / "data" / "train-00000-of-00001.parquet").is_file()
    as_json = runner.invoke(app, ["publish", str(src), "--repo", "me/eagle-set", "--out", str(tmp_path / "o"),
                                  "--json", "--accept-license-risk"])
    assert json.loads(as_json.stdout) == {"folder": str((tmp_path / "o").resolve()), "kind": "curated", "rows": 30,
                                          "shards": 1, "uploaded": False, "url": None,
                                          "offline": "offline mode (DATAHUNT_OFFLINE)", "license_warnings": [
                                              "tatsu-lab/alpaca: license CC BY-NC 4.0 (non-commercial)"]}


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bad_repo = runner.invoke(app, ["publish", str(tmp_path), "--repo", "not-a-repo"])
    assert bad_repo.exit_code == 2 and "malformed Hub dataset id" in bad_repo.output
    no_set = runner.invoke(app, ["publish", str(tmp_path), "--repo", "me/x"])
    assert no_set.exit_code == 2 and "neither a curated set" in no_set.output


@pytest.fixture
def recorded_hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, str, bytes]]]:
    import httpx2
    from huggingface_hub import constants
    from huggingface_hub.utils import _http

    from agents import backends

    seen: list[tuple[str, str, bytes]] = []

    def recorded(name: str) -> object:
        return json.loads((RECORDED / name).read_text())

    def answer(request: httpx2.Request) -> httpx2.Response:
        path = request.url.path
        seen.append((request.method, path, request.content))
        if path == "/api/repos/create":
            return httpx2.Response(200, json=recorded("create_repo.json"))
        if path == "/api/validate-yaml":
            return httpx2.Response(200, json=recorded("validate_yaml.json"))
        if path == "/api/datasets/me/eagle-set/preupload/main":
            files = json.loads(request.content)["files"]
            return httpx2.Response(200, json={"files": [{"path": f["path"], "uploadMode": "regular",
                                                         "shouldIgnore": False, "oid": None} for f in files]})
        if path == "/api/datasets/me/eagle-set/commit/main":
            return httpx2.Response(200, json=recorded("commit.json"))
        return httpx2.Response(404, headers={"X-Error-Code": "RepoNotFound"}, json={"error": "Repository not found"})

    monkeypatch.delenv("DATAHUNT_OFFLINE")
    monkeypatch.setenv("DATAHUNT_HF_TOKEN", "hf_recorded")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(backends, "probe_hub", lambda: None)  # the Hub "answers"; its API is the recording
    get_settings.cache_clear()
    _http.set_client_factory(lambda: httpx2.Client(transport=httpx2.MockTransport(answer)))
    yield seen
    _http.set_client_factory(_http.default_client_factory)


@pytest.mark.slow
def test_online_creates_a_private_repo_and_uploads_shards_and_card(
    tmp_path: Path, recorded_hub: list[tuple[str, str, bytes]]
) -> None:
    src = curated_set(tmp_path / "curated")
    result = runner.invoke(app, ["publish", str(src), "--repo", "me/eagle-set", "--accept-license-risk"])
    assert result.exit_code == 0, result.output
    assert "uploaded to https://huggingface.co/datasets/me/eagle-set (private)" in result.output
    create = next(body for method, path, body in recorded_hub if path == "/api/repos/create")
    assert json.loads(create) == {"name": "eagle-set", "organization": "me", "visibility": "private", "type": "dataset"}
    commit = next(body for method, path, body in recorded_hub if path.endswith("/commit/main"))
    files = {r["value"]["path"]: r["value"]["content"] for r in map(json.loads, commit.decode().splitlines())
             if r["key"] == "file"}
    assert set(files) == {"README.md", "LICENSE.md", "data/train-00000-of-00001.parquet"}  # the licence the card links
    assert base64.b64decode(files["README.md"]).startswith(b"---\nlicense: other\n")
    public = runner.invoke(app, ["publish", str(src), "--repo", "me/eagle-set", "--public", "--accept-license-risk"])
    assert public.exit_code == 0 and "(public)" in public.output
    creates = [json.loads(body) for method, path, body in recorded_hub if path == "/api/repos/create"]
    assert creates[-1]["visibility"] == "public"
