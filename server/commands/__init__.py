"""CLI command groups, one module per stage; each exposes `register(app)` and imports its stage lazily."""
