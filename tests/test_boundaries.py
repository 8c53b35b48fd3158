"""Package boundaries, enforced by reading every import of the project's packages (and proven by planted cases).

What counts as an import: `import x`, `from x import y`, relative imports resolved against the module's own
package, and `importlib.import_module("x")` / `__import__("x")` with a literal name. An import of a first-party
package must follow the table (DESIGN.md's, plus the exceptions the README's architecture section gives a
reason for); a top-level package of this repository that is not a stage (`benchmarks`, `tests`) may not be
imported at all. Only `core/settings.py` reads the environment, found by the AST (`os.environ`, `os.getenv`,
`from os import environ`), not by searching text.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("core", "agents", "graph", "curation", "inference", "training", "server", "prompts")
REPO_ONLY = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists() or p.suffix == ".py"} | {
    "benchmarks", "tests"}

# Which first-party packages each package may import: DESIGN.md's table, plus (README, Architecture) the prompt
# files agents and graph load, and training's use of inference.decoding (one implementation of every decoding
# forward, used by regeneration and evaluation alike); less server → agents: the front doors reach the agents
# only through graph/ (`graph.search` picks a campaign's backends).
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "prompts": set(),
    "agents": {"core", "prompts"},
    "graph": {"core", "agents", "curation.catalog", "prompts"},
    "curation": {"core"},
    "inference": {"core"},
    "training": {"core", "inference.decoding"},
    "server": {"core", "graph", "curation", "inference", "training", "prompts"},  # agents only through graph
}
# inference.decoding is shared by regeneration and training: it may import core, the stage's root exception and
# itself, nothing else of inference (nor, by the table, training).
DECODING = "inference.decoding"
DECODING_ALLOWED = {"core", "inference.errors", DECODING}
CORE_THIRD_PARTY = {"pydantic", "pydantic_settings", "typing_extensions"}  # the last: pydantic's own, for TypedDict
# The curated set's one reader parses its format, Parquet: that module alone in core/ may import pyarrow (inside
# the reader, so importing core stays pydantic-only).
CORE_FORMAT_READERS = {"core/curated_set.py": {"pyarrow"}}
ENV_NAMES = {"environ", "getenv", "putenv", "environb", "getenvb", "unsetenv"}


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, root: Path = ROOT) -> list[str]:
    """Every module name `path` imports, relative imports resolved, literal dynamic imports included."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    here = module_name(path, root).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
                module = ".".join([*base, *([node.module] if node.module else [])])
                names.extend([module] if node.module else [f"{module}.{a.name}" for a in node.names])
            elif node.module:
                names.append(node.module)
        elif isinstance(node, ast.Call) and _dynamic_import(node):
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                names.append(arg.value)
    return names


def _dynamic_import(node: ast.Call) -> bool:
    func = node.func
    named = (isinstance(func, ast.Name) and func.id in {"__import__", "import_module"}) or (
        isinstance(func, ast.Attribute) and func.attr == "import_module")
    return named and bool(node.args)


