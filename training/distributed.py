"""One process, or one rank of a `torchrun` job: joining the process group (NCCL on GPUs, gloo on CPUs), and
running a cache-writing step on rank 0 before the others read what it wrote. Training and capture both start
here."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


def join_ranks(use_cuda: bool) -> tuple[int, int, torch.device]:
    """(rank, world, device): under torchrun, join the process group first; on CUDA, this rank's GPU."""
    if dist.is_torchelastic_launched() and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    if use_cuda:
        torch.cuda.set_device(rank % torch.cuda.device_count())
        return rank, world, torch.device("cuda", rank % torch.cuda.device_count())
    return rank, world, torch.device("cpu")


def rank0_first(rank: int, world: int, build: Any) -> Any:
    """Run build() on rank 0 first (it writes a cache), then on the other ranks (they read it)."""
    result = build() if rank == 0 else None
    if world > 1 and dist.get_backend() == "nccl":
        dist.barrier(device_ids=[torch.cuda.current_device()])  # names the GPU, so NCCL need not guess it
    elif world > 1:
        dist.barrier()
    return result if rank == 0 else build()


def release_large_frees(threshold: int = 1 << 20) -> None:
    """On glibc, serve every allocation above `threshold` by its own mapping, returned to the system when freed.

    glibc raises its mmap threshold after the first large free, so later all-gather buffers of FSDP on CPU come
    from the heap and, freed, stay in the process: a sharded rank's private memory grew by ~8 MB per layer and
    ended above one whole unsharded process's. A fixed threshold keeps it at the shard plus one layer's
    buffers (measured by `benchmarks/capture_memory.py`). Elsewhere (no glibc) this does nothing."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if not name:
        return
    try:
        ctypes.CDLL(name).mallopt(-3, threshold)  # M_MMAP_THRESHOLD; also turns off the dynamic threshold
    except (OSError, AttributeError):
        return
