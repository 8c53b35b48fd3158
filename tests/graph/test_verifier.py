"""The verifier's checks on realistic records: rejections block with a reason code, unknowns only flag."""

from __future__ import annotations

import asyncio

import pytest
from campaign_fakes import FakeIndex, deliverable_for, good_metadata

from agents.scoring import OFF_TOPIC_BELOW
from core.candidates import Candidate, DatasetMetadata, Deliverable, Evidence, QueryRecord
from core.types import Category
from graph.verifier import (
    VerifyContext,
    check_duplicate,
    check_gated,
    check_license,
    check_size,
    check_text_fields,
    enrich,
    first_found_by,
    judge_candidate,
    judge_run,
    known_rows,
    lookup_existence,
)


def candidate(hub_id: str = "open-r1/OpenR1-Math-220k", *, backend: str = "offline", relevance: float = 0.8,
              category: Category = Category.MATH, **metadata: object) -> Candidate:
    return Candidate(
        hub_id=hub_id, title=hub_id.split("/")[-1], categories=[category], relevance=relevance,
        metadata=DatasetMetadata.model_validate(metadata),
        evidence=[Evidence(backend=backend, query="math reasoning", rank=1, score=2.0)],  # type: ignore[arg-type]
    )


def codes(reasons: list[dict[str, object]]) -> list[tuple[object, object]]:
    return [(r["code"], r["blocking"]) for r in reasons]


def test_a_clean_record_is_accepted_without_reasons() -> None:
    decision, reasons = judge_candidate(candidate(**good_metadata().model_dump()), VerifyContext(existence={
        "open-r1/OpenR1-Math-220k": "found"}))
    assert (decision, reasons) == ("accept", [])


def test_a_snapshot_record_with_unknowns_is_accepted_with_flags() -> None:
    decision, reasons = judge_candidate(candidate(), VerifyContext())
    assert decision == "accept"
    assert codes(reasons) == [("existence_unverified", False), ("license_unknown", False), ("size_unknown", False),
                              ("fields_unknown", False)]


@pytest.mark.parametrize(("license", "expected"), [
    ("apache-2.0", []),
    ("MIT", []),
    ("cc-by-nc-4.0", [("license_non_commercial", False)]),
    ("CC-BY-NC-SA-4.0", [("license_non_commercial", False)]),
    ("cc-by-nc-nd-4.0", [("license_restricted", True)]),
    ("other", [("license_restricted", True)]),
    ("CC BY-NC-ND 4.0", [("license_restricted", True)]),
    # research-only restricts use as CC BY-NC does: a flag, as `publish` and the catalog have always said
    ("research-only", [("license_non_commercial", False)]),
    ("Research use only", [("license_non_commercial", False)]),
    (None, [("license_unknown", False)]),
    ("unknown", [("license_unknown", False)]),
    ("not stated", [("license_unknown", False)]),
    # stated, but none datahunt knows: the catalog's licence risk says unknown, so the verdict flags it too
    ("c-uda", [("license_unknown", False)]),
])
def test_license_check(license: str | None, expected: list[tuple[str, bool]]) -> None:
    assert codes(check_license(candidate(license=license), VerifyContext())) == expected


@pytest.mark.parametrize("license", [
    None, "not stated", "apache-2.0", "MIT", "cc-by-nc-4.0", "CC BY-NC 4.0 (DATA_LICENSE); code Apache-2.0",
    "cc-by-nc-nd-4.0", "cc-by-nd-4.0", "other", "research-only", "academic use only", "Academic Free License v3.0",
    "fair-noncommercial-research-license", "NVIDIA Open Model License", "c-uda", "no derivatives allowed",
])
def test_the_verdict_and_the_catalogs_licence_risk_are_one_rule(license: str | None) -> None:
    """The verifier's licence reason and the class the catalog, approval and `publish` show are the same rule
    (`core/licenses.py`): they disagreed on research-only (restricted vs non-commercial), on `cc-by-nc-nd`
    (restricted vs non-commercial) and on unrecognised text (nothing vs unknown)."""
    from curation.catalog.models import CatalogEntry
    from curation.licenses import risky_sources

    expected = {"ok": [], "unknown": [("license_unknown", False)], "restricted": [("license_restricted", True)],
                "non_commercial": [("license_non_commercial", False)]}
    risk = CatalogEntry(hub_id="a/b", license=license).license_risk()
    assert codes(check_license(candidate(license=license), VerifyContext())) == expected[risk]
    assert [r[2] for r in risky_sources([{"hub_id": "a/b", "license": license}])] == ([] if risk == "ok" else [risk])


