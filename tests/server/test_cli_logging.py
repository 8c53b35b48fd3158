"""The CLI's logging: a warning from datasets or huggingface_hub is printed once, not once per handler."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from server.cli import SELF_LOGGING_LIBRARIES, app


@pytest.fixture
def restore_propagation() -> Iterator[None]:
    before = {name: logging.getLogger(name).propagate for name in SELF_LOGGING_LIBRARIES}
    yield
    for name, value in before.items():
        logging.getLogger(name).propagate = value


def test_library_warnings_reach_one_handler(restore_propagation: None) -> None:
    import datasets  # noqa: F401  (installs its own stderr handler on import)

    library = logging.getLogger("datasets")
    library.propagate = True
    assert library.handlers  # the library prints by itself ...
    result = CliRunner().invoke(app, ["catalog", "summary", "--json"])
    assert result.exit_code == 0, result.output
    assert all(not logging.getLogger(name).propagate for name in SELF_LOGGING_LIBRARIES)  # ... and only by itself
