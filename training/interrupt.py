"""A stop asked for by the operating system, turned into a clean stop between training steps.

A scheduler's preemption, `timeout`, `kill` (SIGTERM) or Ctrl-C (SIGINT) during `train()` no longer costs the
steps since the last periodic checkpoint: the step in flight finishes, a checkpoint of exactly that step is
written, and the run stops with `TrainingStopped`; started again, it resumes there (the resume path is the one
periodic checkpoints use, tested to end bit for bit where an uninterrupted run does). A second signal stops at
once: the handler that was installed before takes over (the default kills on SIGTERM; Ctrl-C raises
KeyboardInterrupt). A repeat within `REPEAT_GRACE_S` of the first counts as the same request: `timeout` signals
its whole process group, so a wrapper script that forwards the TERM to its child delivers it twice within
microseconds; taking that as "stop at once" cost a GPU run 175 steps since its last periodic checkpoint.

Handlers can only be installed from the main thread; elsewhere (a server's worker thread) the flag simply never
rises and signals keep their usual effect.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from training.errors import TrainingError

logger = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
REPEAT_GRACE_S = 2.0  # a repeat this soon after the first is the same request, delivered twice


class TrainingStopped(TrainingError, RuntimeError):
    """The run stopped on a signal after a whole step, with a checkpoint of that step; run it again to resume."""

    def __init__(self, step: int, signum: int, checkpoint: Path | None) -> None:
        self.step, self.signum, self.checkpoint = step, signum, checkpoint
        where = f"; checkpoint {checkpoint}" if checkpoint is not None else ""
        super().__init__(f"stopped by {signal.Signals(signum).name} after step {step}{where}; "
                         "run the same command again to resume from it")

    @property
    def exit_code(self) -> int:
        """The shell's convention for a process ended by a signal: 128 + its number."""
        return 128 + self.signum


@dataclass
class StopFlag:
    """Set by the first stop signal: its number (None until then)."""

    signum: int | None = None
    at: float = 0.0  # time.monotonic() of the first signal

    @property
    def raised(self) -> bool:
        return self.signum is not None


@contextmanager
def stop_on_signals(signals: tuple[signal.Signals, ...] = STOP_SIGNALS,
                    grace_s: float = REPEAT_GRACE_S) -> Iterator[StopFlag]:
    """While inside, the first of `signals` sets the flag (and is logged); a second one, once `grace_s` have
    passed, acts as before."""
    flag = StopFlag()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return
    previous: dict[int, Any] = {s: signal.getsignal(s) for s in signals}

    def handle(signum: int, frame: FrameType | None) -> None:
        if flag.raised and time.monotonic() - flag.at < grace_s:
            logger.info("%s again within %.0f s: the same stop request", signal.Signals(signum).name, grace_s)
            return
        if flag.raised:  # asked twice: stop now, as the process would have without us
            signal.signal(signum, previous[signum])
            signal.raise_signal(signum)
            return
        flag.signum, flag.at = signum, time.monotonic()
        logger.warning("%s: stopping after this step with a checkpoint (send it again after %.0f s to stop at once)",
                       signal.Signals(signum).name, grace_s)

    def after_stop(signum: int, frame: FrameType | None) -> None:
        if time.monotonic() - flag.at < grace_s:
            logger.info("%s again within %.0f s, after the stop: the same stop request", signal.Signals(signum).name,
                        grace_s)
            return
        for number, handler in previous.items():
            signal.signal(number, handler)
        signal.raise_signal(signum)

    for s in signals:
        signal.signal(s, handle)
    try:
        yield flag
    finally:
        # A stop that was asked for keeps its grace past this block: a tiny step and its checkpoint can end the run
        # before a forwarding wrapper's copy of the signal lands, and that copy must not kill the process while
        # it reports where to resume. The first signal after the grace restores the handler from before and acts.
        keep = flag.raised and time.monotonic() - flag.at < grace_s
        for number, handler in previous.items():
            signal.signal(number, after_stop if keep else handler)
