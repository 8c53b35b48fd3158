"""The SpecForge side-by-side's state (benchmarks/specforge_side.py): $W/state.json, what each stage measured,
saved after every stage and copied to --out with the report, so a lost machine leaves what was done."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any


class State:
    """$W/state.json: what each stage measured; saved after every stage and copied to --out."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.path = Path(args.w) / "state.json"
        self.out = Path(args.out)
        source = Path(args.state) if getattr(args, "state", None) else self.path  # a returned specforge_state.json
        self.data: dict[str, Any] = json.loads(source.read_text()) if source.exists() else {}

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1))
        tmp.replace(self.path)
        self.out.mkdir(parents=True, exist_ok=True)
        shutil.copy(self.path, self.out / "specforge_state.json")
        report = self.path.parent / "specforge.json"
        if report.exists():
            shutil.copy(report, self.out / "specforge.json")
