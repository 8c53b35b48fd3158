"""The gate a retrained draft passes before it replaces the deployed one: better overall, worse nowhere.

Both drafts are measured the same way on the same held-out prompts (the team's own traffic, later than
anything the candidate trained on): greedy chain-k speculative decoding over the same target, per prompt set,
by the evaluator `datahunt curve` uses (`training.curve.evaluate.DecodeEvaluator`). The rule (`judge_gate`):

- overall (every set pooled, token-weighted), the candidate's acceptance length is at least (1 + margin) times
  the deployed draft's;
- no set's acceptance length falls more than `tolerance` (relative) below the deployed draft's;
- no position-0 acceptance, pooled or per set, falls more than `tolerance` (relative) below the deployed's:
  a fine-tune on production data that lifts the mean while position 0 collapses has been reported in the
  field, and position 0 is where a draft's errors cost every round.

The verdict and its table go into the candidate's folder (`gate.json`, `core.gate_verdict`; `gate.md`), with
the sha256 of both drafts' weights, so the serving commands can tell a verdict that no longer matches.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path

from core.gate_verdict import (
    GATE_FILE,
    GATE_TABLE,
    GateRule,
    GateVerdict,
    GateVerdictError,
    SetComparison,
    read_gate_verdict,
)
from training.atomic_files import write_file
from training.curve.evaluate import SetScore
from training.errors import TrainingError
from training.expectations import file_sha256

WEIGHTS_FILE = "model.safetensors"
OVERALL = "overall"


class GateError(TrainingError, ValueError):
    """A gate that cannot be run: a folder that is not a draft, or the candidate and deployed being one folder."""


def position0(score: SetScore) -> float:
    """The score's position-0 acceptance (0 when it has no positions)."""
    return score.per_position_accept[0] if score.per_position_accept else 0.0


def pool(scores: Mapping[str, SetScore]) -> SetScore:
    """Every set pooled: AL = Σ tokens / Σ rounds; position 0 weighted by rounds (every round tries position 0)."""
    rounds = sum(s.rounds for s in scores.values())
    tokens = sum(s.tokens for s in scores.values())
    p0 = sum(position0(s) * s.rounds for s in scores.values()) / rounds if rounds else 0.0
    return SetScore(prompts=sum(s.prompts for s in scores.values()), accept_length=round(tokens / max(1, rounds), 4),
                    rounds=rounds, tokens=tokens, per_position_accept=[round(p0, 4)])


def _change(new: float, old: float) -> float:
    return round((new - old) / old, 4) if old else 0.0


def compare(name: str, candidate: SetScore, deployed: SetScore) -> SetComparison:
    """One row of the table."""
    return SetComparison(name=name, prompts=candidate.prompts, candidate_accept_length=candidate.accept_length,
                         deployed_accept_length=deployed.accept_length, candidate_position0=position0(candidate),
                         deployed_position0=position0(deployed),
                         accept_length_change=_change(candidate.accept_length, deployed.accept_length),
                         position0_change=_change(position0(candidate), position0(deployed)))


def judge_gate(candidate: Mapping[str, SetScore], deployed: Mapping[str, SetScore], rule: GateRule
               ) -> tuple[bool, list[str], SetComparison, list[SetComparison]]:
    """The rule above: (passed, each failed condition in a sentence, the overall row, the rows per set)."""
    missing = sorted(set(candidate) ^ set(deployed))
    if missing:
        raise GateError(f"the two drafts were measured on different sets ({', '.join(missing)})")
    overall = compare(OVERALL, pool(candidate), pool(deployed))
    rows = [compare(name, candidate[name], deployed[name]) for name in sorted(candidate)]
    reasons = []
    if overall.accept_length_change < rule.margin:
        reasons.append(f"overall acceptance length {overall.candidate_accept_length:.3f} vs deployed "
                       f"{overall.deployed_accept_length:.3f} ({overall.accept_length_change:+.1%}) is not better by "
                       f"the required {rule.margin:.1%}")
    for row in [overall, *rows]:
        if row is not overall and row.accept_length_change < -rule.tolerance:
            reasons.append(f"set {row.name}: acceptance length {row.candidate_accept_length:.3f} vs deployed "
                           f"{row.deployed_accept_length:.3f} ({row.accept_length_change:+.1%}) regresses beyond "
                           f"the {rule.tolerance:.1%} tolerance")
        if row.position0_change < -rule.tolerance:
            reasons.append(f"{'pooled' if row is overall else 'set ' + row.name} position-0 acceptance "
                           f"{row.candidate_position0:.3f} vs deployed {row.deployed_position0:.3f} "
                           f"({row.position0_change:+.1%}) regresses beyond the {rule.tolerance:.1%} tolerance")
    return not reasons, reasons, overall, rows


