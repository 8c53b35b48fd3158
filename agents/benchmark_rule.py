"""The one benchmark rule: whether a dataset is an evaluation set, and what that costs it at each stage door.

Training a draft on the prompts it is evaluated on inflates the very acceptance numbers datahunt reports, so
benchmarks must be told apart from training data before anything is approved. `BenchmarkRule` is that decision
in one object, like a datatrove filter: its parameters (the evaluation families, the name, tag, section and
description patterns, the two penalties) are data in `prompts/rules/benchmark.md`, read once by
`benchmark_rule()`, and it answers every stage that asks:

* the offline index (`agents/search/offline.py`): `index_weight` keeps `search_penalty` of the score of a
  snapshot record listed only as a benchmark (tagged `benchmark`, or every curated-list section naming it
  lists evaluation sets), unless its family has a real training split;
* the scorer (`agents/scoring.py`): `judge(candidate).eval_only` keeps `relevance_discount` of its relevance;
* the verifier (`graph/suitability.py`): `judge(candidate).reason()` blocks an eval-only set (offered as an
  eval set for decontamination) and flags a benchmark with a training split.

`judge` weighs evidence for "this is an evaluation set" (a family in the name, a `benchmark`/`evaluation` tag,
a listing under evaluation sections or lm-eval tasks, a description calling it a benchmark) against evidence
for "it is meant for training" (a family with a training split, a name, tags, listing or description saying
training). A set is eval only when nothing says training, or when an eval-only family or an "evaluation only"
description names it and its name does not say training.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from agents.errors import AgentError
from core.candidates import Candidate
from core.types import Reason, ReasonCode
from prompts import load_prompt

RULE_FILE = "rules/benchmark"
_SECTION = re.compile(r"^## (?P<title>.+?)\s*$(?P<body>.*?)(?=^## |\Z)", re.MULTILINE | re.DOTALL)
_ITEM = re.compile(r"^- `(?P<value>[^`]+)`$")
_FAMILY = re.compile(r"^- `(?P<pattern>[^`]+)` (?P<kind>eval only|training split): (?P<name>.+)$")
_PARAMETER = re.compile(r"^- (?P<name>[a-z_]+): (?P<value>[0-9.]+)$")
PENALTY_REASON = "an evaluation benchmark: ranked below training data"


class BenchmarkRuleError(AgentError, ValueError):
    """The benchmark rule's data file is missing a section or holds a malformed line or pattern."""


@dataclass(frozen=True)
class EvalFamily:
    """One evaluation family: its name, its pattern on the lower-cased dataset name, and whether it has a real
    training split people train on (GSM8K, MATH, APPS) or is evaluation only (HumanEval, MBPP, …)."""

    name: str
    pattern: re.Pattern[str]
    has_training_split: bool


@dataclass(frozen=True)
class BenchmarkFinding:
    """What the rule found in one record: evidence for evaluation, evidence for training, and the decision."""

    evidence: tuple[str, ...]
    training: tuple[str, ...]
    eval_only: bool

    def reason(self) -> Reason | None:
        """Return the verdict's reason: blocking for an eval-only set, a flag for a benchmark with a training
        split or a record that says training, None when nothing says benchmark."""
        if not self.evidence:
            return None
        why = "; ".join(self.evidence)
        if self.eval_only:
            detail = f"evaluation benchmark ({why}): not training data, offered as an eval set for decontamination"
            return Reason(code=ReasonCode.BENCHMARK.value, detail=detail, blocking=True)
        detail = (
            f"benchmark-related ({why}) but {self.training[0]}: train on its train split only, "
            "its test split is offered as an eval set"
        )
        return Reason(code=ReasonCode.BENCHMARK.value, detail=detail, blocking=False)


