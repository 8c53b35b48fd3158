"""A catalog the size of a real review: many datasets, each found by five categories in two campaigns, with the
verifier's reasons repeated across categories and long details, seeded through the store as campaigns would."""

from __future__ import annotations

from sqlalchemy import Engine

from curation.catalog import store

CATEGORIES = ["math", "code_review", "general_chat", "tool_use", "bug_fixing"]
CAMPAIGNS = ["c-older", "c-latest"]
SHARED_REASONS = [  # what every category's verifier says of the same dataset: the same words five times
    {"code": "license_unknown", "detail": "no license stated in the dataset card or in the Hub metadata",
     "blocking": False},
    {"code": "size_unknown", "detail": "the Hub reports no row count and the card states no size category",
     "blocking": False},
]


def category_reasons(category: str, n: int) -> list[dict[str, object]]:
    """The reasons one category's verdict gives dataset `n`: the shared ones, twice over (a verifier that
    repeated itself), and for most categories a long off-topic flag of its own."""
    own = {"code": "off_topic", "blocking": False,
           "detail": f"relevance to {category} is low: the description talks about " + "assorted things, " * 12}
    fields = {"code": "fields_unknown", "blocking": False,
              "detail": "no text field among " + ",".join(f"column_{k}_of_the_raw_export" for k in range(6))}
    return [*SHARED_REASONS, *SHARED_REASONS, fields, *([own] if n % 5 != CATEGORIES.index(category) else [])]


def hub_id(n: int) -> str:
    # Underscores do not break a line: a long id is one unbreakable word, as many Hub ids are.
    return f"acme/multi_turn_instruction_conversations_cleaned_{n:03d}"


def seed_large(engine: Engine, count: int = 120) -> None:
    """Fill the catalog with `count` datasets, each found by all five categories in each of two campaigns.

    Dataset 0 is one the verifier rejected (it needs override to approve); every other one it accepted."""
    with store.open_session(engine) as session:
        for campaign_id in CAMPAIGNS:
            store.create_campaign(session, categories=CATEGORIES, offline=True, backends=["offline"],
                                  campaign_id=campaign_id)
            runs = {c: store.start_run(session, campaign_id=campaign_id, category=c).id for c in CATEGORIES}
            verified = []
            for n in range(count):
                for category in CATEGORIES:
                    candidate = store.add_candidate(session, campaign_id=campaign_id, run_id=runs[category],
                                                    category=category, candidate={
                        "hub_id": hub_id(n), "title": f"Dataset {n:03d}: " + "a long title that keeps going " * 4,
                        "description": "about many things " * 30, "categories": [category],
                        "relevance": round(0.9 - n / (count * 2) - CATEGORIES.index(category) / 100, 4),
                        "format_guess": "sharegpt", "metadata": {"num_rows": 1000 + n},
                        "evidence": [{"backend": "offline", "query": f"{category} query {k}", "rank": k, "score": 1.0}
                                     for k in (1, 2, 3, 4)],
                    })
                    decision = "reject" if n == 0 else "accept"
                    reasons = category_reasons(category, n)
                    if n == 0:
                        reasons = [{"code": "gated", "detail": "the dataset is gated", "blocking": True}]
                    store.add_verdict(session, campaign_id=campaign_id, decision=decision, reasons=reasons,
                                      candidate_id=candidate.id)
                    verified.append((candidate, decision, reasons))
            store.upsert_entries(session, verified=verified)
            for run_id in runs.values():
                store.finish_run(session, run_id=run_id, status="succeeded", planner="deterministic", queries=[],
                                 results_per_backend={"offline": count}, candidates_found=count,
                                 candidates_accepted=count - 1, error=None, reasons=[])
            store.set_campaign_status(session, campaign_id=campaign_id, status="succeeded")
