"""Publishing never deletes what it did not write: not a folder the user had, not the set it publishes."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
from pathlib import Path

import pytest
from paused_writer import CLI, REPO

from curation.dataset_card import LICENSE_FILE
from curation.publish import PUBLISH_RECORD, PublishError, build_folder
from tests.curation.test_publish import curated_set


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_an_existing_folder_of_the_users_is_refused_and_kept(tmp_path: Path) -> None:
    src = curated_set(tmp_path / "curated")
    existing = tmp_path / "existing"
    (existing / "data").mkdir(parents=True)
    (existing / "data" / "mine.parquet").write_bytes(b"the user's own file")
    before = _tree(existing)
    with pytest.raises(PublishError, match="did not write"):
        build_folder(src, existing, repo_id="me/x", version="0.1.0", accept_license_risk=True)
    assert _tree(existing) == before


def test_publishing_into_the_set_itself_is_refused_and_the_shards_kept(tmp_path: Path) -> None:
    src = curated_set(tmp_path / "curated")
    before = _tree(src)
    for out in (src, src / "hub", tmp_path):
        with pytest.raises(PublishError, match="overlaps"):
            build_folder(src, out, repo_id="me/x", version="0.1.0", accept_license_risk=True)
    assert _tree(src) == before


def test_a_folder_publish_wrote_is_replaced_whole(tmp_path: Path) -> None:
    src = curated_set(tmp_path / "curated")
    out = tmp_path / "hub"
    first = build_folder(src, out, repo_id="me/x", version="0.1.0", accept_license_risk=True)
    assert (out / PUBLISH_RECORD).is_file() and first.shards[0].is_file()
    second = build_folder(src, out, repo_id="me/x", version="0.2.0", accept_license_risk=True)
    assert "0.2.0" in (out / "README.md").read_text()
    # The fixture's sources carry different licences, so the card links the LICENSE.md publish writes.
    assert sorted(_tree(out)) == sorted([PUBLISH_RECORD, "README.md", LICENSE_FILE,
                                         *(p.relative_to(out).as_posix() for p in second.shards)])
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp-")] == []
    (out / "notes.txt").write_text("added by the user")
    with pytest.raises(PublishError, match="did not write"):
        build_folder(src, out, repo_id="me/x", version="0.3.0", accept_license_risk=True)
    assert (out / "notes.txt").read_text() == "added by the user"


def test_a_kill_while_building_leaves_the_old_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow.parquet as pq

    src = curated_set(tmp_path / "curated")
    out = tmp_path / "hub"
    build_folder(src, out, repo_id="me/x", version="0.1.0", accept_license_risk=True)
    before = _tree(out)

    def full_disk(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pq, "write_table", full_disk)
    with pytest.raises(OSError, match="No space"):
        build_folder(src, out, repo_id="me/x", version="0.2.0", accept_license_risk=True)
    assert _tree(out) == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp-")] == []


def test_an_empty_folder_the_user_made_inside_out_is_refused_and_kept(tmp_path: Path) -> None:
    src, out = curated_set(tmp_path / "curated"), tmp_path / "hub"
    build_folder(src, out, repo_id="me/x", version="0.1.0", accept_license_risk=True)
    (out / "notes").mkdir()  # nothing in it, and nothing publish recorded writing
    with pytest.raises(PublishError, match="did not write"):
        build_folder(src, out, repo_id="me/x", version="0.1.0", accept_license_risk=True)
    assert (out / "notes").is_dir()


def test_the_published_folder_has_the_mode_the_umask_gives(tmp_path: Path) -> None:
    src = curated_set(tmp_path / "curated")
    umask = os.umask(0o027)
    try:
        written = build_folder(src, tmp_path / "hub", repo_id="me/x", version="0.1.0", accept_license_risk=True)
        again = build_folder(src, tmp_path / "hub", repo_id="me/x", version="0.1.0", accept_license_risk=True)
    finally:
        os.umask(umask)
    assert stat.S_IMODE(written.folder.stat().st_mode) == 0o750 == stat.S_IMODE(again.folder.stat().st_mode)


@pytest.mark.slow
def test_a_sigkilled_publish_leaves_a_temporary_folder_the_next_publish_removes(tmp_path: Path) -> None:
    src, out = curated_set(tmp_path / "curated"), tmp_path / "hub"
    other = tmp_path / "hub-2"  # another --out beside it, whose folders are not this one's to remove
    build_folder(src, other, repo_id="me/x", version="0.1.0", accept_license_risk=True)
    command = [*CLI, "publish", str(src), "--repo", "me/x", "--out", str(out), "--accept-license-risk"]
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    try:
        while not [p for p in tmp_path.glob(".tmp-hub-*") if (p / "data").is_dir()]:
            assert process.poll() is None, "publish ended before it could be killed mid-build"
        os.killpg(process.pid, signal.SIGKILL)
    finally:
        process.wait()
    left = list(tmp_path.glob(".tmp-hub-*"))
    assert len(left) == 1 and not out.exists()
    foreign = tmp_path / ".tmp-hub-2-0123456789ab-deadbeef"  # shaped like a folder of another --out's publish
    foreign.mkdir()
    build_folder(src, out, repo_id="me/x", version="0.1.0", accept_license_risk=True)
    assert not left[0].exists() and foreign.is_dir()
    assert sorted(p.name for p in out.iterdir()) == [".publish.json", LICENSE_FILE, "README.md", "data"]
