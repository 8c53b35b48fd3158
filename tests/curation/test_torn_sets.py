"""Readers check completion: a curated folder torn at any rename of a `curate` run over it (the state after
each rename step, as a SIGKILL there leaves it) is refused by every reader of curated sets — regeneration's,
training's, the curve's control, publish — or, before the run touched its first output, read as the finished
set it still is. A mix of two runs is never consumed."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from core.completion import ArtifactError
from core.curated_set import read_curated
from core.settings import get_settings
from curation.manifest import Budget
from curation.pipeline import curate
from curation.publish import PublishError, build_folder
from inference.records import InputError, load_rows
from tests.curation import test_pipeline
from training.curve.plan import CurveError, load_originals
from training.data import DataError, load_conversations

_manifest = test_pipeline._manifest
mirror = test_pipeline.mirror  # the same small mirror fixture


class Killed(BaseException):
    """Stands for SIGKILL right after a rename: nothing after it runs, no handler catches it."""


def _readers(folder: Path, tmp_path: Path) -> dict[str, Any]:
    """What each reader of curated sets makes of `folder`: its row ids, or the error class it refused with."""
    def attempt(read: Any, refusal: type[Exception]) -> Any:
        try:
            return sorted(read())
        except refusal as exc:
            assert "not a finished curated set" in str(exc) or "not the set" in str(exc), str(exc)
            return refusal.__name__

    return {
        "core": attempt(lambda: [s.id for s in read_curated(folder)], ArtifactError),
        "regen": attempt(lambda: [r.id for r in load_rows(folder)[0]], InputError),
        "train": attempt(lambda: [i for i, _ in load_conversations(folder, "original_messages")], DataError),
        "curve": attempt(lambda: list(load_originals(folder, wanted=_all_ids(folder))), CurveError),
        "publish": attempt(lambda: _published_ids(folder, tmp_path), PublishError),
    }


def _all_ids(folder: Path) -> set[str]:
    import pyarrow.parquet as pq

    return {r["id"] for p in folder.glob("data/shard-*.parquet") for r in pq.read_table(p).to_pylist()}


def _published_ids(folder: Path, tmp_path: Path) -> list[str]:
    import pyarrow.parquet as pq

    out = tmp_path / "hub"
    shutil.rmtree(out, ignore_errors=True)
    written = build_folder(folder, out, repo_id="me/x", version="0", accept_license_risk=True)
    return [r["id"] for p in written.shards for r in pq.read_table(p).to_pylist()]


@pytest.mark.slow
def test_a_set_torn_at_any_rename_is_refused_or_read_as_the_finished_one(
        mirror: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    first, second = _manifest(mirror), _manifest(mirror, budget=Budget(total=25, seed=5))
    finished = tmp_path / "finished"
    curate(first, finished, settings=get_settings())
    expected = _readers(finished, tmp_path)
    assert len({json.dumps(v) for v in expected.values()}) == 1 and isinstance(expected["core"], list)
    real_replace = os.replace
    renames: list[str] = []

    def counting(src: Any, dst: Any, **kwargs: Any) -> None:
        renames.append(str(dst))
        real_replace(src, dst, **kwargs)

    probe = tmp_path / "probe"
    shutil.copytree(finished, probe)
    monkeypatch.setattr(os, "replace", counting)
    curate(second, probe, settings=get_settings())
    monkeypatch.setattr(os, "replace", real_replace)
    assert len(renames) >= 6
    refused = 0
    for k in range(1, len(renames)):  # the last rename is the marker's: the set is then the second run's
        out = tmp_path / f"torn-{k}"
        shutil.copytree(finished, out)
        calls = 0

        def kill_after_k(src: Any, dst: Any, k: int = k, **kwargs: Any) -> None:
            nonlocal calls
            real_replace(src, dst, **kwargs)
            calls += 1
            if calls == k:
                raise Killed

        monkeypatch.setattr(os, "replace", kill_after_k)
        with pytest.raises(Killed):
            curate(second, out, settings=get_settings())
        monkeypatch.setattr(os, "replace", real_replace)
        seen = _readers(out, tmp_path)
        where = f"killed after rename {k} of {len(renames)} ({renames[k - 1]})"
        if (out / "state.json").exists():  # the run had not touched an output yet: the finished set, whole
            assert seen == expected, where
        else:
            assert set(seen.values()) == {"ArtifactError", "InputError", "DataError", "CurveError", "PublishError"}, \
                where
            refused += 1
    assert refused >= 4  # the shard, the set-aside files, the report, the summary at least


def test_the_issues_torn_folder_is_refused_by_regen_and_publish(
        mirror: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """Curate A, then curate B on the same folder killed as its shard is renamed in: B's rows beside A's report
    and manifest, no state.json. Regeneration read them as complete, and publish shipped them under A's card."""
    out = tmp_path / "out"
    curate(_manifest(mirror), out, settings=get_settings())
    real_replace = os.replace

    def kill_at_the_shard(src: Any, dst: Any, **kwargs: Any) -> None:
        real_replace(src, dst, **kwargs)
        if str(dst).endswith(".parquet"):
            raise Killed

    monkeypatch.setattr(os, "replace", kill_at_the_shard)
    with pytest.raises(Killed):
        curate(_manifest(mirror, budget=Budget(total=25, seed=5)), out, settings=get_settings())
    monkeypatch.setattr(os, "replace", real_replace)
    assert (out / "report.json").is_file() and not (out / "state.json").exists()
    with pytest.raises(InputError, match=r"no state\.json"):
        load_rows(out)
    with pytest.raises(PublishError, match=r"no state\.json"):
        build_folder(out, tmp_path / "hub", repo_id="me/x", version="0", accept_license_risk=True)
    with pytest.raises(InputError, match=r"no state\.json"):
        load_rows(out / "data" / "shard-00000.parquet")  # a file of the set, named by its path


def test_a_set_changed_after_it_was_finished_is_refused(mirror: Path, tmp_path: Path) -> None:  # noqa: F811
    out = tmp_path / "out"
    curate(_manifest(mirror), out, settings=get_settings(), jsonl=True)
    assert len(list(read_curated(out))) > 0 and len(list(read_curated(out / "samples.jsonl"))) > 0
    (out / "data" / "shard-00001.parquet").write_bytes((out / "data" / "shard-00000.parquet").read_bytes())
    with pytest.raises(ArtifactError, match="its shards differ"):
        list(read_curated(out))
    (out / "data" / "shard-00001.parquet").unlink()
    shard = out / "data" / "shard-00000.parquet"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))  # same size, other bytes
    with pytest.raises(ArtifactError, match="sha256 differs"):
        list(read_curated(out))
    (out / "report.json").write_text("{}")
    with pytest.raises(ArtifactError, match=r"report\.json holds"):
        list(read_curated(out))
