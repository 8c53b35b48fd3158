"""The EAGLE-3 retraining stage: draft model, target hidden-state capture, draft vocab, trainer, export.

Also the checks around it: a preflight that compares a draft checkpoint with a running SGLang server, the
launch command that serves the draft, and acceptance-length evaluation. Modules import torch lazily where
they can; `draft_model` and `loss` need nothing but torch, so benchmarks run on a bare GPU image.
"""