def table(verdict: GateVerdict) -> str:
    """`gate.md`: the verdict, the rule, and one row per set."""
    lines = [f"# Gate: {'PASSED' if verdict.passed else 'FAILED'}", "",
             f"Candidate `{verdict.candidate}` against deployed `{verdict.deployed}` on `{verdict.prompts_file}` "
             f"({verdict.evaluator}), {verdict.measured_at}.", "",
             f"Rule: overall acceptance length at least {verdict.rule.margin:+.1%} over the deployed draft's; no "
             f"set's acceptance length and no position-0 acceptance more than {verdict.rule.tolerance:.1%} below it.",
             "", "| set | prompts | AL candidate | AL deployed | change | pos-0 candidate | pos-0 deployed | change |",
             "|---|---|---|---|---|---|---|---|"]
    for row in [verdict.overall, *verdict.sets]:
        lines.append(f"| {row.name} | {row.prompts} | {row.candidate_accept_length:.3f} | "
                     f"{row.deployed_accept_length:.3f} | {row.accept_length_change:+.1%} | "
                     f"{row.candidate_position0:.3f} | {row.deployed_position0:.3f} | {row.position0_change:+.1%} |")
    if verdict.reasons:
        lines += ["", "Why it failed:", "", *[f"- {reason}" for reason in verdict.reasons]]
    return "\n".join(lines) + "\n"


Measure = Callable[[Path], Mapping[str, SetScore]]


def run_gate(candidate: Path, deployed: Path, prompts: Path, measure: Measure, rule: GateRule,
             evaluator: str) -> GateVerdict:
    """Measure both drafts with `measure` (the same evaluator, the same prompts), judge, and write `gate.json`
    and `gate.md` into the candidate's folder; return the verdict."""
    for folder in (candidate, deployed):
        if not (folder / "config.json").is_file() or not (folder / WEIGHTS_FILE).is_file():
            raise GateError(f"{folder} is not an exported draft (config.json and {WEIGHTS_FILE})")
    if candidate.resolve() == deployed.resolve():
        raise GateError("--candidate and --deployed are the same folder")
    passed, reasons, overall, rows = judge_gate(measure(candidate), measure(deployed), rule)
    verdict = GateVerdict(passed=passed, reasons=reasons, rule=rule, overall=overall, sets=rows,
                          candidate=str(candidate), deployed=str(deployed),
                          candidate_weights_sha256=file_sha256(candidate / WEIGHTS_FILE),
                          deployed_weights_sha256=file_sha256(deployed / WEIGHTS_FILE),
                          prompts_file=prompts.name, prompts_sha256=file_sha256(prompts), evaluator=evaluator,
                          measured_at=datetime.now(UTC).isoformat(timespec="seconds"))
    write_file(candidate / GATE_TABLE, table(verdict).encode("utf-8"))
    write_file(candidate / GATE_FILE, (verdict.model_dump_json(indent=2) + "\n").encode("utf-8"))
    return verdict


def gate_warning(draft: Path) -> str | None:
    """A warning for serving `draft` without a passed gate for its present weights; None when it has one."""
    try:
        verdict = read_gate_verdict(draft)
    except GateVerdictError as exc:
        return f"{exc}: serve it only after `datahunt gate` passes"
    if verdict is None:
        return (f"{draft} has no gate verdict: before it replaces a deployed draft, run `datahunt gate --candidate "
                f"{draft} --deployed DEPLOYED --prompts HELDOUT --target TARGET`")
    weights = draft / WEIGHTS_FILE
    if weights.is_file() and file_sha256(weights) != verdict.candidate_weights_sha256:
        return f"{draft}'s gate verdict was given to other weights than it holds now: run `datahunt gate` again"
    if not verdict.passed:
        return f"{draft} FAILED its gate against {verdict.deployed}: " + "; ".join(verdict.reasons)
    return None
