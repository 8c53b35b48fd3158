"""Re-measures the times docs/quickstart.md states: its command block run at the page's own sizes, exactly as
written, in a fresh shell (no virtual environment activated, no variable the page does not export), with the
real SmolLM2-135M-Instruct target `target prepare` builds. The runner is the quickstart test's
(`tests/server/quickstart_page.py`), which runs the same lines at toy sizes.

Run after `make install`: `.venv/bin/python benchmarks/quickstart_times.py [--work DIR]`; the wall time of each
step, the machine's load average before and after, and any failed step go to
`benchmarks/results/quickstart_times.{json,md}`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def _runner() -> Any:
    spec = importlib.util.spec_from_file_location("quickstart_page", ROOT / "tests/server/quickstart_page.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, help="Folder standing for the clone (default: a temporary one).")
    parser.add_argument("--timeout", type=float, default=7200.0, help="Seconds for the whole page.")
    args = parser.parse_args()
    runner = _runner()
    work = args.work or Path(tempfile.mkdtemp(prefix="datahunt-quickstart-"))
    runner.prepare_workdir(work)
    load_before = os.getloadavg()
    started = time.time()
    steps = runner.run_page(work, toy=False, timeout_s=args.timeout)
    load_after = os.getloadavg()
    rows = [{"step": s.number, "command": s.line, "seconds": round(s.seconds, 1), "exit": s.code} for s in steps]
    result = {"machine": f"{platform.machine()}, {os.cpu_count()} cores", "load_before": load_before,
              "load_after": load_after, "wall_s": round(time.time() - started, 1), "steps": rows}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "quickstart_times.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = ["# docs/quickstart.md, re-measured", "",
             f"{result['machine']}; load average {load_before[0]:.1f} before, {load_after[0]:.1f} after; "
             f"{result['wall_s']} s in all (`benchmarks/quickstart_times.py`).", "",
             "| # | command | s | exit |", "|---:|---|---:|---|"]
    lines += [f"| {r['step']} | `{r['command']}` | {r['seconds']} | {'ok' if r['exit'] is None else r['exit']} |"
              for r in rows]
    (RESULTS / "quickstart_times.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
