"""The `write-prompts` stage of benchmarks/gpu_scaling.py: prompts the target writes itself, vetted, then answered.

The Magpie source at scale: the product's `inference.prompt_writer` through the in-process engine, the kept prompts
vetted the way `curate` vets a source (exact and near duplicates, eval contamination, overlap with the mirror's
training prompts), then answered like the mirror's; what a later session carries is exported as xz files.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Any

from gpu_scaling_data import Results, load_jsonl, mirror_prompts, save_jsonl
from gpu_scaling_regen import regen_run, sync_device

WRITTEN_SOURCE = "target-written"


def write_stage(args: argparse.Namespace) -> None:
    """The Magpie source at scale: `--write-per-category` requests per category through `inference.prompt_writer`
    (the target continues its own user-turn prefix after a seed topic), the kept prompts vetted the way `curate`
    vets a source (exact and near duplicates, eval contamination; also any overlap with the mirror's training
    prompts), then answered like the mirror's prompts (`--written-answers` each). Resumable at every step."""
    results = Results(args)
    work = Path(args.work)
    written = work / "written"
    if (results.data.get("write_prompts") or {}).get("per_category_requested") != args.write_per_category:
        results.data["write_prompts"] = write_run(args, written)
        results.data.pop("vet_written", None)
        results.save()
    rows_file = work / "written_rows.jsonl"
    if "vet_written" not in results.data or not rows_file.exists():
        results.data["vet_written"] = vet_written(args, written, rows_file)
        results.save()
    print("vet", json.dumps(results.data["vet_written"]))
    if (results.data.get("regen_written") or {}).get("answers") != args.written_answers:
        if results.data["vet_written"]["kept"]:
            results.data["regen_written"] = {"answers": args.written_answers, **regen_run(
                args, rows_file, work / "written_regen", "static", args.slots, args.temperature,
                samples=args.written_answers)}
        else:  # a toy target writes nothing usable: nothing to answer, said so
            results.data["regen_written"] = {"answers": args.written_answers, "rows": 0,
                                             "note": "no written prompt survived the writer's filter and vetting"}
        results.save()
        export_written(work, Path(args.out))
    print("regen_written", json.dumps(results.data["regen_written"]))


def write_run(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """One prompt-writing run through the in-process engine; its counts per category and its throughput."""
    from transformers import AutoTokenizer

    from core.types import Category
    from inference.generation import Sampling
    from inference.local_backend import LocalTransformersBackend
    from inference.prompt_writer import PrefixBackend, WriterConfig, write_prompts
    from inference.template_prefix import user_turn_prefix
    from prompts import seed_topics

    categories = args.write_categories or [c.value for c in Category]
    unknown = sorted(set(categories) - {c.value for c in Category})
    if unknown:  # before any model loads
        raise SystemExit(f"--write-categories: unknown {unknown}")
    target = Path(args.writer_target) if args.writer_target else Path(args.work) / "target"
    tokenizer = AutoTokenizer.from_pretrained(str(target))
    turn = user_turn_prefix(tokenizer)
    inner = LocalTransformersBackend.load(target, engine="static", max_batch=args.slots, max_prompt_tokens=128,
                                          decode_attention=args.decode_attention)
    sampling = Sampling(temperature=args.write_temperature, top_p=args.write_top_p, max_tokens=args.write_max_tokens,
                        seed=0)
    config = WriterConfig(out_dir=out, categories=categories, per_category=args.write_per_category, endpoints=[],
                          topics={c: seed_topics(c) for c in categories}, concurrency=args.slots, sampling=sampling,
                          model="SmolLM2-135M-Instruct (GGUF Q4_1 dequantized, bf16)")
    sync_device()
    start = time.perf_counter()
    summary, report = write_prompts(config, PrefixBackend(inner, tokenizer, turn))
    wall = time.perf_counter() - start
    del inner
    sync_device()
    return {"per_category_requested": args.write_per_category, "requested": summary.total, "done": summary.done,
            "failed": summary.failed, "kept_by_writer": report.kept, "per_category": report.per_category,
            "completion_tokens": summary.completion_tokens, "wall_s": round(wall, 2),
            "tokens_per_s": round(summary.completion_tokens / max(wall, 1e-9), 1), "sampling": sampling.model_dump(),
            "prefix": turn.prefix, "end_marker": turn.end_marker}


def vet_written(args: argparse.Namespace, written: Path, rows_file: Path) -> dict[str, Any]:
    """The writer's kept prompts through curation's own steps: exact and near duplicates among them
    (`curation.dedup`), then any sharing a word n-gram with an eval prompt or with a mirror training prompt
    (`curation.decontam`, the index `curate` builds from eval sets); the rest, as regeneration rows, into
    `rows_file` (ids `tw-<category>-<k>`, source `target-written`)."""
    from curation.conversation import Row, message
    from curation.decontam import EvalIndex, find_contaminated
    from curation.dedup import deduplicate
    from curation.textkeys import word_hashes

    kept = [r for f in sorted((written / "prompts").glob("*.jsonl")) for r in load_jsonl(f)]
    rows = [Row(source_key=f"{WRITTEN_SOURCE}/{r['category']}", row_index=i, category=r["category"],
                messages=[message("user", r["messages"][0]["content"])]) for i, r in enumerate(kept)]
    dedup = deduplicate(rows)
    survivors = sorted(dedup.kept, key=lambda row: row.row_index)
    words = [word_hashes(row.messages[0]["content"]) for row in survivors]
    evals = EvalIndex()
    for item in load_jsonl(Path(args.data) / "eval.jsonl"):
        evals.add(item["id"], item["prompt"])
    mirror = EvalIndex()
    for prompt in load_jsonl(mirror_prompts(args)):
        mirror.add(prompt["id"], next(m["content"] for m in prompt["messages"] if m["role"] == "user"))
    contaminated = find_contaminated(evals, words)
    overlapping = {i: item for i, item in find_contaminated(mirror, words).items() if i not in contaminated}
    final = [kept[row.row_index] for i, row in enumerate(survivors) if i not in contaminated and i not in overlapping]
    save_jsonl(rows_file, [{"id": f"tw-{r['id']}", "category": r["category"], "source": WRITTEN_SOURCE,
                              "messages": r["messages"], "meta": {"topic": r["meta"]["topic"]}} for r in final])
    return {"written_kept": len(kept), "exact_duplicates": len(dedup.exact), "near_duplicates": len(dedup.near),
            "eval_contaminated": len(contaminated), "mirror_overlap": len(overlapping), "kept": len(final),
            "per_category": dict(sorted(Counter(r["category"] for r in final).items())),
            "eval_hits": sorted(set(contaminated.values()))[:50]}


def export_written(work: Path, out: Path) -> None:
    """The vetted prompts with the writer's report, and their answers, as xz files a later session carries."""
    import lzma

    for name, src in (("written_prompts", work / "written_rows.jsonl"),
                      ("written_answers", work / "written_regen" / "regenerated.jsonl"),
                      ("written_dropped", work / "written" / "dropped.jsonl")):
        with lzma.open(out / f"{name}.jsonl.xz", "wt", encoding="utf-8", preset=6) as fh:
            fh.write(src.read_text(encoding="utf-8") if src.exists() else "")
    shutil.copy(work / "written" / "report.json", out / "written_report.json")
