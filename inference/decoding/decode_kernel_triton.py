# mypy: allow-untyped-decorators, disable-error-code="no-untyped-def"
# (Triton reads the annotations of a jit function's parameters: only its compile-time ones carry tl.constexpr.)
"""The two Triton programs behind `inference.decoding.decode_kernel`: per-split partial attention, then their merge.

Imported only through `decode_kernel.load_kernels` (it needs `triton`, which a CPU install may lack). Whether
`triton.jit` compiles or interprets is decided as each function is decorated, Triton's own `tl.max` and `tl.sum`
included, so the CPU interpreter needs TRITON_INTERPRET=1 before Triton is first imported. Layouts and the
reasons behind them are in `decode_kernel`'s docstring.

Rows: a program holds every query row of one kv head of one slot: row r is new token r // G, query head
h * G + r % G (G = heads / kv_heads), so each key/value block is loaded once for all G heads and all T tokens.
The rows are padded to BLOCK_R >= 16 and scored with `tl.dot`, rather than with elementwise products and
`tl.sum`: the step is bound by reading the cache, the tensor cores do the padded rows for nothing, and a
[rows, keys, head_dim] broadcast product would hold 64x more registers per program than the dot's tiles.
Both dots take fp32 operands: a bf16 or fp16 value is exact in tf32 (8 or 11 significant bits against tf32's 11),
so PRECISION="tf32" for 16-bit inputs multiplies exactly what a 16-bit dot would, on tensor cores, while
"ieee" keeps fp32 inputs fp32. (It also keeps one code path for the interpreter, whose `tl.dot` multiplies
bf16 tensors as their raw uint16 bits.) The softmax weights stay fp32 into the second dot, rounded to tf32
there, where the other two paths round them to the cache's dtype. Scores are kept in base 2 (scaled by
log2(e) / sqrt(head_dim)) so `exp2` does the softmax.
"""

from __future__ import annotations

import triton
import triton.language as tl

# A running maximum starts here rather than at -inf: a row that sees no key of a block then takes
# exp2(-inf - NEG_BIG) = 0 for its keys and exp2(0) = 1 for its rescale, never exp2(-inf - -inf) = nan.
# (A constexpr: a jit function may read a global only when it is one.)
NEG_BIG: tl.constexpr = tl.constexpr(-1.0e38)


