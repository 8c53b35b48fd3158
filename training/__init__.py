"""The EAGLE-3 retraining stage: draft model, target hidden-state capture, draft vocab, trainer, export.

Also the checks around it: a preflight that compares a draft checkpoint with a running SGLang server, the
launch command that serves the draft, and acceptance-length evaluation. This package file imports nothing,
and `draft_model` and `loss` need nothing but torch, so the benchmark runs on a bare GPU image;
`transformers` is imported only where a target model is loaded.
"""
