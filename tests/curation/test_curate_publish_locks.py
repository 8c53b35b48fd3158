"""One writer per folder, curation's two commands: a second `curate` or `publish` on an output folder that a
running one holds is refused at once in one line naming the holder's pid, and writes nothing there; the
first then finishes as if alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from paused_writer import cleanup, refused_naming, resume, second_writer, start_paused

from core.curated_set import read_curated
from core.folder_lock import LOCK_FILE
from core.settings import get_settings
from core.types import Category
from curation.manifest import Manifest, Source, dump_manifest
from curation.pipeline import curate

MIRROR = Path(__file__).resolve().parents[1] / "data" / "mirror"


def _manifest(path: Path) -> Path:
    manifest = Manifest(sources=[Source(hub_id="openai/gsm8k", config="main", category=Category.MATH, max_rows=40,
                                        license="MIT")], mirror=str(MIRROR))
    path.write_text(dump_manifest(manifest))
    return path


def _tree(folder: Path) -> dict[str, int]:
    return {p.relative_to(folder).as_posix(): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


@pytest.mark.slow
def test_a_second_curate_on_a_busy_folder_is_refused_naming_the_first(tmp_path: Path) -> None:
    manifest, out = _manifest(tmp_path / "manifest.json"), tmp_path / "out"
    first = start_paused(["curate", "-m", str(manifest), "-o", str(out)], out / LOCK_FILE)
    try:
        before = _tree(out)
        second = second_writer(["curate", "-m", str(manifest), "-o", str(out)])
        assert refused_naming(second, first.pid), second.stderr
        assert _tree(out) == before  # the second wrote nothing
        code, _, err = resume(first)
    finally:
        cleanup(first)
    assert code == 0, err
    rows = json.loads((out / "report.json").read_text())["rows_out"]
    assert rows > 30 and len(list(read_curated(out))) == rows


@pytest.mark.slow
def test_a_second_publish_to_a_busy_folder_is_refused_naming_the_first(tmp_path: Path) -> None:
    src, out = tmp_path / "curated", tmp_path / "hub"
    curate(Manifest.model_validate_json(_manifest(tmp_path / "m.json").read_text()), src, settings=get_settings())
    args = ["publish", str(src), "--repo", "me/set", "--out", str(out)]
    first = start_paused(args, tmp_path / ".hub.publish.lock")
    try:
        second = second_writer(args)
        assert refused_naming(second, first.pid), second.stderr
        assert not out.exists() and list(tmp_path.glob(".tmp-*")) == []  # the second built nothing
        code, output, err = resume(first)
    finally:
        cleanup(first)
    assert code == 0 and "rows written as a Hub dataset folder" in output, err
    assert sorted(p.name for p in out.iterdir()) == [".publish.json", "README.md", "data"]
    assert list(tmp_path.glob(".tmp-*")) == []
