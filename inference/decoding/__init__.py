"""Local decoding: every forward that decodes with the target here, used by regeneration and evaluation alike.

The static-KV-cache target forward (`static_llama`) with its attention-kernel rule (`attention_kernels`) and
split-KV decode kernel (`decode_kernel`, `decode_kernel_triton`); regeneration's continuous batcher
(`continuous`); the EAGLE-3 draft's architecture (`draft_model`, its training-time unroll included: one model
class) and the target hidden states it reads (`hidden_states`); the speculative loop: eager with a pluggable
acceptance rule (`speculative`), one CUDA graph a greedy round (`spec_graph`), ragged batches (`spec_batch`)
and sampling (`spec_sampled`).

Rule: this package imports torch (and triton, lazily), `core` and `inference.errors` only, never the rest of
`inference` nor `training`, so regeneration and training's evaluation share one implementation of each
forward. This file imports nothing.
"""
