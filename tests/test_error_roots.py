"""Every error a stage raises on purpose descends from that stage's root (AgentError, GraphError, CurationError,
InferenceError, TrainingError).

Read from the source by AST: a class in a stage package whose bases include a builtin exception must also
have the stage's root among its ancestors, so the CLI can catch one name per stage. Private helpers (`_Name`)
are exempt.
"""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STAGES = {"agents": "AgentError", "graph": "GraphError", "curation": "CurationError", "inference": "InferenceError",
          "training": "TrainingError"}
BUILTIN_ERRORS = {
    name for name, value in vars(builtins).items() if isinstance(value, type) and issubclass(value, BaseException)
}


def _unrooted(package: str, root: str, top: Path = ROOT) -> list[str]:
    classes = []  # (where, name, base names) of every public class in the package
    for path in sorted((top / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                classes.append((f"{path.relative_to(top)}:{node.lineno}", node.name, bases))
    rooted = {root}
    while True:  # a class is rooted when one of its bases is (CatalogError → CurationError, …)
        more = {name for _, name, bases in classes if bases & rooted} - rooted
        if not more:
            break
        rooted |= more
    return [f"{where} {name}" for where, name, bases in classes if bases & BUILTIN_ERRORS and name not in rooted]


@pytest.mark.parametrize("package", sorted(STAGES))
def test_every_stage_error_has_the_stage_root(package: str) -> None:
    assert _unrooted(package, STAGES[package]) == []


def test_the_guard_sees_an_unrooted_error(tmp_path: Path) -> None:
    (tmp_path / "stage").mkdir()
    (tmp_path / "stage" / "mod.py").write_text(
        "class StageError(Exception): ...\nclass Fine(StageError, ValueError): ...\nclass Finer(Fine): ...\n"
        "class LooseError(ValueError): ...\n",
        encoding="utf-8",
    )
    assert _unrooted("stage", "StageError", tmp_path) == ["stage/mod.py:4 LooseError"]


def test_the_roots_keep_the_old_builtin_bases() -> None:
    from agents.categories import CategoryDefinitionError
    from agents.errors import AgentError
    from agents.llm import LLMError
    from agents.search.base import BackendUnavailableError, SearchError
    from curation.catalog.errors import CatalogError
    from curation.errors import CurationError
    from curation.manifest import ManifestError
    from graph.campaign import CampaignBusyError, CampaignError
    from graph.checkpoint import UnsupportedDatabaseError
    from graph.errors import GraphError
    from graph.lease import LeaseLost
    from inference.errors import InferenceError
    from inference.journal import JournalError
    from inference.records import InputError
    from training.config import ConfigError
    from training.errors import TrainingError

    assert issubclass(ManifestError, CurationError) and issubclass(ManifestError, ValueError)
    assert issubclass(CatalogError, CurationError)
    assert issubclass(InputError, InferenceError) and issubclass(InputError, ValueError)
    assert issubclass(JournalError, InferenceError) and issubclass(JournalError, RuntimeError)
    assert issubclass(ConfigError, TrainingError) and issubclass(ConfigError, ValueError)
    assert issubclass(CategoryDefinitionError, AgentError) and issubclass(CategoryDefinitionError, ValueError)
    assert issubclass(LLMError, AgentError) and issubclass(LLMError, RuntimeError)
    assert issubclass(BackendUnavailableError, SearchError) and issubclass(SearchError, AgentError)
    assert issubclass(CampaignBusyError, CampaignError) and issubclass(CampaignError, GraphError)
    assert issubclass(UnsupportedDatabaseError, GraphError) and issubclass(UnsupportedDatabaseError, ValueError)
    assert issubclass(LeaseLost, GraphError)


def test_one_name_means_one_thing() -> None:
    """`CampaignBusyError` was a RuntimeError in the service and a CampaignError in the graph, and
    `VerifiedCandidate` a TypedDict in the graph and a tuple in the catalog: each public error or contract name
    is now defined once across the stages."""
    seen: dict[str, list[str]] = {}
    for package in (*STAGES, "core", "server"):
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            names = [n.name for n in tree.body if isinstance(n, ast.ClassDef)]
            names += [t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
                      if isinstance(t, ast.Name) and t.id[:1].isupper() and not t.id.isupper()]
            for name in names:
                seen.setdefault(name, []).append(str(path.relative_to(ROOT)))
    twice = {name: where for name, where in seen.items() if len(where) > 1 and not name.startswith("_")}
    assert "CampaignBusyError" not in twice and "VerifiedCandidate" not in twice and "Message" not in twice
    # each stage binds the one atomic writer (core/atomic_files.py) to an UnsafePathError of its own root, and the
    # one folder lock (core/folder_lock.py) to a FolderBusyError of its own root, by design
    assert {name for name in twice if name.endswith("Error")} == {"UnsafePathError", "FolderBusyError"}, twice
