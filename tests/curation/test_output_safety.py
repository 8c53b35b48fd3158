"""Curation outputs never follow a planted link and always commit as one unit (a kill at any write leaves the
old result or the new one, never a mix, and never a mix taken as finished)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from core.settings import get_settings
from core.types import Category
from curation.atomic_files import UnsafePathError, open_append, staged_file, write_file
from curation.errors import CurationError
from curation.manifest import Budget, Manifest, ManifestError, Source
from curation.pipeline import curate
from tests.curation import test_pipeline

_manifest = test_pipeline._manifest
mirror = test_pipeline.mirror  # the same small mirror fixture


class Killed(BaseException):
    """Stands for SIGKILL at a write boundary: nothing after it runs, no handler catches it."""


def _ids(out: Path) -> list[str]:
    return sorted(r["id"] for r in pq.read_table(out / "data/shard-00000.parquet").to_pylist())


def _other(mirror_dir: Path) -> Manifest:
    return Manifest(
        sources=[Source(hub_id="openai/gsm8k", config="main", data_files=["openai/gsm8k/train.jsonl"],
                        category=Category.MATH, max_rows=30)],
        mirror=str(mirror_dir),
        budget=Budget(seed=9),
    )


def test_a_link_at_the_old_temporary_name_is_never_written_through(mirror: Path, tmp_path: Path) -> None:
    out, outside = tmp_path / "out", tmp_path / "precious.txt"
    outside.write_text("keep me")
    out.mkdir()
    (out / "report.json.tmp").symlink_to(outside)
    (out / "state.json.tmp").symlink_to(outside)
    curate(_manifest(mirror), out, settings=get_settings())
    assert outside.read_text() == "keep me"
    assert not (out / "report.json").is_symlink()
    assert json.loads((out / "report.json").read_text())["rows_out"] > 0


def test_links_planted_at_every_name_under_out_change_nothing_outside(mirror: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    curate(_manifest(mirror), out, settings=get_settings(), jsonl=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    planted = 0
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        target = outside / f"{planted}.txt"
        target.write_text("outside")
        path.unlink()
        path.symlink_to(target)
        planted += 1
    assert planted > 10
    result = curate(_manifest(mirror, budget=Budget(total=30)), out, settings=get_settings(), jsonl=True)
    assert result.report.rows_out > 0
    assert all(p.read_text() == "outside" for p in outside.iterdir())
    assert len(list(outside.iterdir())) == planted
    assert not any(p.is_symlink() for p in (out / "data").iterdir())


def test_a_link_planted_at_an_output_folder_is_refused(mirror: Path, tmp_path: Path) -> None:
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / "data").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(CurationError, match="symbolic link"):
        curate(_manifest(mirror), out, settings=get_settings())
    assert list(elsewhere.iterdir()) == []


def test_another_manifests_killed_run_is_never_reused(mirror: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    out, clean = tmp_path / "out", tmp_path / "clean"
    curate(_manifest(mirror), clean, settings=get_settings())
    curate(_manifest(mirror), out, settings=get_settings())
    real_replace = os.replace

    def kill_after_the_shard(src: Any, dst: Any, **kwargs: Any) -> None:
        real_replace(src, dst, **kwargs)
        if str(dst).endswith(".parquet"):
            raise Killed

    monkeypatch.setattr(os, "replace", kill_after_the_shard)
    with pytest.raises(Killed):
        curate(_other(mirror), out, settings=get_settings())
    monkeypatch.setattr(os, "replace", real_replace)
    again = curate(_manifest(mirror), out, settings=get_settings())
    assert "final" not in again.reused
    assert _ids(out) == _ids(clean)


def _count_replaces(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    real_replace = os.replace

    def counting(src: Any, dst: Any, **kwargs: Any) -> None:
        seen.append(str(dst))
        real_replace(src, dst, **kwargs)

    monkeypatch.setattr(os, "replace", counting)
    return seen


def test_a_kill_at_every_write_boundary_leaves_old_or_new(mirror: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    old, new = _manifest(mirror), _manifest(mirror, budget=Budget(total=25, seed=5))
    reference_old, reference_new = tmp_path / "ref-old", tmp_path / "ref-new"
    curate(old, reference_old, settings=get_settings())
    curate(new, reference_new, settings=get_settings())
    counted = tmp_path / "counted"
    curate(old, counted, settings=get_settings())
    with monkeypatch.context() as patch:
        boundaries = _count_replaces(patch)
        curate(new, counted, settings=get_settings())
    assert len(boundaries) >= 6
    real_replace = os.replace
    for k in range(len(boundaries)):
        out = tmp_path / f"out-{k}"
        curate(old, out, settings=get_settings())
        calls = 0

        def kill_at_k(src: Any, dst: Any, k: int = k, **kwargs: Any) -> None:
            nonlocal calls
            if calls == k:
                raise Killed
            calls += 1
            real_replace(src, dst, **kwargs)

        monkeypatch.setattr(os, "replace", kill_at_k)
        with pytest.raises(Killed):
            curate(new, out, settings=get_settings())
        monkeypatch.setattr(os, "replace", real_replace)
        state = out / "state.json"
        if state.is_file():  # a finished record: it must describe the old outputs, all of them
            assert _ids(out) == _ids(reference_old), f"kill at boundary {k} ({boundaries[k]})"
        for manifest, reference in ((new, reference_new), (old, reference_old)):
            result = curate(manifest, out, settings=get_settings())
            assert _ids(out) == _ids(reference), f"kill at boundary {k} ({boundaries[k]})"
            assert result.report.rows_out == len(_ids(reference))


def test_the_writer_refuses_links_and_cleans_up_after_a_failure(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside.txt"
    root.mkdir()
    outside.write_text("keep")
    (root / "journal.jsonl").symlink_to(outside)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        open_append(root / "journal.jsonl", root=root)
    (root / "sub").symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        write_file(root / "sub" / "x.json", b"{}", root=root)
    with pytest.raises(OSError), staged_file(root / "big.bin", root=root) as handle:
        handle.write(b"partial")
        raise OSError(28, "No space left on device")
    assert sorted(p.name for p in root.iterdir()) == ["journal.jsonl", "sub"]
    assert outside.read_text() == "keep"


def test_a_manifests_own_mirror_cannot_widen_the_mirror_the_user_named(mirror: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret" / "rows.jsonl"
    secret.parent.mkdir()
    secret.write_text(json.dumps({"question": "the private prompt", "answer": "the private answer"}) + "\n")
    source = Source(hub_id="local/x", data_files=[str(secret.relative_to("/"))], category=Category.MATH)
    wide = Manifest(sources=[source], mirror="/")
    with pytest.raises(ManifestError, match="not a mirror folder"):
        curate(wide, tmp_path / "a", settings=get_settings())
    with pytest.raises(ManifestError, match="outside the mirror"):
        curate(wide, tmp_path / "b", settings=get_settings().model_copy(update={"mirror": mirror}))
    # a link inside the mirror that leads out of it is refused as well, links resolved
    (mirror / "local" / "leak").mkdir(parents=True)
    (mirror / "local" / "leak" / "rows.jsonl").symlink_to(secret)
    leak = Manifest(sources=[Source(hub_id="local/leak", data_files=["local/leak/rows.jsonl"],
                                    category=Category.MATH)], mirror=str(mirror))
    report = curate(leak, tmp_path / "c", settings=get_settings()).report
    assert report.rows_out == 0 and "outside the mirror" in str(report.per_source["local/leak"].error)
    assert "private" not in "".join(p.read_text(errors="replace") for p in (tmp_path / "c").rglob("*.json*"))


@pytest.mark.slow
def test_the_datatrove_engine_never_writes_through_a_planted_link(mirror: Path, tmp_path: Path) -> None:
    from curation.engine import curate_on

    out, outside = tmp_path / "out", tmp_path / "precious.txt"
    outside.write_text("keep me")
    (out / "data").mkdir(parents=True)
    (out / "dropped").mkdir()
    for name in ("report.json.tmp", "samples.jsonl.tmp", "samples.jsonl", "decontaminated.jsonl.tmp",
                 "data/shard-00000.parquet.tmp", "data/shard-00000.parquet", "dropped/duplicates.jsonl.tmp"):
        (out / name).symlink_to(outside)
    report = curate_on("datatrove", _manifest(mirror), out, settings=get_settings(), jsonl=True, workers=1).report
    assert outside.read_text() == "keep me"
    assert report.rows_out > 0 and len(_ids(out)) == report.rows_out
    assert not (out / "samples.jsonl").is_symlink() and not (out / "data/shard-00000.parquet").is_symlink()
