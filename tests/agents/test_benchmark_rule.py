"""The one benchmark rule: its data file is the only place its patterns and penalties live, and the offline
index, the scorer and the verifier all ask it."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import agents.benchmark_rule as rule_module
from agents.benchmark_rule import BenchmarkRuleError, benchmark_rule, parse_benchmark_rule
from agents.categories import load_category
from agents.scoring import score_candidate
from agents.search.offline import OfflineIndex
from core.candidates import Candidate, DatasetMetadata
from core.types import Category, ReasonCode
from graph.suitability import check_benchmark
from graph.verifier import VerifyContext
from prompts import load_prompt

ROOT = Path(__file__).resolve().parents[2]
RULE_TEXT = load_prompt("rules/benchmark")


def candidate(hub_id: str, description: str = "", **meta: object) -> Candidate:
    return Candidate(hub_id=hub_id, description=description, categories=[Category.MATH],
                     metadata=DatasetMetadata.model_validate(meta))


def test_no_module_restates_a_benchmark_pattern_or_penalty() -> None:
    """The eval-family table, the section pattern and the two numbers lived in three modules (a near-copy of
    the section pattern in the offline index, 0.7 there and 0.8 in the scorer); now only the data file."""
    patterns = [m.group(1) for m in re.finditer(r"^- `([^`]+)`", RULE_TEXT, re.MULTILINE)]
    assert len(patterns) > 50
    names = {"EVAL_FAMILIES", "EVAL_ONLY_PENALTY", "BENCHMARK_DISCOUNT", "_BENCHMARK_SECTION", "_EVAL_SECTION"}
    for folder in ("agents", "graph", "curation", "server"):
        for path in (ROOT / folder).rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            docs = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}  # docstrings may name them
            strings = {n.value for n in ast.walk(tree)
                       if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs}
            assigned = {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) for t in n.targets
                        if isinstance(t, ast.Name)}
            assert not assigned & names, path
            for pattern in ("human[-_]?eval", "lm-eval task", r"(^|> ?|\d\.\d )benchmarks?\b", "gsm[-_]?8k"):
                assert not any(pattern in s for s in strings), (path, pattern)


def test_the_shipped_rule_parses_with_its_two_named_penalties() -> None:
    rule = benchmark_rule()
    assert (rule.search_penalty, rule.relevance_discount) == (0.7, 0.8)
    assert [f.name for f in rule.families if f.has_training_split] == [
        "SWE-bench", "GSM8K", "MATH", "APPS", "CodeXGLUE"]
    assert rule.family("openai/openai_humaneval").name == "HumanEval"  # type: ignore[union-attr]
    assert rule.family("camel-ai/math") is None


@pytest.mark.parametrize(("edit", "message"), [
    (lambda t: t.replace("## Index tags", "## Index labels"), "no '## Index tags' section"),
    (lambda t: t.replace("- `gpqa` eval only: GPQA", "- `gpqa` maybe: GPQA"), "'## Families': malformed line"),
    (lambda t: t.replace("- `sft`\n- `traject`", "- `sft(`\n- `traject`"), "'## Training names': bad pattern"),
    (lambda t: t.replace("search_penalty: 0.7", "search_penalty: 1.5"), "search_penalty and relevance_discount"),
    (lambda t: t.replace("- relevance_discount: 0.8\n", ""), "search_penalty and relevance_discount"),
])
def test_a_malformed_rule_file_fails_naming_its_section(edit: object, message: str) -> None:
    with pytest.raises(BenchmarkRuleError, match=re.escape(message)):
        parse_benchmark_rule(edit(RULE_TEXT))  # type: ignore[operator]


@pytest.fixture
def variant_rule(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The shipped rule with one more eval-only family (`toy-suite`) and other penalties, as a data file would
    give it: every stage must follow."""
    text = RULE_TEXT.replace("- `gpqa` eval only: GPQA",
                             "- `gpqa` eval only: GPQA\n- `^toy-suite$` eval only: ToySuite")
    text = text.replace("search_penalty: 0.7", "search_penalty: 0.5").replace("relevance_discount: 0.8",
                                                                              "relevance_discount: 0.4")
    monkeypatch.setattr(rule_module, "load_prompt", lambda name: text)
    benchmark_rule.cache_clear()
    yield
    benchmark_rule.cache_clear()


@pytest.mark.usefixtures("variant_rule")
def test_index_scorer_and_verifier_all_follow_the_rule_file() -> None:
    assert benchmark_rule().family("org/toy-suite").name == "ToySuite"  # type: ignore[union-attr]
    # the offline index: a record tagged `benchmark` keeps the file's search_penalty of its score
    index = OfflineIndex([{"id": "a/math-problems", "tags": ["benchmark"]}, {"id": "b/math-problems"}])
    ranked = dict(index.rank("math problems", limit=2))
    assert ranked["a/math-problems"] == pytest.approx(0.5 * ranked["b/math-problems"], rel=0.02)
    # the scorer: an eval-only set keeps the file's relevance_discount; the verifier blocks the new family
    math = load_category(Category.MATH)
    toy = candidate("org/toy-suite", "math word problems")
    benchmark, reason = score_candidate(toy, math)
    plain, _ = score_candidate(candidate("org/toy-suites", "math word problems"), math)
    assert "an evaluation benchmark" in reason
    assert benchmark == pytest.approx(0.4 * plain, abs=0.002)
    (found,) = check_benchmark(toy, VerifyContext())
    assert (found["code"], found["blocking"]) == (ReasonCode.BENCHMARK, True)
    assert "ToySuite evaluation family" in found["detail"]


def test_the_shipped_rule_is_back_after_a_variant() -> None:
    """The fixture leaves no variant behind: the next caller parses the shipped file again."""
    assert benchmark_rule().family("org/toy-suite") is None
    assert benchmark_rule().relevance_discount == 0.8
