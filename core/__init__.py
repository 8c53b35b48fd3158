"""Shared foundations of datahunt: the one Settings object and the few types every stage uses.

Nothing else lives here, so this package never turns into a dumping ground. It may import pydantic only.
"""
