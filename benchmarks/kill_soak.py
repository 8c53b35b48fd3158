"""Kill soak: random SIGKILLs of every stage, two writers on one folder at random, outputs compared with a clean run.

For `--minutes` (default 10) one round after another picks a stage — `curate` (alternating a two-source and a
one-source manifest into the same folder, the issue's torn A/B case), `regen` of that curated folder against a
local fake OpenAI server, `publish` of the curated folder or of the run, `train` of a tiny CPU draft for two
steps on the run — starts it, in about a third of the rounds starts a second writer of the same stage on the
same folder a moment later, and SIGKILLs the first at a random moment of its usual duration (or lets it end).
Stages run into each other's inputs while those are being rewritten: a watcher samples every 20 ms whether
the curated folder and the run hold a valid completion marker. Counted, each must be 0:
  - torn sets consumed: a consumer (`regen`, `publish`, `train`) that exits 0 although its input held no valid
    marker at any moment of its life, or a published curated set whose rows and card come from different runs;
  - second writers that were refused without naming the first writer's pid, or that wrote beside it;
  - after the soak, each stage run once more to its end on the same folders: curated rows, regenerated rows and
    published rows lost, duplicated or different against the clean run made first.
Train is cheap enough here (a 4-layer 64-wide Llama with a byte-level tokenizer trained on the prompts, two
steps: 10-30 s a run on 2 shared cores, mostly import and start-up), so it takes part. Run from the repository
root: `.venv/bin/python -m benchmarks.kill_soak --minutes 10`; writes `benchmarks/results/kill_soak.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from core.completion import ArtifactError
from core.curated_set import read_curated, read_state
from core.folder_lock import lock_holder
from core.regenerated_set import read_regenerated, run_finished

ROOT = Path(__file__).resolve().parent.parent
MIRROR = ROOT / "tests" / "data" / "mirror"
RESULTS = ROOT / "benchmarks" / "results"
CLI = [sys.executable, "-c", "from server.cli import app; app(prog_name='datahunt')"]
SOURCES = [("openai/gsm8k", "main", "math", 150), ("tatsu-lab/alpaca", None, "general_chat", 100)]


# --- the fake OpenAI server: a deterministic answer per prompt, a few ms late --------------------------------
class _Answers(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _send(self, body: dict[str, Any], code: int = 200) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        if self.path == "/health":
            self._send({})
        elif self.path == "/v1/models":
            self._send({"data": [{"id": "soak-model"}]})
        else:
            self._send({"error": "not found"}, 404)

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        question = body["messages"][-1]["content"]
        time.sleep(random.uniform(0.002, 0.02))
        answer = "answer " + " ".join(question.split()[:12][::-1])
        self._send({"choices": [{"index": 0, "message": {"role": "assistant", "content": answer},
                                 "finish_reason": "stop"}], "model": "soak-model",
                    "usage": {"prompt_tokens": len(question.split()), "completion_tokens": len(answer.split())}})


def start_server() -> tuple[ThreadingHTTPServer, str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Answers)  # a thread per request
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


# --- inputs: two manifests over the test mirror, a tiny target ------------------------------------------------
def write_manifests(work: Path) -> tuple[Path, Path]:
    def manifest(sources: list[tuple[str, str | None, str, int]]) -> dict[str, Any]:
        return {"schema_version": 1, "created_at": "2026-01-01T00:00:00Z", "mirror": str(MIRROR),
                "sources": [{"hub_id": h, "config": c, "category": cat, "max_rows": n, "license": "MIT"}
                            for h, c, cat, n in sources]}

    a, b = work / "manifest-a.json", work / "manifest-b.json"
    a.write_text(json.dumps(manifest(SOURCES)))
    b.write_text(json.dumps(manifest(SOURCES[:1])))
    return a, b


def tiny_target(folder: Path, texts: list[str]) -> Path:
    """A 4-layer Llama with a byte-level BPE tokenizer trained on `texts` and a plain chat template."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    special = ["<pad>", "<bos>", "<|end|>", "<|user|>", "<|assistant|>", "<|system|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=400, special_tokens=special,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    template = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
                "{% if add_generation_prompt %}<|assistant|>{% endif %}")
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<|end|>",  # type: ignore[no-untyped-call]
                                        pad_token="<pad>", chat_template=template)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