def test_gated_manual_rejects_by_policy_and_auto_flags() -> None:
    assert codes(check_gated(candidate(gated="manual"), VerifyContext())) == [("gated", True)]
    assert codes(check_gated(candidate(gated="manual"), VerifyContext(gated_manual_blocks=False))) == [("gated", False)]
    assert codes(check_gated(candidate(gated="auto"), VerifyContext())) == [("gated", False)]
    assert check_gated(candidate(gated=False), VerifyContext()) == []
    assert check_gated(candidate(gated=None), VerifyContext()) == []


def test_size_check_reads_rows_stated_sizes_and_size_categories() -> None:
    assert codes(check_size(candidate(num_rows=40), VerifyContext())) == [("too_small", True)]
    assert check_size(candidate(num_rows=220_000), VerifyContext()) == []
    assert known_rows(DatasetMetadata(size_stated="558k")) == 558_000
    assert known_rows(DatasetMetadata(size_stated="1.2M")) == 1_200_000
    assert known_rows(DatasetMetadata(size_stated="a lot")) is None
    assert codes(check_size(candidate(size_stated="50"), VerifyContext())) == [("too_small", True)]
    assert codes(check_size(candidate(size_category="n<1K"), VerifyContext())) == [("too_small", False)]
    assert check_size(candidate(size_category="100K<n<1M"), VerifyContext()) == []
    assert codes(check_size(candidate(), VerifyContext())) == [("size_unknown", False)]


def test_text_fields_check() -> None:
    assert check_text_fields(candidate(features=["problem", "solution", "source"]), VerifyContext()) == []
    assert check_text_fields(candidate(features=["conversations"]), VerifyContext()) == []
    assert (codes(check_text_fields(candidate(features=["image", "label"]), VerifyContext()))
            == [("no_text_fields", True)])
    assert codes(check_text_fields(candidate(features=None), VerifyContext())) == [("fields_unknown", False)]


def test_malformed_id_is_rejected_and_skips_the_other_checks() -> None:
    decision, reasons = judge_candidate(candidate("not a hub id"), VerifyContext())
    assert decision == "reject"
    assert codes(reasons) == [("malformed_id", True)]


def test_off_topic_rejects_below_the_threshold_with_the_scorers_reason() -> None:
    off = candidate(relevance=0.1, **good_metadata().model_dump())
    off.relevance_reason = "no category keyword in title or description"
    context = VerifyContext(existence={off.hub_id: "found"})
    assert context.off_topic_below == OFF_TOPIC_BELOW  # one threshold: the scorer's, which the campaign applies
    decision, reasons = judge_candidate(off, context)
    assert decision == "reject"
    assert codes(reasons) == [("off_topic", True)]
    assert "no category keyword" in str(reasons[0]["detail"])


def test_duplicates_across_categories_are_flagged_on_later_copies_only() -> None:
    first = first_found_by([deliverable_for(Category.CODE_REVIEW), deliverable_for(Category.MATH)])
    context = VerifyContext(first_found_by=first)
    shared_in_review = candidate("shared-org/everything-instruct", category=Category.CODE_REVIEW)
    shared_in_math = candidate("shared-org/everything-instruct", category=Category.MATH)
    assert check_duplicate(shared_in_review, context) == []
    flagged = check_duplicate(shared_in_math, context)
    assert codes(flagged) == [("duplicate", False)]
    assert "code_review" in str(flagged[0]["detail"])


