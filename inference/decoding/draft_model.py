"""The EAGLE-3 draft model in plain PyTorch, with the key names SGLang's `LlamaForCausalLMEagle3` loads.

Layout: frozen token embeddings borrowed from the target; `fc` fuses the three auxiliary target hidden states
(3 x target_hidden) into one hidden state; one decoder layer (`midlayer`) whose attention reads
[input_layernorm(token embeddings) || hidden_norm(fused state)] (2 x hidden into q/k/v); final `norm`;
`lm_head` over the draft vocab. `d2t` / `t2d` map draft ids to target ids. No transformers import here: the
training benchmark runs with torch alone.

Training-time test (TTT) attention: step 0 attends causally over all earlier positions; step j additionally
attends to its own position's keys from steps 1..j (the "diagonal"), exactly what a chain of j draft tokens
sees at inference when it sits on top of the step-0 prefix.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass(frozen=True)
class DraftConfig:
    """Shapes of the draft. `vocab_size` is the target's vocab; `draft_vocab_size` the lm_head's rows."""

    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    draft_vocab_size: int
    target_hidden_size: int
    max_position_embeddings: int = 2048
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    head_dim: int | None = None

    @property
    def resolved_head_dim(self) -> int:
        """Per-head width: explicit, else hidden / heads."""
        return self.head_dim or self.hidden_size // self.num_attention_heads

    def to_dict(self) -> dict[str, object]:
        """Return the fields as a plain dict (for checkpoints)."""
        return asdict(self)


class RMSNorm(nn.Module):
    """Root-mean-square norm computed in fp32, as Llama does."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        normed = F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps)  # one fused kernel where torch has one
        return (self.weight * normed.to(x.dtype)).to(x.dtype)