# --- the stages' commands on one set of folders ---------------------------------------------------------------
class Folders:
    def __init__(self, root: Path, manifests: tuple[Path, Path], url: str, target: Path) -> None:
        self.root, self.manifests, self.url, self.target = root, manifests, url, target
        self.cur, self.run, self.draft = root / "curated", root / "run", root / "draft"

    def args(self, stage: str, variant: int = 0) -> list[str]:
        if stage == "curate":
            return ["curate", "-m", str(self.manifests[variant]), "-o", str(self.cur)]
        if stage == "regen":
            return ["regen", "--input", str(self.cur), "--server", self.url, "--out", str(self.run),
                    "--concurrency", "8", "--no-progress"]
        if stage == "publish":
            src = self.cur if variant == 0 else self.run
            return ["publish", str(src), "--repo", "me/soak", "--out", str(self.published(variant)),
                    "--accept-license-risk"]
        return ["train", "--data", str(self.run), "--target", str(self.target), "--out", str(self.draft),
                "--steps", "2", "--batch-size", "4", "--draft-vocab-size", "150", "--ttt-steps", "2",
                "--device", "cpu", "--force-resume"]  # the run it trains on grows between rounds

    def lock_file(self, stage: str, variant: int) -> Path:
        if stage == "publish":
            return self.root / f".{self.published(variant).name}.publish.lock"
        return {"curate": self.cur, "regen": self.run, "train": self.draft}[stage] / ".datahunt.lock"

    def published(self, variant: int) -> Path:
        return self.root / ("hub-curated" if variant == 0 else "hub-run")

    def input_of(self, stage: str, variant: int) -> Path | None:
        return {"regen": self.cur, "train": self.run, "publish": self.cur if variant == 0 else self.run}.get(stage)


