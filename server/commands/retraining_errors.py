"""The errors a retraining command ends as one line (`fail`, exit 1) instead of a traceback.

The training and inference stages' own errors, and a bad file or value (OSError, ValueError): what `train`,
`export-checkpoint`, `check-template`, `eval-accept`, `check-server` and `sglang-command` catch around the work
they call. The stages are imported when the tuple is asked for, so `datahunt --help` loads neither.
"""

from __future__ import annotations


def user_errors() -> tuple[type[Exception], ...]:
    """Return the exception classes a retraining command reports as one line."""
    from inference.errors import InferenceError
    from training.errors import TrainingError

    return (TrainingError, InferenceError, OSError, ValueError)