def rotary(positions: Tensor, dim: int, theta: float, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """cos, sin [T, dim] at integer positions [T] (half-split layout). A decoder that knows its positions ahead
    builds them once for all positions and looks rows up (`rope_tables`), the same values bit for bit."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, device=positions.device, dtype=torch.float32) / dim))
    angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]  # [T, dim/2]
    cos = torch.cat([angles.cos(), angles.cos()], -1).to(dtype)
    sin = torch.cat([angles.sin(), angles.sin()], -1).to(dtype)
    return cos, sin


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate x [B, heads, T, d] by tables [T, d]."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin


def rope(x: Tensor, positions: Tensor, theta: float) -> Tensor:
    """Apply rotary position embedding to x [B, heads, T, d] at integer positions [T] (half-split layout)."""
    cos, sin = rotary(positions, x.shape[-1], theta, x.dtype)
    return apply_rope(x, cos, sin)


class DraftAttention(nn.Module):
    """Grouped-query attention whose q/k/v read 2 x hidden (embeddings || fused state)."""

    def __init__(self, cfg: DraftConfig) -> None:
        super().__init__()
        hd = cfg.resolved_head_dim
        self.heads, self.kv_heads, self.head_dim, self.theta = (
            cfg.num_attention_heads, cfg.num_key_value_heads, hd, cfg.rope_theta)
        self.q_proj = nn.Linear(2 * cfg.hidden_size, self.heads * hd, bias=False)
        self.k_proj = nn.Linear(2 * cfg.hidden_size, self.kv_heads * hd, bias=False)
        self.v_proj = nn.Linear(2 * cfg.hidden_size, self.kv_heads * hd, bias=False)
        self.o_proj = nn.Linear(self.heads * hd, cfg.hidden_size, bias=False)

    def project(self, x: Tensor, positions: Tensor, tables: tuple[Tensor, Tensor] | None = None
                ) -> tuple[Tensor, Tensor, Tensor]:
        """Return q [B,h,T,d], and k, v repeated to h heads, with RoPE applied to q and k.

        `tables` (cos, sin [T, d] at `positions`) spares computing them here."""
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = tables if tables is not None else rotary(positions, self.head_dim, self.theta, q.dtype)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        repeat = self.heads // self.kv_heads
        return q, k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)


class DraftMLP(nn.Module):
    """SwiGLU feed-forward."""

    def __init__(self, cfg: DraftConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        return out


class DraftLayer(nn.Module):
    """The one decoder layer, split into `project` (before attention) and `finish` (after it)."""

    def __init__(self, cfg: DraftConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = DraftAttention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = DraftMLP(cfg)

    def project(self, embeds: Tensor, hidden: Tensor, positions: Tensor,
                tables: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """q, k, v from [input_layernorm(embeds) || hidden_norm(hidden)] (`tables`: see DraftAttention)."""
        x = torch.cat([self.input_layernorm(embeds), self.hidden_norm(hidden)], dim=-1)
        return self.self_attn.project(x, positions, tables)

    def rope_tables(self, length: int, device: torch.device, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """cos, sin [length, d] for positions 0..length-1: rows to look up by position while decoding."""
        attn = self.self_attn
        return rotary(torch.arange(length, device=device), attn.head_dim, attn.theta, dtype)

    def finish(self, attn: Tensor, residual: Tensor) -> Tensor:
        """o_proj + residual, then the MLP block with its own residual. attn is [B, T, h*d]."""
        h: Tensor = residual + self.self_attn.o_proj(attn)
        out: Tensor = h + self.mlp(self.post_attention_layernorm(h))
        return out


class PackedDraftLayer:
    """`DraftLayer`'s math for decoding, with fewer kernels per step: q/k/v packed into one matrix and gate/up into
    another (once, from the layer's weights), and queries and keys rotated in one pass.

    A chain step at batch 1 is bound by its kernel count, not by arithmetic, so this is what the speculative
    decoder (`inference.decoding.spec_graph`) runs; training keeps `DraftLayer` (its separate projections are what
    SGLang's checkpoint names). The norms are the layer's own modules. Built after the weights are final: the
    packed copies do not follow later updates.
    """

    def __init__(self, layer: DraftLayer) -> None:
        attn, mlp = layer.self_attn, layer.mlp
        self.heads, self.kv_heads, self.head_dim = attn.heads, attn.kv_heads, attn.head_dim
        self.qkv = torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]).detach()
        self.o = attn.o_proj.weight.detach()
        self.gate_up = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]).detach()
        self.down = mlp.down_proj.weight.detach()
        self.input_layernorm, self.hidden_norm = layer.input_layernorm, layer.hidden_norm
        self.post_attention_layernorm = layer.post_attention_layernorm

    def project(self, embeds: Tensor, hidden: Tensor, tables: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor, Tensor]:
        """q [B,h,T,d], and k, v repeated to h heads, from [input_layernorm(embeds) || hidden_norm(hidden)];
        `tables` are cos, sin [T, d] at the rows' positions."""
        x = torch.cat([self.input_layernorm(embeds), self.hidden_norm(hidden)], dim=-1)
        b, t, _ = x.shape
        h, kvh, d = self.heads, self.kv_heads, self.head_dim
        qkv = x @ self.qkv.T
        qk = apply_rope(qkv[..., : (h + kvh) * d].view(b, t, h + kvh, d).transpose(1, 2), *tables)
        v = qkv[..., (h + kvh) * d :].view(b, t, kvh, d).transpose(1, 2)
        repeat = h // kvh
        return qk[:, :h], qk[:, h:].repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)

    def finish(self, attn: Tensor, residual: Tensor) -> Tensor:
        """o projection + residual, then the SwiGLU block with its own residual. attn is [B, T, h*d]."""
        x = residual + attn @ self.o.T
        gate, up = (self.post_attention_layernorm(x) @ self.gate_up.T).chunk(2, dim=-1)
        out: Tensor = x + (F.silu(gate) * up) @ self.down.T
        return out


def ttt_attention(q: Tensor, keys: list[Tensor], values: list[Tensor], impl: str = "auto") -> Tensor:
    """Attention of TTT step j = len(keys) - 1, returning [B, T, h*d].

    keys[0]/values[0] are step 0's, attended causally (position t sees 0..t). keys[i] for i >= 1 are step i's,
    attended only at the same position t (the draft tokens of this position's own chain). Two equal ways:
    `diagonal` scores the step-0 block and the j diagonals separately (fastest on CPU); `masked_sdpa`
    concatenates the keys under a [T, (j+1)T] mask for PyTorch's fused kernels (faster and leaner on GPU;
    see benchmarks/train_step.py). `auto` picks by device.
    """
    if impl == "masked_sdpa" or (impl == "auto" and q.is_cuda):
        return _masked_sdpa(q, keys, values)
    b, h, t, d = q.shape
    scale = 1.0 / math.sqrt(d)
    causal = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    scores0 = (q @ keys[0].transpose(-1, -2)).float() * scale
    scores0 = scores0.masked_fill(~causal, float("-inf"))
    diag = [(q * k).sum(-1, keepdim=True).float() * scale for k in keys[1:]]  # each [B,h,T,1]
    weights = torch.softmax(torch.cat([scores0, *diag], dim=-1), dim=-1).to(q.dtype)
    out = weights[..., :t] @ values[0]
    for i, v in enumerate(values[1:]):
        out = out + weights[..., t + i : t + i + 1] * v
    return out.transpose(1, 2).reshape(b, t, h * d)


def _masked_sdpa(q: Tensor, keys: list[Tensor], values: list[Tensor]) -> Tensor:
    """The same attention through scaled_dot_product_attention with a dense [T, (j+1)T] boolean mask."""
    b, h, t, d = q.shape
    causal = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    diagonal = torch.eye(t, dtype=torch.bool, device=q.device)
    mask = torch.cat([causal] + [diagonal] * (len(keys) - 1), dim=1)
    out = F.scaled_dot_product_attention(q, torch.cat(keys, 2), torch.cat(values, 2), attn_mask=mask)
    return out.transpose(1, 2).reshape(b, t, h * d)


def shift_left(x: Tensor, n: int, fill: float | int = 0) -> Tensor:
    """Shift along dim 1 by n (x[:, t] <- x[:, t+n]), filling the end with `fill`."""
    if n == 0:
        return x
    pad = torch.full_like(x[:, :n], fill)
    return torch.cat([x[:, n:], pad], dim=1)


class Eagle3Draft(nn.Module):
    """The draft: embed_tokens (frozen), fc, midlayer, norm, lm_head, and the d2t / t2d vocab maps."""

    d2t: Tensor
    t2d: Tensor

    def __init__(self, cfg: DraftConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.embed_tokens.weight.requires_grad_(False)
        self.fc = nn.Linear(3 * cfg.target_hidden_size, cfg.hidden_size, bias=False)
        self.midlayer = DraftLayer(cfg)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(cfg.draft_vocab_size, dtype=torch.long))
        self.register_buffer("t2d", torch.zeros(cfg.vocab_size, dtype=torch.bool))

    def set_vocab(self, d2t: Tensor, t2d: Tensor) -> None:
        """Install the draft vocab maps (d2t: offsets, t2d: mask over the target vocab)."""
        self.d2t.copy_(d2t)
        self.t2d.copy_(t2d)

    def draft_to_target(self, draft_ids: Tensor) -> Tensor:
        """Map draft-vocab ids to target ids: target = draft + d2t[draft]."""
        return draft_ids + self.d2t[draft_ids]

    def logits(self, hidden: Tensor) -> Tensor:
        """Draft-vocab logits from the layer's output hidden state."""
        out: Tensor = self.lm_head(self.norm(hidden))
        return out

    def forward(self, input_ids: Tensor, aux: Tensor, steps: int, attention: str = "auto",
                rows: Tensor | None = None) -> list[Tensor]:
        """Unroll `steps` TTT steps; return each step's draft-vocab logits [B, T, draft_vocab].

        With `rows` (flat indices b*T + p of the target positions the loss reads, `training.loss.loss_rows`),
        step j's logits are computed only at the draft positions p - 1 - j that predict from them: [len(rows),
        draft_vocab] per step. Where p < 1 + j there is no such position; that row's logits are taken from a
        neighbouring index and the loss gives them no weight. The head and the loss then skip every position
        that counts for nothing (prompt tokens, padding).

        input_ids [B, T] are the target's tokens x_0..x_{T-1}; aux [B, T, 3*target_hidden] the target's aux
        states at each position. At step j, position t reads token x_{t+1+j} (teacher forcing) and the
        previous step's hidden state, and predicts x_{t+2+j}; its query and key are rotated at position t+j, the
        position its draft token takes at inference (SpecForge's and SGLang's convention: with one position
        for every step, a draft trained here would see shifted positions when served). `attention` picks
        ttt_attention's implementation.
        """
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        hidden = self.fc(aux.to(self.fc.weight.dtype))
        keys: list[Tensor] = []
        values: list[Tensor] = []
        outputs: list[Tensor] = []
        for j in range(steps):
            embeds = self.embed_tokens(shift_left(input_ids, j + 1)).to(hidden.dtype)
            q, k, v = self.midlayer.project(embeds, hidden, positions + j)
            keys.append(k)
            values.append(v)
            hidden = self.midlayer.finish(ttt_attention(q, keys, values, attention), residual=hidden)
            if rows is None:
                outputs.append(self.logits(hidden))
            else:
                outputs.append(self.logits(hidden.flatten(0, 1)[(rows - 1 - j).clamp(min=0)]))
        return outputs
