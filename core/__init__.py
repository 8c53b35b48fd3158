"""Shared foundations of datahunt: the one Settings object, the few types and row contracts every stage uses,
and the one JSONL reader.

Nothing else lives here, so this package never turns into a dumping ground. It may import pydantic only.
"""
