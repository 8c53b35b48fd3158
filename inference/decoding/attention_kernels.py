"""Which fused attention kernels datahunt's own forwards may use on a GPU: every one torch has but cuDNN's.

Measured on an H200 (torch 2.11, cuDNN 9.19; `benchmarks/gpu_attention_probe.py`, results in
benchmarks/results/gpu_attention_probe.json): torch picks cuDNN's fused attention there, and cuDNN builds a plan
the first time it meets a shape: 67 ms for a causal prefill, 510 ms for the draft's masked forward and backward,
where the flash and memory-efficient kernels pay nothing on a first call and run as fast afterwards. A
regeneration meets a new prefill shape with almost every batch, a timed decode with every prompt, and a
length-packed training epoch hundreds of batch shapes (the 16K curve run's first epoch ran at a fifth of the
later epochs' rate until cuDNN was left out).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from torch.nn.attention import SDPBackend, sdpa_kernel

WITHOUT_CUDNN = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def without_cudnn() -> AbstractContextManager[Any]:
    """A fresh context (each is entered once) in which attention uses any fused kernel but cuDNN's."""
    return sdpa_kernel(WITHOUT_CUDNN)
