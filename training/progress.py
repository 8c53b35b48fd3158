"""Training progress: tokens counted on the device, one line per log step to the log and to a JSONL file.

Counting real tokens adds a device-side sum per step; only `log` reads the GPU (loss, per-step accuracy,
the token count), so a run with `log_every = 50` synchronises once every 50 steps. Each record carries step,
loss, per-TTT-step accuracy, learning rate, tokens so far and tokens/s since the previous record; `plot`
draws the loss curve (PNG) at the end of a run. A resumed run continues the run's log and counts: the records
up to the resumed step stay (later ones, whose steps are trained again, go), and tokens and loop seconds start
from the checkpoint's, so the run's totals and tokens/s cover all of its calls, not only the last.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, TypedDict, cast

import torch
from torch import Tensor

from training.atomic_files import open_append, write_file

logger = logging.getLogger("training.trainer")


class StepRecord(TypedDict):
    """One line of train_log.jsonl: a log step's loss, per-TTT-step accuracy, lr, and the tokens so far."""

    step: int
    total_steps: int
    loss: float
    step_accuracies: list[float]
    lr: float
    tokens: int
    tokens_per_s: float  # since the previous record
    elapsed_s: float  # loop seconds so far in the run, earlier calls included


class EstimateRecord(TypedDict):
    """A line of train_log.jsonl from checkpoint selection (`training.selection`): the acceptance estimated on the
    held-out rows at a step, and whether it was the best so far."""

    step: int
    estimated_accept_length: float
    best: bool


class RunProgress(TypedDict, total=False):
    """What a checkpoint keeps of the progress, for a resumed run to count on from (empty before they were kept)."""

    tokens: int
    elapsed_s: float


class Progress:
    """Counts tokens per step and writes a record on each log step (rank 0 only writes)."""

    def __init__(self, path: Path, total_steps: int, *, enabled: bool = True, start_step: int = 0,
                 tokens: int = 0, elapsed_s: float = 0.0) -> None:
        self.path, self.total_steps, self.enabled = path, total_steps, enabled
        self.records: list[StepRecord] = []
        self.estimates: list[EstimateRecord] = []
        self._tokens: Tensor | None = None
        self._tokens_before, self._elapsed_before = int(tokens), float(elapsed_s)
        self._started = time.perf_counter()
        self._last = (self._started, self._tokens_before)
        if enabled:
            path.parent.mkdir(parents=True, exist_ok=True)
            earlier = self._earlier(start_step) if start_step else []
            self.records = [cast(StepRecord, r) for r in earlier if "loss" in r]
            self.estimates = [cast(EstimateRecord, r) for r in earlier if "estimated_accept_length" in r]
            write_file(path, "".join(json.dumps(r) + "\n" for r in earlier).encode("utf-8"))

    def _earlier(self, start_step: int) -> list[dict[str, Any]]:
        """The log's records up to start_step (an unreadable line ends what is kept: a crash mid-write)."""
        kept: list[dict[str, Any]] = []
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            return kept
        for line in lines:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                break
            if isinstance(record, dict) and isinstance(record.get("step"), int) and record["step"] <= start_step:
                kept.append(record)  # a record this log wrote
        return kept

    def count(self, attention_mask: Tensor) -> None:
        """Add this batch's real tokens (stays on the device)."""
        n = attention_mask.sum()
        self._tokens = n if self._tokens is None else self._tokens + n

    @property
    def tokens(self) -> int:
        """Real tokens trained on so far in the run, earlier calls included (synchronises)."""
        return self._tokens_before + (int(self._tokens) if self._tokens is not None else 0)

    def elapsed(self) -> float:
        """Seconds of the loop so far in the run: this call's since its loop started, plus earlier calls'."""
        return self._elapsed_before + time.perf_counter() - self._started

    def log(self, step: int, result: Any, lr: float) -> None:
        """Read the step's loss and accuracies, write a record and a progress line."""
        if not self.enabled:
            return
        now, tokens = time.perf_counter(), self.tokens
        rate = (tokens - self._last[1]) / max(now - self._last[0], 1e-9)
        self._last = (now, tokens)
        record: StepRecord = {
            "step": step, "total_steps": self.total_steps, "loss": round(float(result.total.detach()), 5),
            "step_accuracies": [round(a, 4) for a in result.step_accuracies], "lr": lr, "tokens": tokens,
            "tokens_per_s": round(rate, 1), "elapsed_s": round(self._elapsed_before + now - self._started, 2)}
        self.records.append(record)
        with open_append(self.path) as fh:  # a link planted at the log's name is refused, never followed
            fh.write((json.dumps(record) + "\n").encode("utf-8"))
        logger.info("step %d/%d loss %.4f acc %s lr %.2e %.0f tok/s", step, self.total_steps, record["loss"],
                    [round(a, 3) for a in result.step_accuracies], lr, rate)

    def log_estimate(self, step: int, accept_length: float, *, best: bool) -> None:
        """Write a selection estimate as a record of the log (it joins the plot's second axis)."""
        if not self.enabled:
            return
        record: EstimateRecord = {"step": step, "estimated_accept_length": accept_length, "best": best}
        self.estimates.append(record)
        with open_append(self.path) as fh:
            fh.write((json.dumps(record) + "\n").encode("utf-8"))

    def plot(self, path: Path) -> Path | None:
        """The loss curve of this run as a PNG, with the estimated acceptance (selection on) on a second axis
        and the kept step marked (None when nothing was logged)."""
        if not self.enabled or not self.records:
            return None
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(5.6, 3.4))
        ax.plot([r["step"] for r in self.records], [r["loss"] for r in self.records], "-", lw=1.2)
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("weighted TTT loss")
        ax.grid(alpha=0.3)
        if self.estimates:
            right = ax.twinx()
            right.plot([r["step"] for r in self.estimates], [r["estimated_accept_length"] for r in self.estimates],
                       "o-", color="tab:green", lw=1.2, ms=3)
            best = max(self.estimates, key=lambda r: (r["estimated_accept_length"], -r["step"]))
            right.plot([best["step"]], [best["estimated_accept_length"]], "*", color="tab:red", ms=11)
            right.set_ylabel("estimated acceptance (held out)", color="tab:green")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return path


def peak_memory_gib() -> float | None:
    """Peak GPU memory allocated in this process, GiB (None without CUDA)."""
    return round(torch.cuda.max_memory_allocated() / 2**30, 2) if torch.cuda.is_available() else None
