"""The SQL catalog (`curation/catalog/`) and the data pipeline: load, normalise, clean, dedup, decontaminate,
mix, split.

May import `core` only.
"""
