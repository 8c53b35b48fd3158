"""Fixtures of the decoding tests: one thread for torch, and the tiny hand-written models of tests/training."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "training"))  # tiny_models, shared with training's tests


@pytest.fixture(scope="session", autouse=True)
def one_thread() -> None:
    """Tiny models on a shared 2-core machine run faster on one thread than fighting over two."""
    torch.set_num_threads(1)
