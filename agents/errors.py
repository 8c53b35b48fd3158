"""The root of every error the agents raise on purpose, so a caller can catch the stage as one name.

    AgentError
    ├── CategoryDefinitionError   a category definition file missing or off its sections (categories)
    ├── BenchmarkRuleError        the benchmark rule's data file malformed (benchmark_rule)
    ├── SourceListError           a shipped source list malformed (source_repos)
    ├── LLMError                  the optional LLM failed or answered off the schema (llm)
    ├── EncoderUnavailableError   the sentence-embedding model cannot be loaded (search.embedding)
    └── SearchError               a search backend failed (search.base)
        ├── TransientSearchError      worth retrying: a timeout, a 429 or a 5xx
        └── BackendUnavailableError   the backend cannot answer at all (offline, no package)

Each subclass also keeps the builtin base it had (ValueError, RuntimeError), so older handlers still match.
"""

from __future__ import annotations


class AgentError(Exception):
    """Base of every error the agents raise on purpose."""
