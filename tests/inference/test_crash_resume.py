"""Crash safety: `datahunt regen` killed with SIGKILL at random moments, then resumed, loses and repeats nothing."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from regen_fake_server import FakeServer, write_samples

from inference.records import load_rows

REPO = Path(__file__).resolve().parents[2]


def _regen(tmp_path: Path, url: str, *, capture: bool = False) -> subprocess.Popen:
    command = [
        sys.executable, "-c", "from server.cli import app; app()", "regen",
        "--input", str(tmp_path / "in.jsonl"), "--server", url, "--out", str(tmp_path / "run"),
        "--concurrency", "8", "--max-attempts", "8",
    ]
    pipe = subprocess.PIPE if capture else subprocess.DEVNULL
    return subprocess.Popen(command, cwd=REPO, stdout=pipe, stderr=pipe, start_new_session=True)


def _ids(path: Path, *, complete_only: bool = False) -> list[str]:
    """Ids of the journal's rows. While a writer is live (or just killed) the last line may be torn:
    a reader can see a write half done, and a kill can cut one short; `complete_only` skips it."""
    if not path.exists():
        return []
    text = path.read_text()
    if complete_only:
        text = text[: text.rfind("\n") + 1]
    return [json.loads(line)["id"] for line in text.splitlines()]


@pytest.mark.slow
def test_sigkill_at_random_moments_then_resume_gives_every_row_exactly_once(tmp_path: Path) -> None:
    rows = write_samples(tmp_path / "in.jsonl", 300, turns=2)
    for i in (5, 50, 150):
        rows[i]["messages"][0]["content"] += " POISON"
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    expected = len(rows)
    server = FakeServer(delay_s=0.01, rates={"429": 0.03, "500": 0.03, "drop": 0.02}).start()
    rng = random.Random(7)
    kills = 0
    processes: list[subprocess.Popen] = []
    try:
        done_before = 0
        for _ in range(4):
            process = _regen(tmp_path, server.url)
            processes.append(process)
            # Wait until this attempt has written something new, then kill it a random moment later.
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and process.poll() is None:
                if len(_ids(tmp_path / "run" / "regenerated.jsonl", complete_only=True)) > done_before:
                    break
                time.sleep(0.02)
            time.sleep(rng.uniform(0.0, 0.4))
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                kills += 1
            process.wait(30)
            done_before = len(_ids(tmp_path / "run" / "regenerated.jsonl", complete_only=True))
        final = _regen(tmp_path, server.url, capture=True)
        processes.append(final)
        out, err = final.communicate(timeout=240)
    finally:
        for process in processes:  # a failed assertion above must not leave a live child behind
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)
        server.stop()
    assert final.returncode == 0, err.decode()[-2000:]
    assert kills >= 3
    done = _ids(tmp_path / "run" / "regenerated.jsonl")
    failed = _ids(tmp_path / "run" / "errors.jsonl")
    assert len(done) == len(set(done)) and len(failed) == len(set(failed))
    assert not set(done) & set(failed)
    assert len(done) + len(failed) == expected
    input_rows, _ = load_rows(tmp_path / "in.jsonl")
    assert sorted(failed) == sorted(input_rows[i].id for i in (5, 50, 150))
    assert set(done) | set(failed) == {row.id for row in input_rows}
    assert b"regenerated" in out
