"""The root of every error the training stage raises on purpose, so a caller can catch the stage as one name.

    TrainingError
    ├── ConfigError       a run configuration that cannot be used (config)
    ├── DataError         a training file or row that cannot be used (data)
    ├── VocabError        an inconsistent or stale draft vocab (vocab)
    ├── ExportError       a checkpoint with missing, extra or mis-shaped tensors (export)
    ├── LaunchError       flags that contradict each other or the draft (launch)
    ├── ForecastError     results that cannot be fitted (forecast)
    ├── CurveError        a scaling curve that cannot be made as asked (curve.plan)
    ├── CacheError        an offline cache that is missing, incomplete, or another target's (offline_cache)
    ├── CaptureError      capture arguments that cannot be used (capture)
    └── TrainingStopped   a run stopped by a signal after a checkpointed step (interrupt)

Each subclass also keeps the builtin base it had (ValueError, RuntimeError), so older handlers still match.
"""

from __future__ import annotations


class TrainingError(Exception):
    """Base of every error the training stage raises on purpose."""