def reads_environment(path: Path) -> list[int]:
    """Line numbers where `path` reads or changes the process environment."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ENV_NAMES and isinstance(node.value, ast.Name) \
                and node.value.id == "os":
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "os" and \
                any(a.name in ENV_NAMES for a in node.names):
            lines.append(node.lineno)
    return lines


def violations(path: Path, root: Path = ROOT) -> list[str]:
    """The imports of `path` that the table forbids, each with why."""
    package = path.relative_to(root).parts[0]
    bad = []
    for name in imports_of(path, root):
        top = name.split(".")[0]
        if top in PACKAGES:
            if not any(name == a or name.startswith(a + ".") for a in ALLOWED[package] | {package}):
                bad.append(f"{name} (not allowed from {package}/)")
        elif top in REPO_ONLY:
            bad.append(f"{name} (a repository folder, not a package of the product)")
        elif package == "core" and top not in CORE_THIRD_PARTY and top not in sys.stdlib_module_names \
                and top != "__future__" and top not in CORE_FORMAT_READERS.get(path.relative_to(root).as_posix(), ()):
            bad.append(f"{name} (core/ holds pydantic types only)")
    return bad


def decoding_violations(path: Path, root: Path = ROOT) -> list[str]:
    """The first-party imports of a module of inference/decoding/ beyond core, inference.errors and itself."""
    return [name for name in imports_of(path, root) if name.split(".")[0] in PACKAGES
            and not any(name == a or name.startswith(a + ".") for a in DECODING_ALLOWED)]


def _modules() -> list[Path]:
    return [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py") if ".venv" not in p.parts]


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_follow_the_arrows(path: Path) -> None:
    bad = violations(path)
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


@pytest.mark.parametrize("path", sorted((ROOT / "inference" / "decoding").rglob("*.py")),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_decoding_imports_only_core_and_the_stage_errors(path: Path) -> None:
    bad = decoding_violations(path)
    assert not bad, (f"{path.relative_to(ROOT)} imports {bad}: "
                     "inference.decoding may import core and inference.errors only")


@pytest.mark.parametrize("source", ["from inference.runner import run\n", "from ..generation import generate\n",
                                    "from training.loss import ttt_loss\n"])
def test_planted_decoding_imports_are_caught(tmp_path: Path, source: str) -> None:
    path = tmp_path / "inference" / "decoding" / "planted.py"
    path.parent.mkdir(parents=True)
    path.write_text(source)
    assert decoding_violations(path, tmp_path)


def test_decoding_may_import_core_the_stage_errors_and_itself(tmp_path: Path) -> None:
    path = tmp_path / "inference" / "decoding" / "fine.py"
    path.parent.mkdir(parents=True)
    path.write_text("from core.types import Category\nfrom inference.errors import InferenceError\n"
                    "from .static_llama import StaticLlama\nfrom inference.decoding.draft_model import Eagle3Draft\n")
    assert decoding_violations(path, tmp_path) == []


def test_no_dumping_ground_modules() -> None:
    offenders = [p for p in _modules() if p.stem in {"utils", "helpers", "common", "misc"}]
    assert not offenders, f"modules named for nothing they hold: {offenders}"


def test_only_settings_reads_the_environment() -> None:
    offenders = {str(p.relative_to(ROOT)): reads_environment(p) for p in _modules()
                 if p.relative_to(ROOT).as_posix() != "core/settings.py" and reads_environment(p)}
    assert not offenders, f"only core/settings.py may read the environment: {offenders}"


def reads_global_settings(path: Path) -> list[int]:
    """Line numbers where `path` imports or calls `get_settings` (the process-wide settings) itself."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [node.lineno for node in ast.walk(tree)
            if (isinstance(node, ast.ImportFrom) and any(a.name == "get_settings" for a in node.names))
            or (isinstance(node, ast.Attribute) and node.attr == "get_settings")]


# Alembic runs env.py itself (`alembic upgrade head`): nobody can hand it the settings.
HANDED_SETTINGS_EXEMPT = {"curation/catalog/migrations/env.py"}


def test_graph_and_curation_are_handed_their_settings() -> None:
    offenders = {str(p.relative_to(ROOT)): reads_global_settings(p) for pkg in ("graph", "curation")
                 for p in (ROOT / pkg).rglob("*.py")
                 if p.relative_to(ROOT).as_posix() not in HANDED_SETTINGS_EXEMPT and reads_global_settings(p)}
    assert not offenders, f"graph/ and curation/ take Settings from their callers, never get_settings(): {offenders}"


@pytest.mark.parametrize("source", ["from core.settings import get_settings\n",
                                    "import core.settings\nx = core.settings.get_settings()\n"])
def test_planted_global_settings_reads_are_caught(tmp_path: Path, source: str) -> None:
    path = tmp_path / "graph" / "planted.py"
    path.parent.mkdir(parents=True)
    path.write_text(source)
    assert reads_global_settings(path)


def test_modules_open_with_a_docstring() -> None:
    missing = [str(p.relative_to(ROOT)) for p in _modules() if ast.get_docstring(ast.parse(p.read_text())) is None]
    assert not missing, f"modules without a docstring: {missing}"


# --- the guard itself: planted violations must be caught --------------------------------------------------------
PLANTED = {
    "training/planted_dynamic.py": 'import importlib\nimportlib.import_module("graph.campaign")\n',
    "training/planted_dunder.py": '__import__("agents.search")\n',
    "training/planted_benchmarks.py": "from benchmarks import gpu_scaling\n",
    "training/planted_inference.py": "from inference.runner import run\n",
    "training/sub/planted_relative.py": "from ...curation import pipeline\n",
    "inference/planted_relative_module.py": "from ..training.loss import ttt_loss\n",
    "core/planted_third_party.py": "import torch\n",
}


