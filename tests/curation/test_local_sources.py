"""Target-written and traffic sources: manifest entries like any dataset, through dedup, decontamination and the mix,
counted per source; a traffic source's planted API keys and e-mails never reach any file under OUT."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from core.settings import get_settings
from curation.adapters.traffic import traffic_request
from curation.conversation import Drop
from curation.manifest import ManifestError, load_manifest
from curation.pipeline import curate

EVAL_QUESTION = (
    "A farmer has seventeen sheep and all but nine run away through a hole in the fence; "
    "how many sheep does the farmer still have in the field at the end of the day?"
)
SECRETS = [
    "sk-proj-Q7fLm2XkT9vBn4RsWc8YhJd3",  # OpenAI
    "jane.roe@example-corp.com",
    "hf_ZyXwVuTsRqPoNmLkJiHgFeDcBa9876543210",
    "AKIAZ3XK7QW2ER5TY8UI",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1c2VyLTQyIn0.c2lnbmF0dXJlLXZhbHVlLWhlcmU",
    "ops-oncall@team.example.org",
    "ghp_abcdefghijklmnopqrstuvwxyz0123456789AB",
]


def _body(user: str, system: str | None = None) -> dict[str, object]:
    messages = [{"role": "system", "content": system}] if system else []
    return {"model": "target", "temperature": 0.7, "messages": [*messages, {"role": "user", "content": user}]}


def _traffic_rows() -> list[dict[str, object]]:
    return [
        _body(f"My key is {SECRETS[0]}; please explain why my client gets 401 from the chat endpoint every time.",
              system=f"Support bot. Escalate to {SECRETS[5]} when stuck."),
        {"request": _body(f"Write a short apology e-mail to {SECRETS[1]} about the delayed shipment of her order."),
         "response": {"choices": [{"message": {"role": "assistant",
                                               "content": f"Dear Jane ({SECRETS[1]}), we are sorry for the delay."}}]}},
        {"body": _body(f"Why does `huggingface-cli login --token {SECRETS[2]}` fail inside my docker build step?"),
         "status": 200},
        {"request": {"body": _body(f"Rotate AWS access key {SECRETS[3]} with boto3 and explain each call.")}},
        {"request": {"prompt": f"complete this: Authorization: Bearer {SECRETS[4]}"}},  # not a chat request
        _body("   ", system=f"token holder {SECRETS[6]}"),  # empty user turn: dropped, drop file scrubbed
        _body(f"{EVAL_QUESTION} Reply with a number only. My mail: {SECRETS[5]}"),  # contaminated
        _body("Give me three tips for naming variables in a large Python codebase, with one example each."),
    ]


def _written_rows() -> list[dict[str, object]]:
    prompts = [
        "What are some good ways to stay focused while working from home with small children around?",
        "Give me three tips for naming variables in a large Python codebase, with one example each.",  # in traffic
        "What are some good ways to stay focused while working from home with small children around?",  # exact dup
        f"Quick riddle for you: {EVAL_QUESTION}",  # contaminated
        "Can you recommend a weekly meal plan for a vegetarian runner training for a half marathon?",
    ]
    return [{"id": f"general_chat-{i:05d}", "category": "general_chat",
             "messages": [{"role": "user", "content": p}], "meta": {"topic": "everyday life"}}
            for i, p in enumerate(prompts)]


def _jsonl(path: Path, rows: list[dict[str, object]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A manifest folder with a traffic log and a target-written prompt file, and a mirror holding one eval set."""
    mirror = tmp_path / "mirror"
    _jsonl(mirror / "bench/test.jsonl", [{"question": EVAL_QUESTION, "answer": "9"}])
    (mirror / "MIRROR.json").write_text("[]")
    root = tmp_path / "project"
    _jsonl(root / "logs/requests.jsonl", _traffic_rows())
    _jsonl(root / "written/general_chat.jsonl", _written_rows())
    manifest = {
        "schema_version": 1,
        "mirror": str(mirror),
        "sources": [
            {"kind": "traffic", "path": "logs/requests.jsonl", "category": "general_chat"},
            {"kind": "target-written", "path": "written/general_chat.jsonl", "category": "general_chat"},
        ],
        "eval_sets": [{"name": "bench", "data_files": ["bench/test.jsonl"]}],
    }
    (root / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return root


def _texts_under(folder: Path) -> dict[Path, str]:
    """Every file under `folder` as text: gzip unpacked, Parquet decoded to its rows (compressed bytes hide text)."""
    out: dict[Path, str] = {}
    for path in folder.rglob("*"):
        if not path.is_file():
            continue
        data = path.read_bytes()
        if path.name.endswith(".gz"):
            data = gzip.decompress(data)
        if path.suffix == ".parquet":
            data = json.dumps(pq.read_table(path).to_pylist(), default=str).encode()
        out[path] = data.decode("utf-8", errors="replace")
    return out


def _assert_no_secret(folder: Path) -> int:
    texts = _texts_under(folder)
    leaks = {str(p): s for p, text in texts.items() for s in SECRETS if s in text}
    assert not leaks, f"planted secrets reached files: {leaks}"
    return len(texts)


def test_traffic_and_target_written_sources_are_curated_and_counted(project: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    manifest = load_manifest(project / "manifest.json")
    report = curate(manifest, out, settings=get_settings(), jsonl=True, sources_root=project).report

    traffic = report.per_source["traffic/requests"]
    written = report.per_source["target-written/general_chat"]
    assert (traffic.kind, written.kind) == ("traffic", "target-written")
    assert traffic.rows_in == 8 and written.rows_in == 5
    assert traffic.drops == {"empty_turn": 1, "not_chat": 1}
    assert traffic.scrubbed == {"aws_access_key": 1, "email": 4, "github_token": 1, "hf_token": 1, "jwt": 1,
                                "openai_key": 1}
    assert written.scrubbed == {}
    # Dedup inside and across sources, decontamination against the eval set, like any dataset.
    assert (written.duplicates, traffic.duplicates) == (2, 0)  # its own copy, and the one traffic had first
    assert traffic.decontaminated == 1 and written.decontaminated == 1
    assert traffic.selected == 5 and written.selected == 2
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    by_source = {s["source"]["dataset"] for s in samples}
    assert by_source == {"traffic/requests", "target-written/general_chat"}
    apology = next(s for s in samples if "apology" in s["messages"][0]["content"])
    assert "<EMAIL>" in apology["messages"][0]["content"]
    assert apology["original_messages"][-1]["role"] == "assistant"  # the logged answer, kept as the original
    assert all(s["needs_regeneration"] for s in samples)
    summary = (out / "summary.md").read_text()
    assert "## Target-written and traffic sources" in summary and "openai_key 1" in summary
    # Nothing under OUT (shards, samples, staging cache, drop files, decontamination log, report) holds a secret,
    # nor anything under the datahunt home (no `datasets` cache of the raw log).
    assert _assert_no_secret(out) >= 8
    _assert_no_secret(get_settings().home)
    dropped = [json.loads(line) for p in (out / "dropped").glob("traffic_*.jsonl")
               for line in p.read_text().splitlines()]
    empty = next(d for d in dropped if d["reason"] == "empty_turn")
    assert empty["messages"][0]["content"] == "token holder <API_KEY>"  # the drop file holds the scrubbed row


def test_engine_scrubs_and_counts_like_the_local_run(project: Path, tmp_path: Path) -> None:
    from curation.engine import curate_on

    manifest = load_manifest(project / "manifest.json")
    local = curate(manifest, tmp_path / "local", settings=get_settings(), sources_root=project).report
    engine = curate_on("datatrove", manifest, tmp_path / "engine", settings=get_settings(), workers=1,
                       sources_root=project).report
    assert engine.per_source == local.per_source
    assert engine.rows_out == local.rows_out
    _assert_no_secret(tmp_path / "engine")


def test_local_source_paths_stay_inside_the_manifest_folder(project: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.jsonl"
    _jsonl(outside, _traffic_rows())
    (project / "link.jsonl").symlink_to(outside)
    raw = json.loads((project / "manifest.json").read_text())
    for path in ("../elsewhere.jsonl", "link.jsonl", "missing.jsonl"):
        raw["sources"] = [{"kind": "traffic", "path": path, "category": "general_chat"}]
        (project / "manifest.json").write_text(json.dumps(raw))
        report = curate(load_manifest(project / "manifest.json"), tmp_path / "out", settings=get_settings(),
                        sources_root=project).report
        error = report.per_source[report.failed_sources[0]].error or ""
        assert ("outside the manifest's folder" in error) if path != "missing.jsonl" else ("does not exist" in error)


def test_manifest_rules_for_local_sources(tmp_path: Path) -> None:
    def load(source: dict[str, object]) -> object:
        path = tmp_path / "m.json"
        path.write_text(json.dumps({"schema_version": 1, "sources": [source]}))
        return load_manifest(path)

    with pytest.raises(ManifestError, match="needs `path`"):
        load({"kind": "traffic", "hub_id": "team/logs", "category": "general_chat"})
    with pytest.raises(ManifestError, match="not 'sharegpt'"):
        load({"kind": "traffic", "path": "a.jsonl", "format": "sharegpt", "category": "general_chat"})
    with pytest.raises(ManifestError, match="dataset uses data_files"):
        load({"hub_id": "a/b", "path": "a.jsonl", "category": "general_chat"})
    named = load({"kind": "traffic", "path": "logs/2024-06.requests.jsonl", "category": "tool_use"})
    assert named.sources[0].key == "traffic/2024_06"  # type: ignore[attr-defined]


def test_traffic_adapter_shapes() -> None:
    body = _body("hello there, how are you doing today?")
    assert traffic_request(body) == [{"role": "user", "content": "hello there, how are you doing today?"}]
    assert traffic_request({"request": {"body": body}}) == traffic_request(body)
    answered = traffic_request({"request": body,
                                "response": {"body": {"choices": [{"message": {"content": "Fine."}}]}}})
    assert isinstance(answered, list) and answered[-1] == {"role": "assistant", "content": "Fine."}
    assert traffic_request({"prompt": "x"}) == Drop("not_chat", "a completions request (prompt), not a chat request "
                                                                "(messages)")
    assert isinstance(traffic_request({"status": 500}), Drop)


def test_curate_command_reads_local_sources_beside_its_manifest(project: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from server.cli import app

    out = tmp_path / "cli-out"
    result = CliRunner().invoke(app, ["curate", "--manifest", str(project / "manifest.json"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    assert report["per_source"]["traffic/requests"]["scrubbed"]["openai_key"] == 1
    checked = CliRunner().invoke(app, ["curate", "--manifest", str(project / "manifest.json"), "--out", str(out),
                                       "--check", "--json"])
    assert [r["where"] for r in json.loads(checked.stdout) if r["kind"] == "source"] == ["file", "file"]
    _assert_no_secret(out)