def start(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([*CLI, *args], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def valid(folder: Path) -> bool:
    """Whether `folder` holds a finished set now (its marker there and agreeing with the files' sizes)."""
    try:
        run_finished(folder) if (folder / "run.json").is_file() else read_state(folder)
    except (ArtifactError, OSError):
        return False
    return True


class Watcher(threading.Thread):
    """Samples every 20 ms whether the curated folder and the run are finished sets."""

    def __init__(self, folders: list[Path]) -> None:
        super().__init__(daemon=True)
        self.folders, self.stop = folders, threading.Event()
        self.samples: list[tuple[float, dict[Path, bool]]] = []

    def run(self) -> None:
        while not self.stop.is_set():
            self.samples.append((time.monotonic(), {f: valid(f) for f in self.folders}))
            time.sleep(0.02)

    def ever_valid(self, folder: Path, since: float, until: float) -> bool:  # at any sample of [since, until]
        return any(seen[folder] for t, seen in list(self.samples) if since - 0.05 <= t <= until + 0.05)


# --- reading the outputs --------------------------------------------------------------------------------------
def curated_rows(folder: Path) -> list[str]:  # each row as its JSON, through the set's one reader
    return [s.model_dump_json() for s in read_curated(folder)]


def journal_ids(folder: Path) -> list[str]:
    path = folder / "regenerated.jsonl"
    lines = path.read_text().splitlines() if path.is_file() else []
    return [json.loads(line)["id"] for line in lines if line.strip()]


def published(folder: Path) -> tuple[list[str], list[str]]:
    """(row ids, the card's source datasets) of a published folder."""
    import pyarrow.parquet as pq
    from huggingface_hub import DatasetCard

    ids = [r["id"] for p in sorted(folder.glob("data/*.parquet")) for r in pq.read_table(p).to_pylist()]
    return ids, list(DatasetCard.load(folder / "README.md").data.to_dict().get("source_datasets") or [])


def pipeline(folders: Folders, env: dict[str, str]) -> dict[str, float]:
    """Each stage run once to its end, in order; return how long each took (seconds)."""
    took = {}
    for stage, variant in (("curate", 0), ("regen", 0), ("publish", 0), ("publish", 1), ("train", 0)):
        started = time.monotonic()
        done = subprocess.run([*CLI, *folders.args(stage, variant)], cwd=ROOT, env=env, capture_output=True,
                              text=True)
        if done.returncode != 0:
            raise SystemExit(f"{stage} failed in a clean run: {done.stderr[-2000:]}")
        took[f"{stage}{variant or ''}"] = time.monotonic() - started
    return took


# --- the soak -------------------------------------------------------------------------------------------------
DOWNSTREAM = {"curate": [("regen", 0), ("publish", 0)], "regen": [("train", 0), ("publish", 1)]}


def _wait_for_lock(process: subprocess.Popen[str], lock: Path, limit_s: float) -> None:
    """Return once `process` has written its pid into `lock` (it holds the folder), it ended, or `limit_s` passed."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and process.poll() is None:
        if lock_holder(lock) == process.pid:
            return
        time.sleep(0.005)


def _check_consumer(stage: str, variant: int, run: tuple[subprocess.Popen[str], float, float, str],
                    folders: Folders, watcher: Watcher, counts: Counter[str], refs: dict[str, Any]) -> None:
    """Count what a consumer of another stage's output did: refused an unfinished input, or consumed it (then
    its input must have been a finished set at some moment of its life, and its output whole)."""
    process, since, until, err = run
    source = folders.input_of(stage, variant)
    if source is None:
        return
    if process.returncode != 0:
        counts[f"refused_unfinished_{stage}"] += "not a finished" in err or "not the set" in err
        return
    counts[f"consumed_{stage}"] += 1
    if not watcher.ever_valid(source, since, until):
        counts["torn_sets_consumed"] += 1
    if stage == "publish" and variant == 0:
        ids, sources = published(folders.published(0))
        if (sorted(ids), sources) not in refs["curated_sets"]:
            counts["torn_sets_consumed"] += 1  # rows of one run under another's card
    if stage == "regen":  # a finished run's journal: each row once
        ids = journal_ids(folders.run)
        counts["journal_duplicates_seen"] += len(ids) - len(set(ids))


def _check_refusal(err: str, holder: int, counts: Counter[str], refs: dict[str, Any]) -> None:
    """A refusal is one `error:` line naming the holder's pid, and no traceback (warnings before it may be)."""
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    if len(errors) != 1 or f"(pid {holder})" not in errors[0] or "Traceback" in err:
        counts["refusals_not_naming_the_holder_in_one_line"] += 1
        refs.setdefault("odd_refusals", []).append(err[-600:])


def soak_round(rng: random.Random, folders: Folders, env: dict[str, str], took: dict[str, float],
               watcher: Watcher, counts: Counter[str], refs: dict[str, Any]) -> None:
    """One stage started and SIGKILLed at a random moment (or left to end); at random a second writer of the same
    stage on the same folder, and a consumer of its output while it is being written."""
    stage = rng.choices(["curate", "regen", "publish", "train"], weights=[3, 3, 3, 1])[0]
    variant = rng.randrange(2) if stage in ("curate", "publish") else 0
    usual = took[f"{stage}{variant if stage == 'publish' and variant else ''}"]
    first, began = start(folders.args(stage, variant), env), time.monotonic()
    second = consumer = None
    if rng.random() < 0.35:  # mostly while the first holds its folder (paused there: a slow writer), else as
        paused = rng.random() < 0.7  # both start up
        if paused:
            _wait_for_lock(first, folders.lock_file(stage, variant), usual * 2)
            paused = first.poll() is None
            if paused:
                os.killpg(first.pid, signal.SIGSTOP)
        time.sleep(rng.uniform(0.0, 0.5))
        second, second_began = start(folders.args(stage, variant), env), time.monotonic()
        counts["second_writers_started"] += 1
        if paused:  # the pause does not count against the first's time
            second.wait()
            os.killpg(first.pid, signal.SIGCONT)
            began += time.monotonic() - second_began
    if stage in DOWNSTREAM and rng.random() < 0.3:
        time.sleep(rng.uniform(0.0, usual * 0.8))
        consumer_stage, consumer_variant = rng.choice(DOWNSTREAM[stage])
        consumer, consumer_began = start(folders.args(consumer_stage, consumer_variant), env), time.monotonic()
    deadline = began + rng.uniform(0.1, 1.3) * usual
    while time.monotonic() < deadline and first.poll() is None:
        time.sleep(0.01)
    if first.poll() is None:
        os.killpg(first.pid, signal.SIGKILL)
        counts[f"kills_{stage}"] += 1
    _, first_err = first.communicate()
    _check_consumer(stage, variant, (first, began, time.monotonic(), first_err), folders, watcher, counts, refs)
    if second is not None:
        _, second_err = second.communicate()
        if "in use by another datahunt process" in second_err:
            counts["second_writers_refused"] += 1
            _check_refusal(second_err, first.pid, counts, refs)
        elif "in use by another datahunt process" in first_err:  # the second took the lock first
            counts["first_writers_refused_by_the_second"] += 1
            _check_refusal(first_err, second.pid, counts, refs)
        else:
            counts["second_writers_ran_after_the_first_ended"] += 1
        _check_consumer(stage, variant, (second, second_began, time.monotonic(), second_err), folders, watcher,
                        counts, refs)
    if consumer is not None:
        _, consumer_err = consumer.communicate()
        _check_consumer(consumer_stage, consumer_variant, (consumer, consumer_began, time.monotonic(), consumer_err),
                        folders, watcher, counts, refs)


def compare(folders: Folders, clean: Folders) -> dict[str, int]:
    """Rows lost, duplicated or different in each stage's output against the clean run's."""
    out: dict[str, int] = {}
    soak_rows, clean_rows = Counter(curated_rows(folders.cur)), Counter(curated_rows(clean.cur))
    out["curated_rows_lost"] = sum((clean_rows - soak_rows).values())
    out["curated_rows_duplicated"] = sum(n - 1 for n in soak_rows.values() if n > 1)
    out["curated_rows_extra"] = sum((soak_rows - clean_rows).values())
    got, want = journal_ids(folders.run), journal_ids(clean.run)
    out["regenerated_rows_lost"] = len(set(want) - set(got))
    out["regenerated_rows_duplicated"] = len(got) - len(set(got))
    out["regenerated_rows_extra"] = len(set(got) - set(want))
    answers = {r.id: r.model_dump_json() for r in read_regenerated(folders.run)}
    reference = {r.id: r.model_dump_json(exclude={"meta"}) for r in read_regenerated(clean.run)}
    out["regenerated_rows_different"] = sum(
        1 for rid, text in reference.items() if rid in answers and
        json.loads(answers[rid])["conversations"] != json.loads(text)["conversations"])
    for variant, name in ((0, "published_curated"), (1, "published_regenerated")):
        soak_ids, _ = published(folders.published(variant))
        clean_ids, _ = published(clean.published(variant))
        out[f"{name}_rows_lost"] = len(set(clean_ids) - set(soak_ids))
        out[f"{name}_rows_duplicated"] = len(soak_ids) - len(set(soak_ids))
        out[f"{name}_rows_extra"] = len(set(soak_ids) - set(clean_ids))
    out["train_export_missing"] = int(not (folders.draft / "export" / "config.json").is_file())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="How long to soak (default 10).")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS / "kill_soak.json")
    options = parser.parse_args()
    rng = random.Random(options.seed)  # the rounds' stages, delays and kills
    server, url = start_server()
    with tempfile.TemporaryDirectory(prefix="kill-soak-") as tmp:
        work = Path(tmp)
        env = {**os.environ, "DATAHUNT_HOME": str(work / "home"), "DATAHUNT_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
               "DATAHUNT_CONFIG": str(work / "none.toml"), "OMP_NUM_THREADS": "1"}
        manifests = write_manifests(work)
        clean = Folders(work / "clean", manifests, url, work / "target")
        subprocess.run([*CLI, *clean.args("curate", 0)], cwd=ROOT, env=env, check=True, capture_output=True)
        texts = [m["content"] for s in read_curated(clean.cur) for m in s.original_messages]
        tiny_target(work / "target", texts)
        took = pipeline(clean, env)
        curated_b = Folders(work / "clean-b", manifests, url, work / "target")
        subprocess.run([*CLI, *curated_b.args("curate", 1)], cwd=ROOT, env=env, check=True, capture_output=True)
        subprocess.run([*CLI, *curated_b.args("publish", 0)], cwd=ROOT, env=env, check=True, capture_output=True)
        refs = {"curated_sets": [(sorted(ids), sources) for ids, sources in
                                 (published(clean.published(0)), published(curated_b.published(0)))]}
        print(f"clean run: {', '.join(f'{k} {v:.1f} s' for k, v in took.items())}", flush=True)
        folders = Folders(work / "soak", manifests, url, work / "target")
        folders.root.mkdir()  # the folders every round shares
        watcher = Watcher([folders.cur, folders.run])
        watcher.start()
        counts: Counter[str] = Counter()
        started, rounds = time.monotonic(), 0
        while time.monotonic() - started < options.minutes * 60:
            soak_round(rng, folders, env, took, watcher, counts, refs)
            rounds += 1
            if rounds % 10 == 0:
                print(f"{rounds} rounds, {time.monotonic() - started:.0f} s: {dict(sorted(counts.items()))}",
                      flush=True)
        watcher.stop.set()
        soaked_s = time.monotonic() - started
        pipeline(folders, env)  # every stage once more to its end, on the soaked folders
        final = compare(folders, clean)
        sizes = {"curated": len(curated_rows(clean.cur)), "curated_one_source": len(curated_rows(curated_b.cur)),
                 "regenerated": len(journal_ids(clean.run))}
    server.shutdown()
    must_be_zero = {**final, **{k: counts[k] for k in ("torn_sets_consumed", "journal_duplicates_seen",
                                                        "refusals_not_naming_the_holder_in_one_line")}}
    result = {"minutes": round(soaked_s / 60, 2), "rounds": rounds, "seed": options.seed,
              "clean_run_s": {k: round(v, 1) for k, v in took.items()}, "counts": dict(sorted(counts.items())),
              "must_be_zero": dict(sorted(must_be_zero.items())), "all_zero": not any(must_be_zero.values()),
              "rows": sizes, "odd_refusals": refs.get("odd_refusals", [])}
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    if not result["all_zero"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
