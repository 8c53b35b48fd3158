"""Package boundaries from DESIGN.md, enforced by walking every import in the project's packages."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("core", "agents", "graph", "curation", "inference", "training", "server", "prompts")

# Which first-party packages each package may import (DESIGN.md's table).
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "prompts": set(),
    "agents": {"core", "prompts"},
    "graph": {"core", "agents", "curation.catalog", "prompts"},
    "curation": {"core"},
    "inference": {"core"},
    "training": {"core", "inference.static_llama"},  # the local target runtime, shared (README: Architecture)
    "server": {"core", "agents", "graph", "curation", "inference", "training", "prompts"},
}
CORE_THIRD_PARTY = {"pydantic", "pydantic_settings"}


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def _allowed(package: str, target: str) -> bool:
    for allowed in ALLOWED[package] | {package}:
        if target == allowed or target.startswith(allowed + "."):
            return True
    return False


def _modules() -> list[Path]:
    return [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py") if ".venv" not in p.parts]


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_follow_the_arrows(path: Path) -> None:
    package = path.relative_to(ROOT).parts[0]
    bad = []
    for name in _imports(path):
        top = name.split(".")[0]
        if top in PACKAGES and not _allowed(package, name):
            bad.append(name)
        if package == "core" and top not in PACKAGES and top not in CORE_THIRD_PARTY:
            import sys

            if top not in sys.stdlib_module_names and top != "__future__":
                bad.append(name)
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}, which DESIGN.md's arrows forbid for {package}/"


def test_no_dumping_ground_modules() -> None:
    offenders = [p for p in _modules() if p.stem in {"utils", "helpers", "common", "misc"}]
    assert not offenders, f"modules named for nothing they hold: {offenders}"


def test_only_settings_reads_the_environment() -> None:
    offenders = []
    for path in _modules():
        if path.relative_to(ROOT).as_posix() == "core/settings.py":
            continue
        text = path.read_text(encoding="utf-8")
        if "os.environ" in text or "os.getenv" in text or "getenv(" in text:
            offenders.append(str(path.relative_to(ROOT)))
    assert not offenders, f"only core/settings.py may read the environment: {offenders}"


def test_modules_open_with_a_docstring() -> None:
    missing = [str(p.relative_to(ROOT)) for p in _modules() if ast.get_docstring(ast.parse(p.read_text())) is None]
    assert not missing, f"modules without a docstring: {missing}"
