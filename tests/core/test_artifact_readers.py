"""The artifact readers in core/ read what earlier releases wrote: the tracked regenerated results (rows as
they were written then), a curated folder whose `state.json` stamps no files, a run folder that finished
before runs left `finished.json`; and they refuse the same folders once a locking release left them unfinished."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from core.completion import IncompleteSetError
from core.curated_set import read_curated
from core.folder_lock import LOCK_FILE
from core.regenerated_set import read_regenerated, regenerated_file
from core.settings import get_settings
from curation.pipeline import curate
from tests.curation import test_pipeline

REPO = Path(__file__).resolve().parents[2]
TRACKED = REPO / "benchmarks" / "results" / "gpu_scaling" / "regenerated_smollm2_16k.jsonl.gz"
_manifest = test_pipeline._manifest
mirror = test_pipeline.mirror


def test_the_tracked_regenerated_rows_of_an_earlier_release_read_back() -> None:
    rows = list(read_regenerated(TRACKED))
    assert len(rows) == 16146 and len({r.id for r in rows}) == len(rows)
    assert rows[0].id == "064cc11ef2cfd8430161" and rows[0].conversations[1]["role"] == "assistant"
    assert rows[0].meta["source"]["dataset"] == "sahil2801/CodeAlpaca-20k"


def test_a_run_folder_an_earlier_release_finished_still_reads(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"input": "x", "sampling": {}}))
    lines = [json.dumps({"id": f"r{i}", "conversations": [{"role": "user", "content": "q"},
                                                          {"role": "assistant", "content": "a"}], "meta": {}})
             for i in range(3)]
    (run / "regenerated.jsonl").write_text("\n".join(lines) + "\n")
    (run / "status.json").write_text(json.dumps({"state": "finished"}))
    assert [r.id for r in read_regenerated(run)] == ["r0", "r1", "r2"]
    (run / "status.json").write_text(json.dumps({"state": "interrupted"}))
    with pytest.raises(IncompleteSetError, match="its status is 'interrupted'"):
        regenerated_file(run)
    (run / "status.json").write_text(json.dumps({"state": "finished"}))
    (run / LOCK_FILE).write_text("1\n")  # a locking release ran here: its marker is the only record trusted
    with pytest.raises(IncompleteSetError, match=r"no finished\.json"):
        regenerated_file(run)


def test_a_curated_folder_whose_state_stamps_nothing_still_reads(mirror: Path, tmp_path: Path) -> None:  # noqa: F811
    out = tmp_path / "out"
    curate(_manifest(mirror), out, settings=get_settings())
    ids = [s.id for s in read_curated(out)]
    old = tmp_path / "old"
    shutil.copytree(out, old)
    (old / LOCK_FILE).unlink()
    state = json.loads((old / "state.json").read_text())
    (old / "state.json").write_text(json.dumps({"final": state["final"], "outputs": state["outputs"]}))
    assert [s.id for s in read_curated(old)] == ids
    (old / "data" / "shard-00000.parquet").unlink()
    with pytest.raises(IncompleteSetError, match=r"shard-00000\.parquet is missing"):
        list(read_curated(old))
