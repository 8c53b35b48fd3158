"""A stop signal during training: the step in flight finishes, is checkpointed, and the run resumes from it."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from training.config import make_config
from training.interrupt import TrainingStopped, stop_on_signals
from training.progress import Progress
from training.trainer import train


def _base(data: Path, target: Path) -> dict[str, Any]:
    return {"data": str(data), "target": str(target), "draft_vocab_size": 150, "ttt_steps": 2, "batch_size": 4,
            "device": "cpu", "max_steps": 6, "lr": 3e-3, "save_every": 100, "log_every": 1}


def test_a_first_signal_sets_the_flag_a_second_acts_as_before_and_handlers_come_back() -> None:
    # Python's own Ctrl-C, whatever ran before
    runner_handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with stop_on_signals(grace_s=0.0) as stop:
            assert not stop.raised
            signal.raise_signal(signal.SIGINT)
            assert stop.signum == signal.SIGINT  # no KeyboardInterrupt: the run may finish its step
            with pytest.raises(KeyboardInterrupt):  # asked twice: the handler from before acts
                signal.raise_signal(signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGINT, runner_handler)


def test_a_repeat_within_the_grace_is_the_same_request_and_a_later_one_stops_at_once() -> None:
    """`timeout` signals its process group, and a wrapper that forwards the TERM delivers it a second time at
    once: that is one request (the run still finishes its step); a repeat after the grace stops at once."""
    runner_handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with stop_on_signals(grace_s=0.5) as stop:
            signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGINT)  # the forwarded copy: no KeyboardInterrupt
            assert stop.signum == signal.SIGINT
            time.sleep(0.6)
            with pytest.raises(KeyboardInterrupt):
                signal.raise_signal(signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, runner_handler)



def test_a_repeat_within_the_grace_after_the_block_has_ended_is_still_the_same_request() -> None:
    """On a loaded machine a tiny step and its checkpoint can end the run before the wrapper's forwarded copy of
    the TERM lands: that copy must not kill the process while it reports where to resume (a CPU test run lost
    the `stopped by SIGTERM` message this way). After the grace, the handler from before acts again."""
    runner_handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    term_handler = signal.getsignal(signal.SIGTERM)
    try:
        with stop_on_signals(grace_s=0.5) as stop:
            signal.raise_signal(signal.SIGINT)
        assert stop.signum == signal.SIGINT
        signal.raise_signal(signal.SIGINT)  # the late forwarded copy: no KeyboardInterrupt
        time.sleep(0.6)
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert signal.getsignal(signal.SIGTERM) == term_handler  # acting restored every signal's handler
        with stop_on_signals(grace_s=0.5):
            pass
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # no stop asked: restored at once
    finally:
        signal.signal(signal.SIGINT, runner_handler)
        signal.signal(signal.SIGTERM, term_handler)

def test_off_the_main_thread_nothing_is_installed() -> None:
    seen: list[Any] = []

    def work() -> None:
        with stop_on_signals() as stop:
            seen.append((stop.raised, signal.getsignal(signal.SIGTERM)))

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert seen == [(False, signal.SIG_DFL)]


def test_sigterm_mid_run_checkpoints_that_step_and_the_rerun_ends_where_an_uninterrupted_one_does(
        tmp_path: Path, llama_dir: Path, regenerated_data: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM arrives during step 2 (sent from its progress log): the run stops after step 2 with a checkpoint
    of step 2 (no periodic one was due), exports nothing, and the same run started again ends bit for bit where
    a run that was never stopped does."""
    base = _base(regenerated_data["train"], llama_dir)
    whole = train(make_config({**base, "out": str(tmp_path / "whole")}))
    assert whole.steps == 6

    log = Progress.log

    def log_and_signal(self: Progress, step: int, *args: Any) -> None:
        log(self, step, *args)
        if step == 2:
            signal.raise_signal(signal.SIGTERM)

    cut = tmp_path / "cut"
    monkeypatch.setattr(Progress, "log", log_and_signal)
    with pytest.raises(TrainingStopped) as stopped:
        train(make_config({**base, "out": str(cut)}))
    monkeypatch.undo()
    assert stopped.value.step == 2 and stopped.value.exit_code == 128 + signal.SIGTERM
    assert stopped.value.checkpoint == cut / "checkpoints" / "step_0000002"
    assert [p.name for p in (cut / "checkpoints").iterdir()] == ["step_0000002"]
    assert not (cut / "export").exists()  # a stopped run exports nothing: it is not finished
    signal.raise_signal(signal.SIGTERM)  # a forwarded copy landing after the stop, within its grace: ignored

    again = train(make_config({**base, "out": str(cut)}))
    assert again.steps == 6
    # The resumed run reports the whole run, both calls: its tokens, and a log with every step once.
    assert again.tokens == whole.tokens and again.wall_s > 0
    log = [json.loads(line) for line in (cut / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [1, 2, 3, 4, 5, 6]
    assert [r["tokens"] for r in log] == [json.loads(line)["tokens"] for line in
                                          (tmp_path / "whole" / "train_log.jsonl").read_text().splitlines()]
    assert all(x["elapsed_s"] <= y["elapsed_s"] for x, y in itertools.pairwise(log))
    a = torch.load(tmp_path / "whole/checkpoints/step_0000006/state.pt", weights_only=True)
    b = torch.load(cut / "checkpoints/step_0000006/state.pt", weights_only=True)
    assert b["scheduler"]["last_epoch"] == 6
    for name in ("fc.weight", "lm_head.weight", "midlayer.self_attn.q_proj.weight"):
        torch.testing.assert_close(a["draft"][name], b["draft"][name], rtol=0, atol=0)
    assert a["optimizer"]["state"][0]["step"] == b["optimizer"]["state"][0]["step"]
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the stop's grace guard, long past its grace


def test_the_train_command_stopped_by_sigterm_exits_143_and_says_how_to_resume(
        tmp_path: Path, llama_dir: Path, regenerated_data: dict[str, Path]) -> None:
    """The user's path: `datahunt train` as its own process, SIGTERM once it is training (its first progress
    line), exit status 128 + 15 with one line naming the step and the checkpoint; the same command resumes."""
    datahunt = Path(sys.executable).parent / "datahunt"
    command = [str(datahunt), "train", "--data", str(regenerated_data["train"]), "--target", str(llama_dir),
               "--out", str(tmp_path), "--steps", "5000", "--batch-size", "4", "--ttt-steps", "2",
               "--draft-vocab-size", "150", "--device", "cpu", "--log-every", "1"]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert process.stderr is not None
    lines: list[str] = []
    deadline = time.monotonic() + 120
    for line in process.stderr:  # progress lines go to stderr
        lines.append(line)
        if re.search(r"step \d+/5000", line) or time.monotonic() > deadline:
            break
    process.send_signal(signal.SIGTERM)
    _, rest = process.communicate(timeout=120)
    assert process.returncode == 143, "".join(lines)[-2000:] + rest[-2000:]
    message = [line for line in rest.splitlines() if line.startswith("error: stopped by SIGTERM after step")]
    assert len(message) == 1, rest[-2000:]
    step = int(message[0].split("after step ")[1].split(";")[0])
    assert 1 <= step < 5000 and "run the same command again to resume" in message[0]
    state = torch.load(tmp_path / "checkpoints" / f"step_{step:07d}" / "state.pt", weights_only=True)
    assert state["step"] == step
    log = [json.loads(line) for line in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    assert max(entry["step"] for entry in log) == step  # nothing past the checkpoint was trained

    resumed = subprocess.run([*command[:8], "--steps", str(step + 2), *command[10:], "--json"], capture_output=True,
                             text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"step_{step:07d}" in resumed.stderr.split("resumed from", 1)[1].splitlines()[0]
    assert json.loads(resumed.stdout.splitlines()[-1])["steps"] == step + 2


def test_a_process_group_term_through_a_forwarding_wrapper_still_checkpoints_the_step(
        tmp_path: Path, llama_dir: Path, regenerated_data: dict[str, Path]) -> None:
    """What `timeout 500 wrapper.sh` does at its limit: TERM to the wrapper and to its whole process group, and
    the wrapper forwards its copy to the trainer, so the trainer gets two TERMs at once. It must still finish
    the step with a checkpoint (before the grace it died at once, losing the steps since the last periodic
    checkpoint)."""
    datahunt = Path(sys.executable).parent / "datahunt"
    train_cmd = (f"'{datahunt}' train --data '{regenerated_data['train']}' --target '{llama_dir}' --out '{tmp_path}'"
                 " --steps 5000 --batch-size 4 --ttt-steps 2 --draft-vocab-size 150 --device cpu --log-every 1")
    wrapper = tmp_path / "wrapper.sh"  # the pattern of benchmarks/gpu_scaling.sh: wait on the child, forward TERM
    wrapper.write_text(f"{train_cmd} &\nchild=$!\ntrap 'kill -TERM \"$child\" 2>/dev/null; wait \"$child\"' TERM INT\n"
                       'wait "$child"\n')
    process = subprocess.Popen(["bash", str(wrapper)], stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                               start_new_session=True)
    assert process.stderr is not None
    deadline = time.monotonic() + 120
    for line in process.stderr:
        if re.search(r"step \d+/5000", line) or time.monotonic() > deadline:
            break
    os.killpg(process.pid, signal.SIGTERM)  # timeout's way: the whole group, the wrapper's forward follows
    _, rest = process.communicate(timeout=120)
    message = [line for line in rest.splitlines() if line.startswith("error: stopped by SIGTERM after step")]
    assert len(message) == 1, rest[-2000:]
    step = int(message[0].split("after step ")[1].split(";")[0])
    assert (tmp_path / "checkpoints" / f"step_{step:07d}" / "state.pt").is_file()