@dataclass(frozen=True)
class BenchmarkRule:
    """Whether a dataset is an evaluation benchmark, with the patterns and penalties of `prompts/rules/benchmark.md`."""

    families: tuple[EvalFamily, ...]
    eval_name: re.Pattern[str]
    training_name: re.Pattern[str]
    eval_tags: frozenset[str]
    index_tags: frozenset[str]
    training_tags: frozenset[str]
    eval_section: re.Pattern[str]
    training_section: re.Pattern[str]
    eval_text: re.Pattern[str]
    eval_only_text: re.Pattern[str]
    training_text: re.Pattern[str]
    search_penalty: float  # share of its index score a record listed only as a benchmark keeps
    relevance_discount: float  # share of its relevance an eval-only candidate keeps

    def family(self, hub_id: str) -> EvalFamily | None:
        """Return the first evaluation family the dataset's name belongs to, or None."""
        name = hub_id.split("/", 1)[-1].lower()
        return next((f for f in self.families if f.pattern.search(name)), None)

    def training_split_family(self, hub_id: str) -> str | None:
        """Return the name of the family with a real training split that the dataset's name belongs to, or None."""
        found = self.family(hub_id)
        return found.name if found is not None and found.has_training_split else None

    def judge(self, candidate: Candidate) -> BenchmarkFinding:
        """Return the evidence the candidate's record holds for evaluation and for training, and whether it is
        evaluation only."""
        name = candidate.hub_id.split("/", 1)[-1].lower()
        meta = candidate.metadata
        evidence: list[str] = []
        training: list[str] = []
        strong_eval = False  # an eval-only family, or a description saying evaluation only
        found = self.family(candidate.hub_id)
        if found is not None:
            evidence.append(f"{found.name} evaluation family")
            strong_eval = not found.has_training_split
            if found.has_training_split:
                training.append(f"{found.name} has a training split")
        elif self.eval_name.search(name):
            evidence.append("its name says benchmark/eval")
        tags = {t.lower() for t in [*meta.tags, *meta.task_categories]}
        if tags & self.eval_tags:
            evidence.append(f"tagged {', '.join(sorted(tags & self.eval_tags))}")
        eval_sections = [s for s in meta.sections if self.eval_section.search(s)]
        if eval_sections:
            evidence.append(f"listed under {eval_sections[0]!r}")
        if self.eval_only_text.search(candidate.description):
            evidence.append("its description says evaluation only")
            strong_eval = True
        elif self.eval_text.search(candidate.description):
            evidence.append("its description calls it a benchmark or evaluation set")
        name_says_training = bool(self.training_name.search(name))
        if name_says_training:
            training.append("its name says training data")
        if self.training_text.search(candidate.description):
            training.append("its description says it is for training")
        if tags & self.training_tags:
            training.append("tagged for training")
        if any(self.training_section.search(s) and not self.eval_section.search(s) for s in meta.sections):
            training.append("listed among training datasets")
        eval_only = bool(evidence) and ((strong_eval and not name_says_training) or not training)
        return BenchmarkFinding(evidence=tuple(evidence), training=tuple(training), eval_only=eval_only)

    def listed_only_as_benchmark(self, hub_id: str, tags: list[str], sections: list[str]) -> bool:
        """True when a snapshot record is tagged as a benchmark or every curated-list section naming it lists
        evaluation sets, unless its name belongs to a family with a real training split (GSM8K, CodeXGLUE)."""
        if self.training_split_family(hub_id) is not None:
            return False
        if {t.lower() for t in tags} & self.index_tags:
            return True
        return bool(sections) and all(self.eval_section.search(s) for s in sections)

    def index_weight(self, hub_id: str, tags: list[str], sections: list[str]) -> float:
        """Return the share of its offline-index score a snapshot record keeps: `search_penalty` when it is
        listed only as a benchmark, else 1."""
        return self.search_penalty if self.listed_only_as_benchmark(hub_id, tags, sections) else 1.0


def parse_benchmark_rule(text: str) -> BenchmarkRule:
    """Return the rule `text` (the layout of `prompts/rules/benchmark.md`) describes; raise BenchmarkRuleError
    naming the section when one is missing or holds a malformed line or pattern."""
    sections = {m["title"]: m["body"] for m in _SECTION.finditer(text)}

    def items(title: str, line: re.Pattern[str]) -> list[re.Match[str]]:
        if title not in sections:
            raise BenchmarkRuleError(f"the benchmark rule has no '## {title}' section")
        found = []
        for raw in sections[title].splitlines():
            if raw.startswith("- "):
                match = line.match(raw.strip())
                if match is None:
                    raise BenchmarkRuleError(f"'## {title}': malformed line {raw.strip()!r}")
                found.append(match)
        if not found:
            raise BenchmarkRuleError(f"'## {title}' lists nothing")
        return found

    def compiled(title: str, pattern: str, flags: int) -> re.Pattern[str]:
        try:
            return re.compile(pattern, flags)
        except re.error as exc:
            raise BenchmarkRuleError(f"'## {title}': bad pattern {pattern!r}: {exc}") from None

    def pattern(title: str, flags: int = re.IGNORECASE) -> re.Pattern[str]:
        alternatives = [m["value"] for m in items(title, _ITEM)]
        for alternative in alternatives:
            compiled(title, alternative, flags)
        return compiled(title, "|".join(f"(?:{a})" for a in alternatives), flags)

    def words(title: str) -> frozenset[str]:
        return frozenset(m["value"].lower() for m in items(title, _ITEM))

    families = tuple(
        EvalFamily(name=m["name"].strip(), pattern=compiled("Families", m["pattern"], 0),
                   has_training_split=m["kind"] == "training split")
        for m in items("Families", _FAMILY)
    )
    parameters = {m["name"]: float(m["value"]) for m in items("Parameters", _PARAMETER)}
    missing = {"search_penalty", "relevance_discount"} - parameters.keys()
    if missing or any(not 0.0 < v <= 1.0 for v in parameters.values()):
        raise BenchmarkRuleError(f"'## Parameters' needs search_penalty and relevance_discount in (0, 1]: {parameters}")
    return BenchmarkRule(
        families=families,
        eval_name=pattern("Evaluation names", 0),  # names are lower-cased before they are matched
        training_name=pattern("Training names", 0),
        eval_tags=words("Evaluation tags"),
        index_tags=words("Index tags"),
        training_tags=words("Training tags"),
        eval_section=pattern("Evaluation sections"),
        training_section=pattern("Training sections"),
        eval_text=pattern("Evaluation text"),
        eval_only_text=pattern("Evaluation-only text"),
        training_text=pattern("Training text"),
        search_penalty=parameters["search_penalty"],
        relevance_discount=parameters["relevance_discount"],
    )


@lru_cache(maxsize=1)
def benchmark_rule() -> BenchmarkRule:
    """Return the shipped benchmark rule (`prompts/rules/benchmark.md`), parsed once per process."""
    return parse_benchmark_rule(load_prompt(RULE_FILE))
