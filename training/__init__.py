"""The EAGLE-3 retraining stage: target hidden-state capture, draft vocab, trainer, export.

The draft's architecture and the decoders that evaluation times live in `inference.decoding`.

Also the checks around it: a preflight that compares a draft checkpoint with a running SGLang server, the
launch command that serves the draft, and acceptance-length evaluation. This package file imports nothing,
and `loss` (like `inference.decoding.draft_model`) needs nothing but torch, so the benchmark runs on a bare
GPU image; `transformers` is imported only where a target model is loaded.
"""
