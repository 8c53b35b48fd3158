"""docs/quickstart.md run as a reader runs it: its command block, line by line, in one fresh `bash` that has no
virtual environment activated and no variable the page does not export, timed step by step.

`page_blocks` reads the page's install block and its command block; `run_page` writes the command block into a
script (each line kept as written, between timing marks), runs it in a clean environment (`env -i`: a plain
PATH, HOME in the work folder, and PYTHONPATH at the checkout, which is what the editable install of a clone
points at), and returns each step's wall time and output. A step that exits non-zero stops the script there.

`datahunt serve` runs until Ctrl-C, so its line is started in the background: the runner waits for the page's
address, sends an authorised API call with the token the address carries (a 422 for its empty body shows the
token was taken; a refusal would be 401/403), and stops the server with SIGTERM (a background job of a
script ignores SIGINT, the signal of Ctrl-C).

At toy sizes (`toy=True`, what `tests/server/test_quickstart.py` runs) a few values change, by command:
smaller sizes, a free port for `serve`, and the prepared target replaced by a tiny random Llama the caller
has put at its path (`target prepare`'s line is then not run). `benchmarks/quickstart_times.py` runs the page at
its own sizes to re-measure the times it states.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "quickstart.md"
TOY = {  # flag → value, by command, at toy sizes
    "regen": {"--sample": "6", "--max-tokens": "8"},
    "train": {"--steps": "4", "--draft-vocab-size": "150", "--ttt-steps": "2"},
    "eval-accept": {"--limit": "2", "--max-new": "4"},
}
SERVE_WAIT_S = 120


@dataclass
class Step:
    """One line of the command block as it ran: its number, the line run, its wall time and its output."""

    number: int
    line: str
    seconds: float
    output: str
    code: int | None = None  # the exit status when it failed


def page_blocks(text: str) -> tuple[list[str], list[str]]:
    """Return the page's install block and its command block (the first two `bash` blocks), each as its lines
    without comments."""
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    lines = [[line.split("  #", 1)[0].rstrip() for line in block.splitlines()] for block in blocks[:2]]
    return [x for x in lines[0] if x.strip()], [x for x in lines[1] if x.strip()]


def toy_line(line: str, *, port: int) -> str | None:
    """The line as the toy run runs it (None: not run, `target prepare` at toy sizes)."""
    words = shlex.split(line)
    if words[:1] != ["datahunt"]:
        return line
    command = words[1] if len(words) > 1 else ""
    if command == "target":
        return None
    if command == "serve":
        return f"{line} --port {port}"
    for flag, value in TOY.get(command, {}).items():
        if flag in words:
            words[words.index(flag) + 1] = value
        else:
            words += [flag, value]
    return shlex.join(words)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _serve_snippet(line: str, log: str, port: int) -> str:
    """Start `serve` in the background, wait for its address, call the API with its token, stop it (SIGTERM)."""
    url = f"http://127.0.0.1:{port}"
    # A lone backslash ending a line below is Python's and joins the lines; a doubled one is the shell's.
    return f"""{{ {line} ; }} > {log} 2>&1 &
serve_pid=$!
for _ in $(seq {SERVE_WAIT_S * 4}); do grep -q 'review page: ' {log} && curl -s -o /dev/null {url}/ \
&& break; sleep 0.25; done
token=$(grep -o '#token=[A-Za-z0-9_-]*' {log} | head -n1 | cut -d= -f2)
printf '@@api %s\\n' "$(curl -s -o /dev/null -w '%{{http_code}}' -X POST -H "Authorization: Bearer $token" \\
  -H 'Content-Type: application/json' -d '{{"hub_ids": [], "reviewer": "quickstart"}}' \
{url}/catalog/approve)" > {log}.api
kill -TERM $serve_pid; wait $serve_pid || true
"""


def script(lines: list[str | None], logs: Path, times: Path, port: int) -> str:
    """The bash script: each line as written, its output to its own log, a timing mark before and after."""
    out = [f"mark() {{ printf '%s %s\\n' \"$1\" \"$EPOCHREALTIME\" >> {shlex.quote(str(times))}; }}"]
    for number, line in enumerate(lines, start=1):
        log = shlex.quote(str(logs / f"{number}.log"))
        out.append(f"mark start:{number}")
        if line is None:
            out.append(f": > {log}")
        elif re.match(r"datahunt serve\b", line):
            out.append(_serve_snippet(line, log, port))
        else:
            out.append(f"{{ {line} ; }} > {log} 2>&1 || {{ code=$?; mark fail:{number}:$code; exit $code; }}")
        out.append(f"mark end:{number}")
    return "\n".join(out) + "\n"


def clean_environment(workdir: Path) -> dict[str, str]:
    """What a fresh login shell on a clone has: a plain PATH (no virtual environment), a HOME, a locale; and
    PYTHONPATH at the checkout, as the editable install of a clone points at it."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(workdir / "home"), "LANG": "C.UTF-8",
            "TERM": "dumb", "COLUMNS": "120", "PYTHONPATH": str(ROOT), "TMPDIR": os.environ.get("TMPDIR", "/tmp")}


def prepare_workdir(workdir: Path) -> None:
    """A folder that stands for a fresh clone's root: the installed `.venv` and the shipped mirror."""
    (workdir / "home").mkdir(parents=True, exist_ok=True)
    (workdir / ".venv").symlink_to((ROOT / ".venv").resolve())
    (workdir / "tests" / "data").mkdir(parents=True)
    (workdir / "tests" / "data" / "mirror").symlink_to(ROOT / "tests" / "data" / "mirror")


def run_page(workdir: Path, *, toy: bool, timeout_s: float) -> list[Step]:
    """Run the page's command block in `workdir` (see `prepare_workdir`) in a fresh shell; return every step
    that ran, the last one with its exit status when it failed. At full size only `serve`'s port changes."""
    _, commands = page_blocks(PAGE.read_text(encoding="utf-8"))
    port = free_port()
    lines = [toy_line(line, port=port) if toy or re.match(r"datahunt serve\b", line) else line for line in commands]
    logs, times = workdir / "steps", workdir / "times.txt"
    logs.mkdir()
    (workdir / "quickstart.sh").write_text(script(lines, logs, times, port))
    subprocess.run(["bash", "--noprofile", "--norc", "-o", "pipefail", "quickstart.sh"], cwd=workdir,
                   env=clean_environment(workdir), timeout=timeout_s, check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    marks: dict[str, float] = {}
    failed: dict[int, int] = {}
    for mark in times.read_text().splitlines() if times.exists() else []:
        name, at = mark.split()
        if name.startswith("fail:"):
            _, number, code = name.split(":")
            failed[int(number)] = int(code)
            marks[f"end:{number}"] = float(at)
        else:
            marks[name] = float(at)
    steps = []
    for number, line in enumerate(lines, start=1):
        if f"start:{number}" not in marks:
            break
        log, api = logs / f"{number}.log", logs / f"{number}.log.api"
        steps.append(Step(number=number, line=line or commands[number - 1],
                          seconds=marks.get(f"end:{number}", marks[f"start:{number}"]) - marks[f"start:{number}"],
                          output=(log.read_text(errors="replace") if log.exists() else "")
                          + (api.read_text() if api.exists() else ""),
                          code=failed.get(number, None if f"end:{number}" in marks else -1)))
    return steps
