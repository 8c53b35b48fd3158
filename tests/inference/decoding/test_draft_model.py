"""The draft model: SGLang-shaped parameters, frozen embeddings, and TTT attention equal to causal attention
at step 0."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from inference.decoding.draft_model import DraftConfig, Eagle3Draft, shift_left, ttt_attention

CFG = DraftConfig(hidden_size=32, intermediate_size=48, num_attention_heads=4, num_key_value_heads=2,
                  vocab_size=60, draft_vocab_size=40, target_hidden_size=24)


def test_parameters_have_the_shapes_sglang_loads() -> None:
    draft = Eagle3Draft(CFG)
    shapes = {k: tuple(v.shape) for k, v in draft.state_dict().items()}
    assert shapes["fc.weight"] == (32, 72)
    assert shapes["midlayer.self_attn.q_proj.weight"] == (32, 64)
    assert shapes["midlayer.self_attn.k_proj.weight"] == (16, 64)
    assert shapes["lm_head.weight"] == (40, 32)
    assert shapes["t2d"] == (60,) and shapes["d2t"] == (40,)
    assert not draft.embed_tokens.weight.requires_grad


def test_step_zero_attention_is_plain_causal_attention() -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 7, 8) for _ in range(3))
    ours = ttt_attention(q, [k], [v])
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(2, 7, 32)
    torch.testing.assert_close(ours, expected)


def test_later_steps_see_only_their_own_chain() -> None:
    torch.manual_seed(0)
    q, k0, v0, k1, v1 = (torch.randn(1, 1, 5, 4) for _ in range(5))
    out = ttt_attention(q, [k0, k1], [v0, v1])
    t = 3  # position 3 attends to step-0 keys 0..3 and its own step-1 key only
    keys = torch.cat([k0[0, 0, : t + 1], k1[0, 0, t : t + 1]])
    values = torch.cat([v0[0, 0, : t + 1], v1[0, 0, t : t + 1]])
    w = torch.softmax(q[0, 0, t] @ keys.T / 2.0, -1)
    torch.testing.assert_close(out[0, t], w @ values)


def test_unroll_returns_one_draft_vocab_logit_tensor_per_step() -> None:
    draft = Eagle3Draft(CFG)
    outs = draft(torch.randint(0, 60, (2, 9)), torch.randn(2, 9, 72), steps=3)
    assert [tuple(o.shape) for o in outs] == [(2, 9, 40)] * 3
    assert torch.equal(shift_left(torch.tensor([[1, 2, 3]]), 1), torch.tensor([[2, 3, 0]]))


def test_both_attention_implementations_agree_and_so_do_gradients() -> None:
    torch.manual_seed(0)
    draft = Eagle3Draft(CFG)
    ids, aux = torch.randint(0, 60, (2, 9)), torch.randn(2, 9, 72)
    diagonal = draft(ids, aux, 4, attention="diagonal")
    sum(o.sum() for o in diagonal).backward()
    grad = draft.fc.weight.grad.clone()
    draft.zero_grad()
    masked = draft(ids, aux, 4, attention="masked_sdpa")
    sum(o.sum() for o in masked).backward()
    for a, b in zip(diagonal, masked, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(grad, draft.fc.weight.grad, rtol=1e-4, atol=1e-4)


def test_the_packed_decoding_layer_computes_what_the_draft_layer_computes() -> None:
    """The speculative decoder's layer (q/k/v and gate/up packed, q and k rotated together) against the module
    the draft is trained and exported as, grouped-query heads included."""
    from inference.decoding.draft_model import PackedDraftLayer

    torch.manual_seed(0)
    cfg = DraftConfig(hidden_size=48, intermediate_size=96, num_attention_heads=6, num_key_value_heads=2,
                      vocab_size=100, draft_vocab_size=80, target_hidden_size=40)
    layer = Eagle3Draft(cfg).midlayer.eval()
    for module in (layer.input_layernorm, layer.hidden_norm, layer.post_attention_layernorm):
        torch.nn.init.normal_(module.weight, 1.0, 0.2)  # norms that are not all ones
    packed = PackedDraftLayer(layer)
    embeds, hidden = torch.randn(2, 7, 48), torch.randn(2, 7, 48)
    positions = torch.arange(3, 10)
    tables = layer.rope_tables(16, torch.device("cpu"), torch.float32)
    with torch.no_grad():
        ours = packed.project(embeds, hidden, (tables[0][positions], tables[1][positions]))
        theirs = layer.project(embeds, hidden, positions)
        for a, b in zip(ours, theirs, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
        attn = torch.randn(2, 7, 48)
        torch.testing.assert_close(packed.finish(attn, hidden), layer.finish(attn, hidden), rtol=1e-5, atol=1e-5)