@triton.jit
def split_partials(q_ptr, k_ptr, v_ptr, pos_ptr, part_ptr, lse_ptr,
                   q_s, q_t, q_h, k_s, k_h, k_n, v_s, v_h, v_n, p_s, p_t,
                   max_len, split_len, scale_log2,
                   T: tl.constexpr, G: tl.constexpr, D: tl.constexpr, BLOCK_R: tl.constexpr,
                   BLOCK_N: tl.constexpr, SPLITS: tl.constexpr, PRECISION: tl.constexpr):
    """Program (slot, kv head, split): softmax-normalised attention of the rows over the split's visible keys,
    written to part[slot, head, split] with its base-2 log-sum-exp; a split past the slot's last position exits
    having read nothing (the merge never reads it)."""
    s = tl.program_id(0).to(tl.int64)  # slot offsets into a large cache pass 2**31 elements
    h = tl.program_id(1)
    sp = tl.program_id(2)
    rows = tl.arange(0, BLOCK_R)
    live = rows < T * G
    tok = rows // G
    pos = tl.load(pos_ptr + s * p_s + tok * p_t, mask=live, other=-1)
    lo = sp * split_len
    hi = tl.minimum(tl.minimum(lo + split_len, tl.max(pos, axis=0) + 1), max_len)
    if lo < hi:
        d = tl.arange(0, D)
        q = tl.load(q_ptr + s * q_s + tok[:, None] * q_t + (h * G + rows % G)[:, None] * q_h + d[None, :],
                    mask=live[:, None], other=0.0).to(tl.float32)
        k_base = k_ptr + s * k_s + h * k_h
        v_base = v_ptr + s * v_s + h * v_h
        m = tl.full([BLOCK_R], NEG_BIG, tl.float32)
        total = tl.zeros([BLOCK_R], tl.float32)
        acc = tl.zeros([BLOCK_R, D], tl.float32)
        for start in range(lo, hi, BLOCK_N):
            n = start + tl.arange(0, BLOCK_N)
            inside = n < hi
            keys_t = tl.load(k_base + n[None, :] * k_n + d[:, None], mask=inside[None, :], other=0.0).to(tl.float32)
            scores = tl.dot(q, keys_t, input_precision=PRECISION) * scale_log2
            # Query row r sees positions <= its own: the causal rule among a verify step's new tokens too.
            scores = tl.where(inside[None, :] & (n[None, :] <= pos[:, None]), scores, float("-inf"))
            m_new = tl.maximum(m, tl.max(scores, axis=1))
            rescale = tl.exp2(m - m_new)
            p = tl.exp2(scores - m_new[:, None])
            total = total * rescale + tl.sum(p, axis=1)
            values = tl.load(v_base + n[:, None] * v_n + d[None, :], mask=inside[:, None], other=0.0).to(tl.float32)
            acc = acc * rescale[:, None] + tl.dot(p, values, input_precision=PRECISION)
            m = m_new
        total = tl.where(total > 0, total, 1.0)  # a padded row (or one that sees no key here) stays finite
        out = acc / total[:, None]
        at = (s * tl.num_programs(1) + h) * SPLITS + sp
        tl.store(part_ptr + (at * BLOCK_R + rows[:, None]) * D + d[None, :], out)
        tl.store(lse_ptr + at * BLOCK_R + rows, m + tl.log2(total))  # unread by the merge for the rows just named


@triton.jit
def merge_splits(part_ptr, lse_ptr, pos_ptr, out_ptr, p_s, p_t, o_s, o_t, o_h, split_len,
                 T: tl.constexpr, G: tl.constexpr, D: tl.constexpr, BLOCK_R: tl.constexpr,
                 SPLITS: tl.constexpr):
    """Program (slot, kv head): the rows' outputs from their splits, each weighted by exp2(its lse - the max).

    A row reads only the splits that start at or before its own position: every one of those was written by
    this step's `split_partials` and holds at least one key the row sees; the others may hold an earlier step's
    numbers (or uninitialised memory) and are masked out, never multiplied by a zero weight."""
    s = tl.program_id(0)
    h = tl.program_id(1)
    rows = tl.arange(0, BLOCK_R)
    live = rows < T * G
    tok = rows // G
    d = tl.arange(0, D)
    pos = tl.load(pos_ptr + s * p_s + tok * p_t, mask=live, other=-1)
    used = tl.minimum(tl.max(pos, axis=0) // split_len + 1, SPLITS)
    m = tl.full([BLOCK_R], NEG_BIG, tl.float32)
    total = tl.zeros([BLOCK_R], tl.float32)
    acc = tl.zeros([BLOCK_R, D], tl.float32)
    for sp in range(used):
        at = (s * tl.num_programs(1) + h) * SPLITS + sp
        valid = live & (sp * split_len <= pos)
        lse = tl.load(lse_ptr + at * BLOCK_R + rows, mask=valid, other=float("-inf"))
        part = tl.load(part_ptr + (at * BLOCK_R + rows[:, None]) * D + d[None, :], mask=valid[:, None], other=0.0)
        m_new = tl.maximum(m, lse)
        rescale = tl.exp2(m - m_new)
        weight = tl.exp2(lse - m_new)
        total = total * rescale + weight
        acc = acc * rescale[:, None] + weight[:, None] * part
        m = m_new
    out = acc / tl.where(total > 0, total, 1.0)[:, None]
    where = out_ptr + s * o_s + tok[:, None] * o_t + (h * G + rows % G)[:, None] * o_h + d[None, :]
    tl.store(where, out.to(out_ptr.dtype.element_ty), mask=live[:, None])
