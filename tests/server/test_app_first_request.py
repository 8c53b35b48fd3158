"""A fresh app builds its routes when it is made, not on its first request.

FastAPI builds an included router's routes on the first request that reaches it, each parameter's schema under
`warnings.catch_warnings()` to hide a pydantic warning about the parameter's alias. That context manager swaps
the process-wide filter list and is not thread-safe: two replicas in one process answering their first requests
at once dropped each other's "ignore", and the warning escaped as an error (`filterwarnings = ["error"]`) in
`test_the_same_category_re_run_on_two_replicas_at_once_runs_once`. Here the other thread is played
deterministically: the first requests run with `warnings.simplefilter` doing nothing, as a build whose "ignore"
another thread has just removed, under warnings-as-errors.
"""

from __future__ import annotations

import threading
import warnings
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from core.settings import Settings
from server.app import create_app


def fresh_app(tmp_path: Path) -> TestClient:
    settings = Settings(home=tmp_path / "home", offline=True, api_token=SecretStr("tok"))
    return TestClient(create_app(settings, resume_unfinished=False))  # no lifespan: routing alone is tested


def test_the_first_requests_build_no_schema_that_another_threads_filters_could_break(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = fresh_app(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with monkeypatch.context() as patch:
            patch.setattr(warnings, "simplefilter", lambda *args, **kwargs: None)
            # An unknown path is matched against every route of every router first.
            answers = [client.get("/no-such-page").status_code, client.get("/docs").status_code]
    assert answers == [404, 200]


def test_two_fresh_apps_answer_their_first_requests_at_once(tmp_path: Path) -> None:
    """The failure as it was seen: two apps, their first requests on two threads at the same moment (a race:
    without the fix this fails only now and then, the test above every time)."""
    failures: list[BaseException] = []
    for round_ in range(5):
        clients = [fresh_app(tmp_path / f"{round_}-{side}") for side in "ab"]
        go = threading.Barrier(len(clients))

        def first_request(client: TestClient, go: threading.Barrier) -> None:
            go.wait()
            try:
                assert client.get("/no-such-page").status_code == 404
            except BaseException as exc:  # a thread cannot fail the test itself: collected, asserted below
                failures.append(exc)

        threads = [threading.Thread(target=first_request, args=(client, go)) for client in clients]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert failures == []