@pytest.mark.parametrize("relative", sorted(PLANTED))
def test_planted_wrong_arrows_are_caught(tmp_path: Path, relative: str) -> None:
    path = tmp_path / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(PLANTED[relative])
    assert violations(path, tmp_path), f"the guard missed {relative}: {PLANTED[relative]!r}"


@pytest.mark.parametrize("source", ["from os import environ\n", "import os\nx = os.getenv('A')\n",
                                    "import os\nos.environ['A'] = '1'\n", "from os import getenv as g\n"])
def test_planted_environment_reads_are_caught(tmp_path: Path, source: str) -> None:
    path = tmp_path / "curation" / "planted.py"
    path.parent.mkdir(parents=True)
    path.write_text(source)
    assert reads_environment(path)


def test_allowed_arrows_and_relative_imports_inside_a_package_pass(tmp_path: Path) -> None:
    path = tmp_path / "training" / "fine.py"
    path.parent.mkdir(parents=True)
    path.write_text("from .loss import ttt_loss\nfrom core.types import Category\n"
                    "from inference.decoding.static_llama import StaticLlama\n")
    assert violations(path, tmp_path) == []


def command_modules(root: Path = ROOT) -> set[str]:
    """The modules of `server/commands/` that register commands (they define `register(app)`)."""
    found = set()
    for path in sorted((root / "server" / "commands").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(isinstance(node, ast.FunctionDef) and node.name == "register" for node in tree.body):
            found.add(module_name(path, root))
    return found


def command_cross_imports(root: Path = ROOT) -> list[str]:
    """`A imports B` for every command module A that imports another command module B: what two commands share
    belongs in `server/usecases/` (work both doors do) or a helper module beside them, not in a command."""
    commands = command_modules(root)
    return [f"{module_name(path, root)} imports {imported}"
            for path in sorted((root / "server" / "commands").glob("*.py"))
            if module_name(path, root) in commands
            for imported in imports_of(path, root)
            if imported in commands and imported != module_name(path, root)]


def test_no_command_module_imports_another() -> None:
    assert len(command_modules()) >= 10
    assert command_cross_imports() == []


def test_a_planted_command_cross_import_is_caught(tmp_path: Path) -> None:
    folder = tmp_path / "server" / "commands"
    folder.mkdir(parents=True)
    (folder / "one.py").write_text('"""One."""\ndef register(app):\n    from server.commands.two import helper\n')
    (folder / "two.py").write_text('"""Two."""\ndef register(app):\n    pass\n\ndef helper():\n    pass\n')
    (folder / "notes.py").write_text('"""A helper module, not a command."""\n')
    assert command_cross_imports(tmp_path) == ["server.commands.one imports server.commands.two"]
# Each stage binds the one link-refusing writer (`core/atomic_files.py`) to its own error root, under one name.
STAGE_BOUND_NAMES = {"FolderBusyError", "UnsafePathError"}


def duplicate_class_names(root: Path = ROOT) -> dict[str, list[str]]:
    """Each top-level class name defined in more than one product module (a name with two meanings), with
    the modules that define it; the per-stage bindings of one error (STAGE_BOUND_NAMES) excepted."""
    found: dict[str, list[str]] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")) if (root / package).is_dir() else []:
            for node in ast.parse(path.read_text(encoding="utf-8")).body:
                if isinstance(node, ast.ClassDef) and node.name not in STAGE_BOUND_NAMES:
                    found.setdefault(node.name, []).append(path.relative_to(root).as_posix())
    return {name: where for name, where in found.items() if len(where) > 1}


def test_no_class_name_has_two_meanings() -> None:
    assert duplicate_class_names() == {}


def test_a_planted_duplicate_class_name_is_caught(tmp_path: Path) -> None:
    for package in ("core", "inference"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "status.py").write_text('"""Status."""\nclass RunStatus:\n    pass\n')
    (tmp_path / "inference" / "atomic_files.py").write_text('"""Files."""\nclass UnsafePathError(Exception):\n'
                                                           '    pass\n')
    assert duplicate_class_names(tmp_path) == {"RunStatus": ["core/status.py", "inference/status.py"]}


def test_only_the_curated_reader_of_core_may_import_pyarrow(tmp_path: Path) -> None:
    (tmp_path / "core").mkdir()
    for name in ("curated_set.py", "other.py"):
        (tmp_path / "core" / name).write_text("def read():\n    import pyarrow.parquet as pq\n    return pq\n")
    assert violations(tmp_path / "core" / "curated_set.py", tmp_path) == []
    assert violations(tmp_path / "core" / "other.py", tmp_path) == ["pyarrow.parquet (core/ holds pydantic types only)"]


def test_importing_core_imports_no_pyarrow() -> None:
    import subprocess

    code = ("import sys, core.curated_set, core.regenerated_set, core.completion, core.folder_lock; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pyarrow'))")
    found = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "[]"


# --- benchmarks: thin drivers of the product, small files, no circle among them ----------------------------------
BENCHMARK_MAX_LINES = 400


def long_benchmark_files(root: Path = ROOT) -> dict[str, int]:
    """Each benchmark file (a script, module or shell plan anywhere under benchmarks/) over BENCHMARK_MAX_LINES
    lines, with its line count."""
    files = [p for p in sorted((root / "benchmarks").rglob("*")) if p.suffix in {".py", ".sh"}]
    counts = {p.relative_to(root).as_posix(): len(p.read_text(encoding="utf-8").splitlines()) for p in files}
    return {name: lines for name, lines in counts.items() if lines > BENCHMARK_MAX_LINES}


def benchmark_imports(root: Path = ROOT) -> dict[str, set[str]]:
    """Which benchmark modules (benchmarks/*.py) each one imports, lazy imports inside functions included: by bare
    name (a script's own folder is on the path: `from gpu_scaling_data import Results`) or through the folder
    (`from benchmarks import gpu_scaling`, `from benchmarks.gpu_spec_round import build`)."""
    paths = sorted((root / "benchmarks").glob("*.py"))
    names = {p.stem for p in paths}
    graph: dict[str, set[str]] = {}
    for path in paths:
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "benchmarks" and not node.level:
                found.update(alias.name for alias in node.names)
        for imported in imports_of(path, root):
            parts = imported.split(".")
            found.add(parts[1] if parts[0] == "benchmarks" and len(parts) > 1 else parts[0])
        graph[path.stem] = (found & names) - {path.stem}
    return graph


def import_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One circle of imports in `graph`, its modules in order with the first repeated at the end; [] when none."""
    finished: set[str] = set()

    def visit(name: str, trail: list[str]) -> list[str]:
        if name in trail:
            return [*trail[trail.index(name):], name]
        if name in finished:
            return []
        for imported in sorted(graph.get(name, set())):
            cycle = visit(imported, [*trail, name])
            if cycle:
                return cycle
        finished.add(name)
        return []

    for name in sorted(graph):
        cycle = visit(name, [])
        if cycle:
            return cycle
    return []


def test_no_benchmark_file_is_over_400_lines() -> None:
    assert len(list((ROOT / "benchmarks").glob("*.py"))) >= 20
    assert long_benchmark_files() == {}


def test_a_planted_long_benchmark_file_is_caught(tmp_path: Path) -> None:
    (tmp_path / "benchmarks" / "plan").mkdir(parents=True)
    (tmp_path / "benchmarks" / "at_the_limit.py").write_text("x = 1\n" * BENCHMARK_MAX_LINES)
    (tmp_path / "benchmarks" / "plan" / "over.sh").write_text("true\n" * (BENCHMARK_MAX_LINES + 1))
    (tmp_path / "benchmarks" / "notes.md").write_text("words\n" * 1000)  # not code
    assert long_benchmark_files(tmp_path) == {"benchmarks/plan/over.sh": BENCHMARK_MAX_LINES + 1}


def test_benchmarks_import_each_other_without_a_circle() -> None:
    graph = benchmark_imports()
    # The walk sees the imports it must judge: a driver's stages, a stage's shared files, a folder-qualified one.
    assert {"gpu_scaling_curve", "gpu_scaling_data"} <= graph["gpu_scaling"]
    assert "gpu_scaling_data" in graph["gpu_scaling_curve"]
    assert "gpu_spec_round" in graph["random_spec_pair"]
    assert import_cycle(graph) == []


def test_a_planted_benchmark_circle_is_caught(tmp_path: Path) -> None:
    folder = tmp_path / "benchmarks"
    folder.mkdir()
    (folder / "driver.py").write_text('"""Driver."""\ndef main():\n    from stage import run\n    run()\n')
    (folder / "stage.py").write_text('"""Stage."""\nfrom benchmarks.shared import rows\n\ndef run():\n    rows()\n')
    (folder / "shared.py").write_text('"""Shared, with a back-edge."""\nfrom benchmarks import driver\n\n'
                                      "def rows():\n    return driver\n")
    (folder / "other.py").write_text('"""Beside them."""\nimport json\nimport shared\n')
    graph = benchmark_imports(tmp_path)
    assert graph == {"driver": {"stage"}, "stage": {"shared"}, "shared": {"driver"}, "other": {"shared"}}
    assert import_cycle(graph) == ["driver", "stage", "shared", "driver"]
    (folder / "shared.py").write_text('"""Shared, imports no benchmark."""\ndef rows():\n    return []\n')
    assert import_cycle(benchmark_imports(tmp_path)) == []


# --- one owner of a campaign's status ----------------------------------------------------------------------------
# `graph/lifecycle.py` holds the allowed moves of a campaign's status; the catalog writes the row (`campaigns.py`
# defines the write, `store.py` re-exports it). Nothing else may name the write.
CAMPAIGN_STATUS_WRITE = "set_campaign_status"
CAMPAIGN_STATUS_OWNERS = {"graph/lifecycle.py", "curation/catalog/campaigns.py", "curation/catalog/store.py"}


def names_campaign_status_write(path: Path) -> list[int]:
    """Line numbers where `path` calls, imports or looks up (by a literal name) the campaign status write."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (isinstance(node, ast.Attribute) and node.attr == CAMPAIGN_STATUS_WRITE) \
                or (isinstance(node, ast.Name) and node.id == CAMPAIGN_STATUS_WRITE) \
                or (isinstance(node, ast.ImportFrom) and any(a.name == CAMPAIGN_STATUS_WRITE for a in node.names)) \
                or (isinstance(node, ast.Constant) and node.value == CAMPAIGN_STATUS_WRITE):
            lines.append(node.lineno)
    return sorted(set(lines))


def campaign_status_writers(root: Path = ROOT) -> dict[str, list[int]]:
    """Each product module other than the owner that names the campaign status write, with the lines."""
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")) if (root / package).is_dir() else []:
            relative = path.relative_to(root).as_posix()
            if relative not in CAMPAIGN_STATUS_OWNERS and (lines := names_campaign_status_write(path)):
                found[relative] = lines
    return found


def test_only_the_lifecycle_moves_a_campaign_status() -> None:
    assert campaign_status_writers() == {}, "move a campaign's status through graph.lifecycle"


@pytest.mark.parametrize(("source", "line"), [
    ("from curation.catalog import store\nstore.set_campaign_status(s, campaign_id='c', status='failed')\n", 2),
    ("from curation.catalog.store import set_campaign_status as write\n", 1),
    ("from curation.catalog import campaigns\nwrite = getattr(campaigns, 'set_campaign_status')\n", 2),
])
def test_a_planted_campaign_status_write_is_caught(tmp_path: Path, source: str, line: int) -> None:
    for relative in ("server/commands/planted.py", "graph/lifecycle.py"):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(source)
    assert campaign_status_writers(tmp_path) == {"server/commands/planted.py": [line]}


# --- product files: one concept each, under the style guide's ~400 lines -----------------------------------------
PRODUCT_MAX_LINES = 400


def long_product_files(root: Path = ROOT) -> dict[str, int]:
    """Each product module (a .py file of a stage package, the catalog's migrations included) over
    PRODUCT_MAX_LINES lines, with its line count."""
    files = [p for package in PACKAGES if (root / package).is_dir() for p in sorted((root / package).rglob("*.py"))]
    counts = {p.relative_to(root).as_posix(): len(p.read_text(encoding="utf-8").splitlines()) for p in files}
    return {name: lines for name, lines in counts.items() if lines > PRODUCT_MAX_LINES}


def test_no_product_file_is_over_400_lines() -> None:
    assert len([p for package in PACKAGES for p in (ROOT / package).rglob("*.py")]) >= 250
    assert long_product_files() == {}


def test_a_planted_long_product_file_is_caught(tmp_path: Path) -> None:
    (tmp_path / "training" / "curve").mkdir(parents=True)
    (tmp_path / "training" / "at_the_limit.py").write_text("x = 1\n" * PRODUCT_MAX_LINES)
    (tmp_path / "training" / "curve" / "over.py").write_text("x = 1\n" * (PRODUCT_MAX_LINES + 1))
    (tmp_path / "training" / "notes.md").write_text("words\n" * 1000)  # not code
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "big.py").write_text("x = 1\n" * 1000)  # judged by the benchmark rule, not this one
    assert long_product_files(tmp_path) == {"training/curve/over.py": PRODUCT_MAX_LINES + 1}


