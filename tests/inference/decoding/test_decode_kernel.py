"""The split-KV decode kernel equals the explicit-score (matmul) attention, run on CPU by Triton's interpreter.

The kernel runs in one child process with TRITON_INTERPRET=1 set before Triton is imported
(`decode_kernel_cases.py` says why it cannot run in this one); the tests here assert on what it saved.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from inference.decoding.decode_kernel import DecodeKernelUnavailable, load_kernels
from inference.decoding.static_llama import StaticLlama
from inference.errors import InferenceError

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "training"))
from decode_kernel_cases import DTYPES, SHAPES  # noqa: E402
from tiny_models import make_llama  # noqa: E402

KERNELS = "inference.decoding.decode_kernel_triton"
# The child process takes about 10 s on two cores (most of it importing torch and transformers).
interpreted = pytest.mark.slow


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("decode_kernel") / "cases.pt"
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-W", "error", str(HERE / "decode_kernel_cases.py"), str(out)],
                          env=env, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    loaded: dict[str, Any] = torch.load(out)
    return loaded


@interpreted
@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_kernel_equals_matmul_attention(cases: dict[str, Any], shape: tuple[int, ...], dtype: str) -> None:
    """Several slot counts, random positions (0 and max_len - 1 among them), t = 1 and 6, g = 3 and 1."""
    out, expect = cases["equal"][f"{dtype}-{shape}"]
    assert out.shape == expect.shape and out.dtype == DTYPES[dtype]
    tol = 1e-5 if dtype == "fp32" else 2e-2
    torch.testing.assert_close(out.float(), expect.float(), atol=tol, rtol=tol)


@interpreted
def test_keys_past_a_slots_position_change_nothing(cases: dict[str, Any]) -> None:
    """Stale cache entries (a reused slot, a rejected draft) are never read: huge keys and nan values past
    each slot's last position, and in the slot past the queried ones, leave the output bit for bit the same."""
    before, after = cases["stale"]
    assert torch.equal(before, after)


@interpreted
def test_merge_ignores_what_earlier_steps_left_in_the_split_buffers(cases: dict[str, Any]) -> None:
    """A replayed graph reuses its split buffers: the merge reads only the splits this step wrote (buffers
    full of nan beforehand stand for the rest)."""
    out, expect = cases["nan_buffers"]
    torch.testing.assert_close(out, expect, atol=1e-5, rtol=1e-5)


@interpreted
def test_a_verify_token_does_not_see_the_tokens_after_it(cases: dict[str, Any]) -> None:
    """Query j of a verify step sees positions <= positions[s, j]: changing token 3's key and value changes the
    outputs of tokens 3.. and leaves tokens 0..2 alone."""
    before, after = cases["causal"]
    assert torch.equal(before[:, :3], after[:, :3])
    assert not torch.allclose(before[:, 3:], after[:, 3:], atol=1e-2)


@interpreted
@pytest.mark.parametrize("width", [1, 4])
def test_static_llama_step_with_the_kernel_equals_the_matmul_step(cases: dict[str, Any], width: int) -> None:
    """A whole decode (width 1) or verify (width 4) step of a tiny random Llama over slots of unequal lengths:
    logits and aux features of decode_attention="triton" equal those of "matmul"."""
    got = cases[f"llama_{width}"]
    assert got["triton_logits"].shape == (3, width, 60)
    torch.testing.assert_close(got["triton_logits"], got["matmul_logits"], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got["triton_aux"], got["matmul_aux"], atol=1e-4, rtol=1e-4)


def test_compiled_kernel_off_cuda_is_refused_in_one_typed_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.delitem(sys.modules, KERNELS, raising=False)  # decorated afresh, compiled: the env is read then
    with pytest.raises(DecodeKernelUnavailable, match="needs a CUDA device, not 'cpu'") as err:
        StaticLlama(make_llama(60, layers=1), slots=1, max_len=8, decode_attention="triton")
    assert isinstance(err.value, InferenceError) and "\n" not in str(err.value)


def test_a_missing_triton_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "triton", None)  # what an install without triton looks like to import
    with pytest.raises(DecodeKernelUnavailable, match="needs the triton package"):
        load_kernels(torch.device("cpu"))
