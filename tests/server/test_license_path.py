"""Licences on the reviewer's path: offline campaign entry → approve → `manifest export` → curate → publish.

The catalog entries are created as an offline campaign creates them (the metadata snapshot states no licence);
a planted local mirror states one per dataset, as MIRROR.json does. The non-commercial licence must reach the
catalog, the manifest and the card, be warned about at approval, and stop `publish` until it is acknowledged.
Runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from core.settings import get_settings
from curation.catalog import store
from curation.manifest import load_manifest
from server.cli import app

MIRROR = Path(__file__).resolve().parents[1] / "data" / "mirror"
runner = CliRunner()


def planted_mirror(root: Path) -> Path:
    """A two-dataset mirror: 20 GSM8K rows under a non-commercial licence and 20 under MIT."""
    lines = (MIRROR / "openai" / "gsm8k" / "train.jsonl").read_text().splitlines()
    entries = []
    for number, (hub_id, license_text) in enumerate([("planted/nc-math", "CC BY-NC 4.0 (DATA_LICENSE)"),
                                                     ("planted/mit-math", "MIT")]):
        name = f"{hub_id}/train.jsonl"
        (root / hub_id).mkdir(parents=True)
        (root / name).write_text("\n".join(lines[number * 20:(number + 1) * 20]) + "\n")
        entries.append({"id": hub_id, "files": [name], "format": "qa", "rows": 20, "license": license_text,
                        "role": "train"})
    (root / "MIRROR.json").write_text(json.dumps(entries))
    return root


def offline_entries(database_url: str) -> None:
    """Catalog entries as an offline campaign leaves them: found, accepted, no licence known."""
    engine = store.make_engine(database_url)
    store.upgrade_database(engine)
    with store.open_session(engine) as session:
        campaign = store.create_campaign(session, categories=["math"], offline=True, backends=["offline"])
        run = store.start_run(session, campaign_id=campaign.id, category="math")
        for hub_id in ("planted/nc-math", "planted/mit-math"):
            candidate = store.add_candidate(session, campaign_id=campaign.id, run_id=run.id, category="math",
                                            candidate={"hub_id": hub_id, "categories": ["math"], "relevance": 0.8,
                                                       "format_guess": "qa",
                                                       "metadata": {"license": None, "tags": []}})
            store.upsert_entry(session, candidate=candidate, decision="accept", reasons=[])
    engine.dispose()


def test_a_non_commercial_licence_travels_to_the_card_and_blocks_publish(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mirror = planted_mirror(tmp_path / "mirror")
    monkeypatch.setenv("DATAHUNT_DATABASE_URL", database_url)
    monkeypatch.setenv("DATAHUNT_MIRROR", str(mirror))
    get_settings.cache_clear()
    offline_entries(database_url)

    approved = runner.invoke(app, ["catalog", "approve", "planted/nc-math", "--reviewer", "alice"])
    assert approved.exit_code == 0, approved.output
    assert ("warning: planted/nc-math is approved with license CC BY-NC 4.0 (DATA_LICENSE) (non-commercial)"
            in approved.output)
    quiet = runner.invoke(app, ["catalog", "approve", "planted/mit-math", "--reviewer", "alice"])
    assert quiet.exit_code == 0 and "warning" not in quiet.output

    shown = json.loads(runner.invoke(app, ["catalog", "list", "--json"]).stdout)
    licences = {e["hub_id"]: e["license"] for e in shown}
    assert licences == {"planted/nc-math": "CC BY-NC 4.0 (DATA_LICENSE)", "planted/mit-math": "MIT"}

    exported = runner.invoke(app, ["manifest", "export", "--out", "m.json"])
    assert exported.exit_code == 0, exported.output
    assert "warning: planted/nc-math: license CC BY-NC 4.0 (DATA_LICENSE) (non-commercial)" in exported.output
    manifest_path = get_settings().resolved_data_dir / "m.json"
    assert {s.hub_id: s.license for s in load_manifest(manifest_path).sources} == licences

    out = tmp_path / "curated"
    curated = runner.invoke(app, ["curate", "--manifest", str(manifest_path), "--out", str(out)])
    assert curated.exit_code == 0, curated.output

    refused = runner.invoke(app, ["publish", str(out), "--repo", "me/set"])
    assert refused.exit_code == 2
    assert "planted/nc-math: license CC BY-NC 4.0 (DATA_LICENSE) (non-commercial)" in refused.output
    assert "--accept-license-risk" in refused.output and "planted/mit-math" not in refused.output
    assert not (tmp_path / "curated-hub" / "README.md").exists()

    published = runner.invoke(app, ["publish", str(out), "--repo", "me/set", "--accept-license-risk"])
    assert published.exit_code == 0, published.output
    card = (tmp_path / "curated-hub" / "README.md").read_text()
    assert "license: other" in card and "license: unknown" not in card
    assert "| CC BY-NC 4.0 (DATA_LICENSE) (non-commercial) |" in card and "| MIT |" in card
    assert "**License warning**: 1 of 2 sources" in card and "`planted/nc-math`: CC BY-NC 4.0" in card


def test_an_unknown_licence_also_needs_the_acknowledgement(tmp_path: Path) -> None:
    from curation.publish import LicenseRiskError, check_licenses

    sources = [{"hub_id": "a/known", "license": "apache-2.0"}, {"hub_id": "b/none", "license": None},
               {"hub_id": "c/prose", "license": "Please follow OpenAI and ShareGPT terms"}]
    with pytest.raises(LicenseRiskError, match=r"2 source\(s\).*b/none: license not stated \(unknown\).*c/prose"):
        check_licenses(sources, accepted=False)
    assert check_licenses(sources, accepted=True) == [
        "b/none: license not stated (unknown)", "c/prose: license Please follow OpenAI and ShareGPT terms (unknown)"]
    assert check_licenses(sources[:1], accepted=False) == []


def test_an_offline_campaign_takes_the_mirror_index_licences(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATAHUNT_MIRROR", str(MIRROR))
    get_settings.cache_clear()
    ran = runner.invoke(app, ["campaign", "run", "--categories", "general_chat,code_explanation", "--offline",
                              "--json"])
    assert ran.exit_code == 0, ran.output
    entries = json.loads(runner.invoke(app, ["catalog", "list", "--json", "--limit", "1000"]).stdout)
    licences = {e["hub_id"]: e["license"] for e in entries}
    assert licences["tatsu-lab/alpaca"] == "CC BY-NC 4.0 (DATA_LICENSE)"  # the snapshot states none
    assert licences["sahil2801/CodeAlpaca-20k"].startswith("CC BY-NC 4.0")