# --- row artifacts: their files are named where they are read (core) and where the shards are written ----------
ARTIFACT_FILES = {"regenerated.jsonl", "errors.jsonl", "run.json", "finished.json", "samples.jsonl", "state.json",
                  "data/shard-*.parquet", "shard-*.parquet"}
ARTIFACT_LAYOUT_OWNERS = {"core/curated_set.py", "core/regenerated_set.py",
                          "curation/shards.py", "curation/engine/outputs.py"}  # the last two: the shard writers


def artifact_file_names(root: Path = ROOT) -> dict[str, set[str]]:
    """Product module -> the row artifacts' file names it spells out as a string of its own (docstrings and prose
    aside: a string counts when it is exactly one of ARTIFACT_FILES), for modules outside the layout's owners."""
    found: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            name = path.relative_to(root).as_posix()
            if name in ARTIFACT_LAYOUT_OWNERS:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            spelled = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)
                       and isinstance(node.value, str) and node.value in ARTIFACT_FILES}
            if spelled:
                found[name] = spelled
    return found


def test_only_core_knows_the_row_artifacts_layout() -> None:
    assert artifact_file_names() == {}


def test_a_planted_second_reader_of_a_row_artifact_is_caught(tmp_path: Path) -> None:
    (tmp_path / "training").mkdir()
    (tmp_path / "training" / "reader.py").write_text(
        '"""Reads regenerated.jsonl (a docstring may name it)."""\nfrom pathlib import Path\n\n'
        'def rows(folder):\n    """Its rows."""\n    return (Path(folder) / "regenerated.jsonl").read_text()\n')
    (tmp_path / "server").mkdir()
    (tmp_path / "server" / "help.py").write_text('"""Help."""\nHELP = "The run folder: regenerated.jsonl, run.json."\n')
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "regenerated_set.py").write_text('"""The one reader."""\nJOURNAL_FILE = "regenerated.jsonl"\n')
    assert artifact_file_names(tmp_path) == {"training/reader.py": {"regenerated.jsonl"}}


