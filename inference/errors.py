"""The root of every error the regeneration stage raises on purpose, so a caller can catch the stage as one name.

    InferenceError
    ├── InputError, PromptError          bad input file / one row that cannot be regenerated (records)
    ├── TemplateError                    no usable tokenizer or chat template (chat_template)
    ├── JournalError                     a corrupt journal line that is not the torn last one (journal)
    ├── SamplingChangedError             a resume with other sampling settings (runner)
    ├── AllEndpointsDown                 no endpoint answered within the pool's patience (endpoints)
    ├── ServerInfoError                  a server that does not answer introspection (server_info)
    ├── ServerEvalError                  a server whose acceptance cannot be measured (served_acceptance)
    ├── TargetError, UnsupportedTarget   a source that cannot become a target / a model no fast runner has
    ├── LocalServerError                 a local server not installed or not coming up (local_server)
    ├── DecodeKernelUnavailable          no Triton, or no CUDA device, for the split-KV decode kernel (decode_kernel)
    ├── UnknownRunError                  no registered run with that id (run_registry)
    ├── UnreadableStatusError            a run's status file that is there but damaged (status)
    └── RetryableError, RowError, RowFailed   one request's or row's failure, handled inside the runner

Each subclass also keeps the builtin base it had (ValueError, RuntimeError, LookupError), so older handlers
still match.
"""

from __future__ import annotations


class InferenceError(Exception):
    """Base of every error the inference stage raises on purpose."""
