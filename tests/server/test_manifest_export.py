"""Manifest export: built from approved entries, confined to the data directory, same from API and CLI."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import Engine
from typer.testing import CliRunner

from core.settings import Settings, get_settings
from core.types import Category
from curation.catalog import store
from curation.catalog.models import CatalogEntry
from curation.manifest import load_manifest
from server.app import create_app
from server.commands import manifest as manifest_commands
from server.manifest_builder import (
    ExportPathError,
    build_manifest,
    make_budget,
    parse_shares,
    resolve_export_path,
    write_manifest,
)

AUTH = {"Authorization": "Bearer tok"}


def entry(hub_id: str, categories: list[str], relevance: dict[str, float], **fields: object) -> CatalogEntry:
    return CatalogEntry(hub_id=hub_id, categories=categories, relevance=relevance, status="approved", **fields)


def test_sources_pin_what_the_entry_knows() -> None:
    manifest = build_manifest([
        entry("openai/gsm8k", ["reasoning", "math"], {"reasoning": 0.4, "math": 0.9}, config="main",
              license="mit", format_guess="qa", dataset_metadata={"sha": "deadbeef"},
              field_mapping={"prompt": "question", "response": "answer"}),
        entry("bigcode/commitpackft", ["commit_messages"], {"commit_messages": 0.7}, revision="cafe", split="train",
              format_guess="unknown"),
        entry("odd/legacy", ["cooking"], {"cooking": 1.0}),
    ], budget=make_budget(1000, parse_shares(["math=0.5"])))
    by_id = {s.hub_id: s for s in manifest.sources}
    gsm = by_id["openai/gsm8k"]
    assert (gsm.category, gsm.revision, gsm.config, gsm.split, gsm.license, gsm.format) == (
        Category.MATH, "deadbeef", "main", "train", "mit", "qa")
    assert gsm.field_mapping == {"prompt": "question", "response": "answer"}
    assert by_id["bigcode/commitpackft"].revision == "cafe" and by_id["bigcode/commitpackft"].format is None
    assert "odd/legacy" not in by_id and "skipped odd/legacy" in manifest.notes[0]
    assert [s.category for s in manifest.sources] == [Category.COMMIT_MESSAGES, Category.MATH]
    assert manifest.budget.total == 1000 and manifest.budget.shares == {Category.MATH: 0.5}


def test_bad_shares_are_named() -> None:
    for bad in (["math"], ["math=lots"], ["math=nan"], ["math=1.5"]):
        with pytest.raises(ValueError, match="category=fraction"):
            parse_shares(bad)
    with pytest.raises(ValueError, match=r"unknown category 'maths' \(did you mean `math`\?\)"):
        parse_shares(["maths=0.1"])
    with pytest.raises(ValueError, match="sum to"):
        make_budget(10, parse_shares(["math=0.7", "reasoning=0.6"]))


def test_export_path_stays_inside_the_data_dir(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    assert resolve_export_path(data, "m.json") == (data / "m.json").resolve()
    assert resolve_export_path(data, str(data / "sub" / "m.json")) == (data / "sub" / "m.json").resolve()
    assert resolve_export_path(data, None).parent == (data / "manifests").resolve()
    (tmp_path / "outside").mkdir()
    (data / "escape").symlink_to(tmp_path / "outside")
    for bad, reason in [("../m.json", "'..'"), (str(tmp_path / "m.json"), "outside"), ("escape/m.json", "outside"),
                        ("m.txt", ".json"), ("/etc/passwd.json", "outside")]:
        with pytest.raises(ExportPathError, match=reason):
            resolve_export_path(data, bad)


@pytest.fixture
def approved_engine(database_url: str) -> Iterator[Engine]:
    engine = store.make_engine(database_url)
    store.upgrade_database(engine)
    with store.open_session(engine) as session:
        campaign = store.create_campaign(session, categories=["math"], offline=True, backends=["offline"])
        run = store.start_run(session, campaign_id=campaign.id, category="math")
        for hub_id in ("openai/gsm8k", "meta-math/MetaMathQA"):
            candidate = store.add_candidate(session, campaign_id=campaign.id, run_id=run.id, category="math",
                                            candidate={"hub_id": hub_id, "categories": ["math"], "relevance": 0.8,
                                                       "metadata": {"license": "mit", "sha": "0123abcd"}})
            store.upsert_entry(session, candidate=candidate, decision="accept", reasons=[])
        store.review_entry(session, hub_id="openai/gsm8k", approve=True, reviewer="alice")
    yield engine
    engine.dispose()


def test_api_export_writes_what_it_returns(approved_engine: Engine, tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "home", api_token=SecretStr("tok"))
    with TestClient(create_app(settings, engine=approved_engine, resume_unfinished=False)) as client:
        shown = client.get("/manifest", params={"target_model": "Qwen/Qwen3-8B", "share": "math=1"}).json()
        assert [s["hub_id"] for s in shown["sources"]] == ["openai/gsm8k"]
        assert shown["target"]["model"] == "Qwen/Qwen3-8B" and shown["budget"]["shares"] == {"math": 1.0}
        assert client.get("/manifest", params={"share": "math=2"}).status_code == 422
        exported = client.post("/manifest/export", json={"path": "team/m1.json", "target_model": "Qwen/Qwen3-8B",
                                                         "budget_total": 5000}, headers=AUTH)
        assert exported.status_code == 200
        path = Path(exported.json()["path"])
        assert path == settings.resolved_data_dir / "team" / "m1.json"
        written = load_manifest(path)
        assert written.model_dump(mode="json") == exported.json()["manifest"]
        assert written.sources[0].revision == "0123abcd" and written.budget.total == 5000
        outside = client.post("/manifest/export", json={"path": str(tmp_path / "evil.json")}, headers=AUTH)
        assert outside.status_code == 422 and "may not start with '/'" in outside.json()["detail"][0]["msg"]
        assert not (tmp_path / "evil.json").exists()
        assert client.post("/manifest/export", json={"shares": {"math": 0.9, "reasoning": 0.9}},
                           headers=AUTH).status_code == 422


def test_cli_export(approved_engine: Engine, database_url: str, tmp_path: Path,
                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATAHUNT_DATABASE_URL", database_url)
    get_settings.cache_clear()
    cli = typer.Typer()
    cli.callback()(lambda: None)
    manifest_commands.register(cli)
    runner = CliRunner()
    done = runner.invoke(cli, ["manifest", "export", "--out", "cli.json", "--target", "Qwen/Qwen3-8B", "--json"])
    assert done.exit_code == 0, done.output
    result = json.loads(done.output)
    assert [s["hub_id"] for s in result["manifest"]["sources"]] == ["openai/gsm8k"]
    assert load_manifest(Path(result["path"])).target.model == "Qwen/Qwen3-8B"  # type: ignore[union-attr]
    refused = runner.invoke(cli, ["manifest", "export", "--out", "../../x.json"])
    assert refused.exit_code == 2 and refused.output.strip().startswith("error: export path")
    assert "Traceback" not in refused.output
    bad_share = runner.invoke(cli, ["manifest", "export", "--share", "maths=0.5"])
    assert bad_share.exit_code == 2 and "did you mean `math`?" in bad_share.output
    bad_share = runner.invoke(cli, ["manifest", "export", "--share", "cooking=0.5"])
    assert bad_share.exit_code == 2 and "unknown category 'cooking'" in bad_share.output


def test_export_never_writes_through_a_link_planted_at_the_temporary_name(tmp_path: Path) -> None:
    data, outside = tmp_path / "data", tmp_path / "outside"
    data.mkdir()
    outside.mkdir()
    (data / ".m.json.tmp").symlink_to(outside / "stolen.json")  # the old, predictable temporary name
    manifest = build_manifest([entry("openai/gsm8k", ["math"], {"math": 0.9})])
    path = write_manifest(manifest, resolve_export_path(data, "m.json"), data_dir=data)
    assert load_manifest(path).sources[0].hub_id == "openai/gsm8k"
    assert list(outside.iterdir()) == []
    assert sorted(p.name for p in data.iterdir()) == [".m.json.tmp", "m.json"]  # no temporary file left behind


def test_export_refuses_a_folder_swapped_for_a_link_after_the_check(tmp_path: Path) -> None:
    data, outside = tmp_path / "data", tmp_path / "outside"
    (data / "team").mkdir(parents=True)
    outside.mkdir()
    path = resolve_export_path(data, "team/m.json")  # checked while team/ is a real folder
    (data / "team").rmdir()
    (data / "team").symlink_to(outside)
    manifest = build_manifest([])
    with pytest.raises(ExportPathError, match="symbolic link"):
        write_manifest(manifest, path, data_dir=data)
    assert list(outside.iterdir()) == []
    (data / "team").unlink()
    (data / "team").write_text("a file now")
    with pytest.raises(ExportPathError, match="is a file, not a folder"):
        write_manifest(manifest, path, data_dir=data)


def test_export_target_that_is_a_link_inside_is_replaced_not_followed(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    path = resolve_export_path(data, "m.json")
    (data / "other.json").write_text("keep me")
    (data / "m.json").symlink_to(data / "other.json")  # planted after the check
    write_manifest(build_manifest([]), path, data_dir=data)
    assert not (data / "m.json").is_symlink() and (data / "other.json").read_text() == "keep me"


@pytest.mark.parametrize("length", [246, 251, 255])
def test_long_export_names_that_fit_are_written(tmp_path: Path, length: int) -> None:
    data = tmp_path / "data"
    name = "a" * (length - len(".json")) + ".json"
    path = write_manifest(build_manifest([]), resolve_export_path(data, name), data_dir=data)
    assert path.name == name and load_manifest(path).sources == []
    assert [p.name for p in data.iterdir()] == [name]


def test_unusable_export_paths_are_named(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "afile.json").write_text("{}")
    for bad, reason in [("a" * 251 + ".json", "256 bytes long; the limit is 255"),
                        ("afile.json/child.json", "afile.json is a file, not a folder"),
                        ("é" * 126 + ".json", "257 bytes")]:
        with pytest.raises(ExportPathError, match=reason):
            resolve_export_path(data, bad)


def test_benchmarks_become_eval_sets_on_their_test_split() -> None:
    benchmark = {"code": "benchmark", "detail": "evaluation benchmark", "blocking": True, "category": "bug_fixing"}
    verified = CatalogEntry(hub_id="princeton-nlp/SWE-bench_Verified", categories=["bug_fixing"],
                            relevance={"bug_fixing": 0.8}, verifier_decision="reject", reasons=[benchmark],
                            revision="abc123")
    manifest = build_manifest([entry("org/train", ["math"], {"math": 0.9})], eval_entries=[verified])
    assert [s.hub_id for s in manifest.sources] == ["org/train"]
    assert [(e.name, e.hub_id, e.split, e.revision) for e in manifest.eval_sets] == [
        ("princeton-nlp/SWE-bench_Verified", "princeton-nlp/SWE-bench_Verified", "test", "abc123")]


def test_benchmark_entries_are_the_ones_with_a_benchmark_reason_no_reviewer_rejected(engine: Engine) -> None:
    benchmark = {"code": "benchmark", "detail": "evaluation benchmark", "blocking": True, "category": "math"}
    with store.open_session(engine) as session:
        session.add(CatalogEntry(hub_id="HuggingFaceH4/MATH-500", categories=["math"], relevance={"math": 0.9},
                                 verifier_decision="reject", reasons=[benchmark]))
        session.add(CatalogEntry(hub_id="org/dropped-bench", categories=["math"], relevance={"math": 0.9},
                                 status="rejected", verifier_decision="reject", reasons=[benchmark]))
        session.add(CatalogEntry(hub_id="org/train", categories=["math"], relevance={"math": 0.9}))
        session.commit()
    with store.open_session(engine) as session:
        assert [e.hub_id for e in store.benchmark_entries(session)] == ["HuggingFaceH4/MATH-500"]


def test_cli_export_says_where_a_relative_out_went_and_both_helps_say_what_out_means(
        approved_engine: Engine, database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`manifest export --out x.json` writes into the data directory, `from-mirror --out x.json` into the current
    folder: the command says so when it matters, and each --help names the difference."""
    from server.cli import app

    monkeypatch.setenv("DATAHUNT_DATABASE_URL", database_url)
    get_settings.cache_clear()
    runner = CliRunner()
    done = runner.invoke(app, ["manifest", "export", "--out", "team/m1.json"])
    assert done.exit_code == 0, done.output
    data_dir = get_settings().resolved_data_dir
    assert f"--out team/m1.json is read inside the data directory {data_dir}" in done.output
    assert (data_dir / "team" / "m1.json").is_file()
    for command in ("export", "from-mirror"):
        shown = runner.invoke(app, ["manifest", command, "--help"], terminal_width=300).output
        assert "current folder" in shown and "data directory" in shown, command