# --- a model's config.json: one reader (core.target_config) ------------------------------------------------------
CONFIG_READERS = {
    "core/target_config.py",  # the one reader of a model folder's config.json
    "training/export.py",  # an exported draft's config, read with the draft's own error
    "inference/watcher.py",  # the served draft's config, read leniently: a watcher never fails on it
    "agents/search/embedding.py",  # the embedding model's files inside its archive, not a model folder
}


def config_parsers(root: Path = ROOT) -> dict[str, list[int]]:
    """Product module -> the lines where it parses a `config.json` itself (`json.load`/`json.loads` of an
    expression that names one), for modules outside CONFIG_READERS."""
    found: dict[str, list[int]] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            name = path.relative_to(root).as_posix()
            if name in CONFIG_READERS:
                continue
            source = path.read_text(encoding="utf-8")
            lines = [node.lineno for node in ast.walk(ast.parse(source))
                     if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                     and node.func.attr in {"load", "loads"} and isinstance(node.func.value, ast.Name)
                     and node.func.value.id == "json" and "config" in (ast.get_source_segment(source, node) or "")]
            if lines:
                found[name] = sorted(lines)
    return found


def test_a_model_config_is_parsed_only_by_its_reader() -> None:
    assert config_parsers() == {}


def test_a_planted_config_parser_is_caught(tmp_path: Path) -> None:
    (tmp_path / "server").mkdir()
    (tmp_path / "server" / "door.py").write_text(
        '"""A door."""\nimport json\n\n\ndef target(folder):\n    """Its config."""\n'
        '    return json.loads((folder / "config.json").read_text())\n')
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "target_config.py").write_text(
        '"""The reader."""\nimport json\n\n\ndef read(config_file):\n    """Read."""\n'
        '    return json.loads(config_file.read_text())\n')
    assert config_parsers(tmp_path) == {"server/door.py": [7]}
