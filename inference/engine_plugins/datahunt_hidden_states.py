"""A hidden-states connector for vLLM on a CPU-only torch, loaded by vLLM itself (not by datahunt).

vLLM's `extract_hidden_states` speculative method keeps each request's chosen layer states in a cache-only KV
layer, and its `ExampleHiddenStatesConnector` writes them to `<storage>/<request id>.safetensors` when the
request finishes (`hidden_states` [tokens, layers, hidden] and `token_ids`). The stock connector's write path
copies on a CUDA stream into pinned memory and waits on CUDA events, which raise where torch has no CUDA. This
subclass gathers the states from the cache synchronously on the CPU and writes the file before it reports the
request done; everything else (the file name, the `.lock` file a reader waits on, the path returned in the
response's `kv_transfer_params`) is the stock connector's. On a GPU use the stock connector.

Launch (what `datahunt vllm-command --extract` prints): `PYTHONPATH=<this folder>` and
`"kv_connector": "DatahuntCpuHiddenStatesConnector", "kv_connector_module_path": "datahunt_hidden_states"`.
"""

from __future__ import annotations

import fcntl
import os
from typing import Any

import torch
from safetensors.torch import save_file
from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
    ExampleHiddenStatesConnector,
    extract_from_kv_cache,
)


class _Written:
    """Stands where the stock connector keeps a CUDA event: the copy (and the write) is already done."""

    def query(self) -> bool:
        return True


class DatahuntCpuHiddenStatesConnector(ExampleHiddenStatesConnector):  # type: ignore[misc]  # vLLM is untyped here
    """`ExampleHiddenStatesConnector` whose write gathers and saves synchronously (no CUDA stream, event or
    pinned memory)."""

    def _submit_async_write(self, pending: Any) -> None:
        if not self._is_tp_rank_zero:
            return
        assert self._kv_cache is not None
        blocks = torch.tensor(pending.block_ids, dtype=torch.long)
        offsets = torch.arange(self._block_size, dtype=torch.long)
        slots = (offsets.reshape(1, -1) + blocks.reshape(-1, 1) * self._block_size).flatten()
        states = extract_from_kv_cache(self._kv_cache, slots, pending.token_ids.shape[0]).clone()
        os.makedirs(os.path.dirname(pending.filename), exist_ok=True)
        lock_fd = self._lock_fds.pop(pending.req_id, None)
        if lock_fd is None and self.use_lock:
            lock_fd = os.open(pending.filename + ".lock", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
        try:
            partial = pending.filename + ".partial"
            save_file({"hidden_states": states.contiguous(), "token_ids": pending.token_ids.clone()}, partial)
            os.replace(partial, pending.filename)  # a reader never sees a half-written file
        finally:
            if lock_fd is not None:
                os.close(lock_fd)
        self._req_copy_events[pending.req_id] = _Written()
