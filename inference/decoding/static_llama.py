"""A Llama-family target with a static KV cache, for fast local decoding: one forward for prefill, decode, verify.

Built from a loaded `transformers` Llama model (its weights are shared, not copied: q/k/v and gate/up are fused
once into two matrices per layer). The cache is preallocated: `slots` rows of `max_len` positions per layer,
laid out [slots, kv_heads, max_len, head_dim] (what attention reads, contiguous), so a decode step over every
slot writes its new key/value in place through a permuted view and attention reads the cache as it lies
(no gather, no concatenation, no copy, no reallocation). That fixed shape is
what lets one decode step be captured once as a CUDA graph and replayed (`DecodeGraph`), removing the ~400
kernel launches a step of a 30-layer model costs in eager mode.

Attention reads the cache with grouped queries: the g = heads / kv_heads query heads that share one kv head are
laid out as g*T query rows of that kv head, so PyTorch's fused attention reads each cached key/value once
(instead of a repeated copy per query head). Visibility is by position: a query at position p sees cached
positions 0..p of its own slot; stale entries beyond a slot's length are never visible, so a slot is reused
or a rejected draft is rolled back without clearing anything. Attention over every position, live or not, is
what keeps a 1,024-slot decode step at 16 ms against a 4.6 ms floor for reading the whole cache once. A
FlexAttention variant that read only each slot's live blocks was tried and removed: on an H200 its compiled,
graph-replayed step took 24.5 ms against 16.0 ms, and its logits differed from the default's by up to 24
(equal on CPU; benchmarks/results/gpu_profile_smollm2.json). `decode_attention="triton"` reads only each slot's
live positions through a split-KV kernel with a fixed grid (`inference.decoding.decode_kernel`; its speed is
unmeasured).

`aux_ids` (input-of-layer ids, SGLang's convention) asks a forward to also return the residual stream entering
those layers, concatenated in the order given (a repeated id repeats its state, as transformers' hidden_states
indexing does): the EAGLE-3 draft's features.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor

from inference.decoding.attention_kernels import without_cudnn
from inference.decoding.decode_kernel import load_kernels, split_kv_attention
from inference.errors import InferenceError

SUPPORTED = {"llama"}
# How decode and verify steps attend to the cache: PyTorch's fused attention over every position under a mask,
# explicit-score matmuls, or the split-KV Triton kernel over each slot's live positions only (CUDA).
DECODE_ATTENTION = {"sdpa", "matmul", "triton"}


class UnsupportedTarget(InferenceError, ValueError):
    """The model is not one this runner implements (the caller falls back to plain `generate`)."""


@dataclass
class _Layer:
    in_norm: Tensor
    qkv: Tensor
    qkv_bias: Tensor | None
    o: Tensor
    post_norm: Tensor
    gate_up: Tensor
    down: Tensor


@dataclass
class _Shared:
    """What a forward's layers share: rotary tables, cache write indices, the query positions and (decode and
    verify steps of the sdpa and matmul paths) the visibility mask."""

    cos: Tensor
    sin: Tensor
    where: tuple[Tensor, Tensor]
    positions: Tensor
    prefill: bool
    mask: Tensor | None
    span: int | None = None  # CPU decode: the cached positions any row can see (the rest is never read)


class StaticLlama:
    """The target's forward over a static cache of `slots` x `max_len` positions."""

    def __init__(self, model: Any, *, slots: int, max_len: int, decode_attention: str = "sdpa") -> None:
        cfg = model.config
        if getattr(cfg, "model_type", None) not in SUPPORTED:
            raise UnsupportedTarget(f"static-cache decoding supports {sorted(SUPPORTED)}, not {cfg.model_type!r}")
        if getattr(cfg, "mlp_bias", False) or getattr(cfg, "hidden_act", "silu") != "silu":
            raise UnsupportedTarget("static-cache decoding needs a bias-free SwiGLU (silu) MLP")
        inner = model.model
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads
        self.eps = float(cfg.rms_norm_eps)
        self.embed = inner.embed_tokens.weight
        self.norm = inner.norm.weight
        self.lm_head = model.lm_head.weight
        self.inv_freq = inner.rotary_emb.inv_freq.float()
        self.rope_scale = float(getattr(inner.rotary_emb, "attention_scaling", 1.0))
        self.layers = [self._fuse(layer) for layer in inner.layers]
        if decode_attention not in DECODE_ATTENTION:
            raise ValueError(f"decode_attention must be one of {sorted(DECODE_ATTENTION)}, not {decode_attention!r}")
        self.slots, self.max_len, self.decode_attention = slots, max_len, decode_attention
        device, dtype = self.embed.device, self.embed.dtype
        if decode_attention == "triton":  # fail here, in one line, rather than at the first decode step
            load_kernels(device)
        shape = (slots, self.kv_heads, max_len, self.head_dim)
        self.k_cache = [torch.zeros(shape, device=device, dtype=dtype) for _ in self.layers]
        self.v_cache = [torch.zeros(shape, device=device, dtype=dtype) for _ in self.layers]
        self.key_positions = torch.arange(max_len, device=device)

    @staticmethod
    def _fuse(layer: Any) -> _Layer:
        att, mlp = layer.self_attn, layer.mlp
        biases = [p.bias for p in (att.q_proj, att.k_proj, att.v_proj)]
        return _Layer(
            in_norm=layer.input_layernorm.weight,
            qkv=torch.cat([att.q_proj.weight, att.k_proj.weight, att.v_proj.weight]).detach(),
            qkv_bias=torch.cat(biases).detach() if all(b is not None for b in biases) else None,
            o=att.o_proj.weight, post_norm=layer.post_attention_layernorm.weight,
            gate_up=torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]).detach(), down=mlp.down_proj.weight)

    @property
    def num_layers(self) -> int:
        """How many decoder layers the target has."""
        return len(self.layers)

    def _rms(self, x: Tensor, weight: Tensor) -> Tensor:
        """Llama's norm: in fp32 (one fused kernel where torch has one), cast back, then scaled."""
        return weight * F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps).to(x.dtype)

    def _rotary(self, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """cos, sin [S, T, 1, d] at positions [S, T] (half-split layout, as transformers' Llama): computed once
        per forward and shared by every layer's queries and keys (a decode step is bound by its kernel count)."""
        angles = positions.float()[..., None] * self.inv_freq  # [S, T, d/2]
        cos = (torch.cat([angles.cos(), angles.cos()], -1) * self.rope_scale).to(dtype)[:, :, None]
        sin = (torch.cat([angles.sin(), angles.sin()], -1) * self.rope_scale).to(dtype)[:, :, None]
        return cos, sin

    @staticmethod
    def _rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        """x [S, T, heads, d] rotated by the tables of `_rotary`."""
        half = x.shape[-1] // 2
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin

    @torch.no_grad()
    def forward(self, tokens: Tensor, positions: Tensor, *, slots: Tensor | None = None, prefill: bool = False,
                aux_ids: tuple[int, ...] = (), last_only: bool = False) -> tuple[Tensor, Tensor | None]:
        """Logits [S, T, V] (or [S, V] with last_only) and the aux features [S, T, 3H] (None without aux_ids).

        tokens/positions [S, T]. Without `slots`, row s is cache slot s and every slot takes part (decode and
        verify steps). With `prefill`, rows are fresh prompts written into cache rows `slots` from position 0 and
        attend only among themselves (right padding is harmless: padded positions come after every real one).
        """
        with without_cudnn():  # no per-shape plan building: a prefill meets new shapes all the time
            return self._forward(tokens, positions, slots, prefill, aux_ids, last_only)

    def _forward(self, tokens: Tensor, positions: Tensor, slots: Tensor | None, prefill: bool,
                 aux_ids: tuple[int, ...], last_only: bool) -> tuple[Tensor, Tensor | None]:
        x = F.embedding(tokens, self.embed)
        aux: dict[int, Tensor] = {}
        rows = slots if slots is not None else torch.arange(tokens.shape[0], device=tokens.device)
        # What every layer shares, built once: rotary tables, cache write indices, the visibility mask.
        s, t = tokens.shape
        cos, sin = self._rotary(positions, x.dtype)
        where = (rows[:, None].expand(s, t), positions)
        mask, span = None, None
        # query row (head group, token) of slot s sees cached positions <= its own
        if not prefill and self.decode_attention != "triton":
            # On CPU (no graph to keep shapes fixed for) read only up to the furthest position in use: a short
            # run in a 2,144-position cache otherwise attends over ~2,000 masked positions per step (SmolLM2, 6
            # slots, two cores: 103 ms a step against 64 ms at 256 positions). One host read; GPUs keep the shape.
            span = int(positions.max()) + 1 if tokens.device.type == "cpu" else None
            g = self.heads // self.kv_heads
            query_pos = positions[:, None, :].expand(s, g, t).reshape(s, 1, g * t, 1)
            mask = self.key_positions[:span].view(1, 1, 1, -1) <= query_pos
        shared = _Shared(cos=cos, sin=sin, where=where, positions=positions, prefill=prefill, mask=mask, span=span)
        for i, layer in enumerate(self.layers):
            if i in aux_ids:
                aux[i] = x
            x = x + self._attention(i, layer, self._rms(x, layer.in_norm), shared)
            h = self._rms(x, layer.post_norm) @ layer.gate_up.T
            gate, up = h.chunk(2, dim=-1)
            x = x + (F.silu(gate) * up) @ layer.down.T
        if last_only:
            x = x[:, -1]
        logits = self._rms(x, self.norm) @ self.lm_head.T
        return logits, (torch.cat([aux[i] for i in aux_ids], -1) if aux_ids else None)

    @torch.no_grad()
    def states(self, tokens: Tensor, aux_ids: tuple[int, ...]) -> tuple[Tensor, Tensor]:
        """Logits [B, T, V] and aux features [B, T, 3H] of right-padded sequences, no cache touched.

        What training needs from the target: causal attention means the padding after each row's end changes
        nothing before it. Build with `slots=0` for this use alone.
        """
        positions = torch.arange(tokens.shape[1], device=tokens.device).expand(tokens.shape[0], -1)
        logits, aux = self.forward(tokens, positions, prefill=True, aux_ids=aux_ids)
        assert aux is not None
        return logits, aux

    def _attention(self, i: int, layer: _Layer, x: Tensor, shared: _Shared) -> Tensor:
        s, t, _ = x.shape
        hd, kvh, g = self.head_dim, self.kv_heads, self.heads // self.kv_heads
        qkv = x @ layer.qkv.T
        if layer.qkv_bias is not None:
            qkv = qkv + layer.qkv_bias
        # Queries and keys are rotated together (one pass over heads + kv_heads), values left as they are.
        qk = self._rope(qkv[..., : (self.heads + kvh) * hd].view(s, t, self.heads + kvh, hd), shared.cos, shared.sin)
        q, k = qk[:, :, : self.heads], qk[:, :, self.heads :]
        v = qkv[..., (self.heads + kvh) * hd :].view(s, t, kvh, hd)
        if self.slots:  # a cacheless runner (slots=0) only scores whole sequences: `states`
            self.k_cache[i].permute(0, 2, 1, 3).index_put_(shared.where, k)  # writes through to [slots, kvh, L, d]
            self.v_cache[i].permute(0, 2, 1, 3).index_put_(shared.where, v)
        if shared.prefill:  # prefill: fresh prompts attend among themselves, plain causal (the flash kernel)
            heads = (q.transpose(1, 2), k.repeat_interleave(g, dim=2).transpose(1, 2),
                     v.repeat_interleave(g, dim=2).transpose(1, 2))
            out = F.scaled_dot_product_attention(*heads, is_causal=True)
            return out.transpose(1, 2).reshape(s, t, self.heads * hd) @ layer.o.T
        keys, values = self.k_cache[i][:s, :, : shared.span], self.v_cache[i][:s, :, : shared.span]
        if self.decode_attention == "triton":  # each slot's live positions only; queries read as they lie
            out = split_kv_attention(q, keys, values, shared.positions)
            return out.reshape(s, t, self.heads * hd) @ layer.o.T
        # Grouped queries: [S, kvh, g*T, d] against the cached keys [S, kvh, L, d], visible up to each position.
        qg = q.reshape(s, t, kvh, g, hd).permute(0, 2, 3, 1, 4).reshape(s, kvh, g * t, hd)
        if self.decode_attention == "matmul":  # explicit scores: the cache read once by two batched matmuls
            scores = (qg @ keys.transpose(-1, -2)).float() * hd**-0.5
            assert shared.mask is not None
            weights = scores.masked_fill(~shared.mask, float("-inf")).softmax(-1).to(values.dtype)
            out = weights @ values
        else:
            out = F.scaled_dot_product_attention(qg, keys, values, attn_mask=shared.mask)
        out = out.view(s, kvh, g, t, hd).permute(0, 3, 1, 2, 4).reshape(s, t, self.heads * hd)
        return out @ layer.o.T


Out = TypeVar("Out")


def capture_graph(step: Callable[[], Out], restore: Sequence[Tensor] = ()) -> tuple[Any, Out]:
    """Capture one call of `step` as a CUDA graph; return the graph and that call's outputs (the tensors a replay
    refills). `step` first runs twice on a side stream, so its kernels and their workspaces exist before capture;
    those calls really ran, so the tensors in `restore` (state a call advances) are put back as they were."""
    saved = [t.clone() for t in restore]
    stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    for tensor, value in zip(restore, saved, strict=True):
        tensor.copy_(value)
    return graph, out


class DecodeGraph:
    """One step over every slot with `width` new tokens per slot, captured once as a CUDA graph and replayed.

    width 1 is a decode step; width k+1 a speculative verify step. `step(tokens, positions)` copies into the
    graph's static inputs and replays; the returned tensors are the graph's own output buffers (valid until
    the next step). Without CUDA (or with use_graph=False) it simply runs the forward.
    """

    def __init__(self, model: StaticLlama, *, use_graph: bool, width: int = 1, aux_ids: tuple[int, ...] = ()) -> None:
        self.model, self.aux_ids, self.width = model, aux_ids, width
        device = model.embed.device
        self.tokens = torch.zeros(model.slots, width, dtype=torch.long, device=device)
        self.positions = torch.arange(width, device=device).repeat(model.slots, 1)
        self.graph: Any = None
        self.out: tuple[Tensor, Tensor | None] | None = None
        if use_graph and device.type == "cuda":
            self._capture()

    def _forward(self) -> tuple[Tensor, Tensor | None]:
        logits, aux = self.model.forward(self.tokens, self.positions, aux_ids=self.aux_ids,
                                         last_only=self.width == 1 and not self.aux_ids)
        return logits, aux

    def _capture(self) -> None:
        self.graph, self.out = capture_graph(self._forward)

    def run(self, tokens: Tensor, positions: Tensor) -> tuple[Tensor, Tensor | None]:
        """(logits, aux) after feeding tokens [slots, width] at positions [slots, width]."""
        if self.graph is None:
            self.tokens, self.positions = tokens, positions
            return self._forward()
        self.tokens.copy_(tokens)
        self.positions.copy_(positions)
        self.graph.replay()
        assert self.out is not None
        return self.out

    def step(self, tokens: Tensor, positions: Tensor) -> Tensor:
        """Logits [slots, V] of a width-1 step."""
        logits = self.run(tokens, positions)[0]
        return logits if logits.dim() == 2 else logits[:, -1]