def test_existence_lookup_found_missing_and_unknown() -> None:
    class Hub(FakeIndex):
        name = "hub"

    known = {"bigcode/commitpackft": DatasetMetadata(license="mit", num_rows=702_062)}
    web_only = [candidate("bigcode/commitpackft", backend="web"), candidate("ghost/none", backend="web"),
                candidate("open-r1/OpenR1-Math-220k", backend="offline")]
    online, metadata = asyncio.run(lookup_existence(web_only, [Hub(known)], timeout_s=1.0))
    assert online == {"bigcode/commitpackft": "found", "ghost/none": "missing", "open-r1/OpenR1-Math-220k": "found"}
    offline, _ = asyncio.run(lookup_existence(web_only, [FakeIndex(known)], timeout_s=1.0))
    assert offline["ghost/none"] == "unknown"  # the index not knowing it is not proof it does not exist
    enriched = enrich(candidate("bigcode/commitpackft", license="apache-2.0"), metadata["bigcode/commitpackft"])
    assert (enriched.metadata.license, enriched.metadata.num_rows) == ("apache-2.0", 702_062)


def test_lookup_errors_leave_existence_unknown() -> None:
    class Broken(FakeIndex):
        name = "hub"

        async def lookup(self, hub_id: str) -> DatasetMetadata | None:
            raise ConnectionError("hub down")

    answers, _ = asyncio.run(lookup_existence([candidate("a/b", backend="web")], [Broken()], timeout_s=1.0))
    assert answers == {"a/b": "unknown"}


def test_run_judgement_names_missing_empty_and_all_failed_deliverables() -> None:
    status, reasons = judge_run(None, "subagent raised RuntimeError: boom")
    assert status == "failed" and codes(reasons) == [("missing_deliverable", True)]
    assert "boom" in str(reasons[0]["detail"])
    status, reasons = judge_run(deliverable_for(Category.MATH, hub_ids=[]), None)
    assert status == "empty" and codes(reasons) == [("empty_deliverable", True)]
    failed = Deliverable(category=Category.MATH, queries=[
        QueryRecord(backend="hub", query="math", status="failed", attempts=3, error="HTTP 429")])
    status, reasons = judge_run(failed, None)
    assert status == "failed" and codes(reasons) == [("backend_failed", True)]
    partly = deliverable_for(Category.MATH)
    partly.queries.append(QueryRecord(backend="hub", query="math", status="failed", error="timed out"))
    status, reasons = judge_run(partly, None)
    assert status == "succeeded" and codes(reasons) == [("backend_failed", False)]


def test_the_verifier_keeps_the_verdict_the_branch_judged_and_judges_an_older_result_itself() -> None:
    """A run is judged once, where its deliverable comes back (`graph.branch`); the verifier carries that verdict
    and judges only a result written before verdicts travelled with it (an earlier release's checkpoint)."""
    from core.types import ReasonCode, RunStatus
    from graph.state import BranchResult
    from graph.verifier import reason, verify_run

    got = deliverable_for(Category.MATH)
    context = VerifyContext(existence={}, first_found_by={}, target_language="en")
    judged = BranchResult(category="math", run_id=1, deliverable=got.model_dump(mode="json"), error=None,
                          elapsed_s=1.0, status=RunStatus.EMPTY,
                          reasons=[reason(ReasonCode.EMPTY_DELIVERABLE, "as the branch saw it", blocking=True)])
    run = verify_run(judged, got, context, {})
    assert run["status"] == "empty" and [r["detail"] for r in run["reasons"]] == ["as the branch saw it"]
    assert len(run["candidates"]) == len(got.candidates)  # the candidates are still judged here, one by one
    older = BranchResult(category="math", run_id=1, deliverable=got.model_dump(mode="json"), error=None,
                         elapsed_s=1.0)
    assert verify_run(older, got, context, {})["status"] == "succeeded"
