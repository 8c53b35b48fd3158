"""Licence texts: their Hub id, their risk class, and which licence a mirror index states per dataset."""

from __future__ import annotations

from pathlib import Path

from core.licenses import license_risk
from curation.licenses import license_from_metadata, mirror_licenses
from curation.mirror import read_mirror_index

MIRROR = Path(__file__).resolve().parents[1] / "data" / "mirror"


def test_risk_classes_of_real_licence_texts() -> None:
    assert license_risk("CC BY-NC 4.0 (DATA_LICENSE); code Apache-2.0") == "non_commercial"
    assert license_risk(
        "not stated for this file (GPT-4-LLM repo: Apache-2.0 code, CC BY-NC 4.0 data)"
    ) == "non_commercial"
    assert license_risk("cc-by-nc-sa-4.0") == "non_commercial"
    assert license_risk("Apache-2.0 (LLaMA-Factory repository license)") == "ok" and license_risk("MIT") == "ok"
    assert license_risk("other") == "restricted" and license_risk("cc-by-nd-4.0") == "restricted"
    assert license_risk(None) == license_risk("unknown") == license_risk("Please follow OpenAI terms") == "unknown"
    # no derivatives is the stronger restriction: a licence that is both is restricted (it read non-commercial)
    assert license_risk("cc-by-nc-nd-4.0") == license_risk("CC BY-NC-ND 4.0") == "restricted"
    assert license_risk("research purposes only") == license_risk("academic use only") == "non_commercial"
    assert license_risk("Academic Free License v3.0") == "unknown"  # a permissive licence datahunt does not list


def test_metadata_field_then_tags_then_card_data() -> None:
    assert license_from_metadata({"license": "mit", "tags": ["license:apache-2.0"]}) == "mit"
    assert license_from_metadata({"license": None, "tags": ["license:apache-2.0"]}) == "apache-2.0"
    assert license_from_metadata({"cardData": {"license": "odc-by"}}) == "odc-by"
    assert license_from_metadata({"tags": ["license:"], "card_data": {}}) is None


def test_the_mirror_index_gives_each_dataset_its_riskiest_licence() -> None:
    found = mirror_licenses(read_mirror_index(MIRROR))
    assert found["tatsu-lab/alpaca"] == "CC BY-NC 4.0 (DATA_LICENSE)"
    assert license_risk(found["sahil2801/CodeAlpaca-20k"]) == "non_commercial"
    assert found["openai/gsm8k"] == "MIT" and "microsoft/CodeReviewer" not in found  # it states none
    mixed = [{"id": "a/b", "files": ["x"], "license": "MIT"}, {"id": "a/b", "files": ["y"], "license": "CC BY-NC 4.0"}]
    assert mirror_licenses(mixed) == {"a/b": "CC BY-NC 4.0"}
