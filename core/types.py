"""Types shared by every stage: the ten categories, Hub dataset ids, status and reason codes.

These are the vocabulary of the contracts in DESIGN.md; stages exchange them through artifacts and the
catalog, never through each other's internals.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import NotRequired

from typing_extensions import TypedDict  # pydantic reads TypedDicts from typing_extensions on Python 3.11


class Category(StrEnum):
    """The ten kinds of data a campaign hunts for. Each has a definition file in `prompts/categories/`."""

    CODE_REVIEW = "code_review"
    BUG_FIXING = "bug_fixing"
    CODE_EXPLANATION = "code_explanation"
    COMMIT_MESSAGES = "commit_messages"
    PULL_REQUESTS = "pull_requests"
    AGENTIC_TRAJECTORIES = "agentic_trajectories"
    REASONING = "reasoning"
    GENERAL_CHAT = "general_chat"
    TOOL_USE = "tool_use"
    MATH = "math"


class UnknownCategoryError(ValueError):
    """Raised for a category name that is not one of the ten."""


def parse_category(name: str) -> Category:
    """Return the Category for `name` (case and dashes forgiven), or raise UnknownCategoryError."""
    key = name.strip().lower().replace("-", "_")
    try:
        return Category(key)
    except ValueError:
        known = ", ".join(c.value for c in Category)
        close = difflib.get_close_matches(key, [c.value for c in Category], n=1, cutoff=0.6)
        hint = f" (did you mean `{close[0]}`?)" if close else ""
        raise UnknownCategoryError(f"unknown category {name!r}{hint}; known categories: {known}") from None


class RunStatus(StrEnum):
    """Life of one subagent run (DESIGN.md: SubagentRun)."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    EMPTY = "empty"
    FAILED = "failed"


class CampaignStatus(StrEnum):
    """Life of a campaign (DESIGN.md: the catalog's campaign row); the stored strings are these values."""

    PENDING = "pending"  # created, not started yet
    RUNNING = "running"
    SUCCEEDED = "succeeded"  # every category's latest run succeeded
    PARTIAL = "partial"  # some failed or came back empty
    FAILED = "failed"  # all did, or the graph itself broke
    INTERRUPTED = "interrupted"  # stopped by the user, or a resume failed: re-run its categories


# A campaign in one of these has stopped (its `finished_at` is stamped); one left in UNFINISHED by a crash or
# a restart is resumed from its checkpoint; one that COMPLETED cannot be resumed, only re-run per category.
FINAL_CAMPAIGN_STATUSES = frozenset(
    {CampaignStatus.SUCCEEDED, CampaignStatus.PARTIAL, CampaignStatus.FAILED, CampaignStatus.INTERRUPTED}
)
UNFINISHED_CAMPAIGN_STATUSES = frozenset({CampaignStatus.PENDING, CampaignStatus.RUNNING})
COMPLETED_CAMPAIGN_STATUSES = frozenset({CampaignStatus.SUCCEEDED, CampaignStatus.PARTIAL})


class EntryStatus(StrEnum):
    """Review state of a catalog entry."""

    PENDING_REVIEW = "pending_review"
    APPROVED = "approved"
    REJECTED = "rejected"


class Decision(StrEnum):
    """A verifier verdict."""

    ACCEPT = "accept"
    REJECT = "reject"


class ReasonCode(StrEnum):
    """Why the verifier rejected or flagged something. Flags go to the reviewer; rejections block."""

    EMPTY_DELIVERABLE = "empty_deliverable"
    MISSING_DELIVERABLE = "missing_deliverable"
    NOT_FOUND = "not_found"
    GATED = "gated"
    LICENSE_RESTRICTED = "license_restricted"
    LICENSE_NON_COMMERCIAL = "license_non_commercial"
    LICENSE_UNKNOWN = "license_unknown"
    TOO_SMALL = "too_small"
    SIZE_UNKNOWN = "size_unknown"
    DUPLICATE = "duplicate"
    OFF_TOPIC = "off_topic"
    NO_TEXT_FIELDS = "no_text_fields"
    FIELDS_UNKNOWN = "fields_unknown"
    EXISTENCE_UNVERIFIED = "existence_unverified"
    MALFORMED_ID = "malformed_id"
    BACKEND_FAILED = "backend_failed"
    BENCHMARK = "benchmark"  # an evaluation set: kept out of training, offered as a decontamination eval set
    RAW_CORPUS = "raw_corpus"  # raw text or code with no conversations or instructions
    LANGUAGE_MISMATCH = "language_mismatch"  # not in the target model's language
    MULTIMODAL = "multimodal"  # rows need images, video or audio: nothing a text target's draft can learn from
    DRAFT_RECIPE = "draft_recipe"  # a speculative-decoding draft-training recipe already trains on it (a note)


class Reason(TypedDict):
    """One reason behind a verdict or a run's status, as the catalog stores it (plain JSON) and the graph state
    carries it. Blocking reasons reject; the others are flags for the reviewer."""

    code: str  # a ReasonCode value
    detail: str  # human-readable: what was seen, quoted from the record where it helps
    blocking: bool
    category: NotRequired[str]  # on a catalog entry: the category whose verdict gave this reason


# Reasons that only say "nobody could check this" (typical offline): an accepted candidate with nothing else is
# "accepted, unverified", not flagged. `duplicate` only says another category found it too.
UNVERIFIED_CODES = frozenset(
    {ReasonCode.EXISTENCE_UNVERIFIED, ReasonCode.LICENSE_UNKNOWN, ReasonCode.SIZE_UNKNOWN, ReasonCode.FIELDS_UNKNOWN}
)
INFORMATIONAL_CODES = frozenset({ReasonCode.DUPLICATE, ReasonCode.DRAFT_RECIPE})


class VerdictLabel(StrEnum):
    """How a verdict reads to a reviewer; the campaign table and `catalog summary` both count these."""

    ACCEPTED = "accepted"  # accepted with no objection
    UNVERIFIED = "unverified"  # accepted; only things nobody could check (offline) are open
    FLAGGED = "flagged"  # accepted with a real flag for the reviewer (non-commercial license, benchmark split, …)
    EVAL_SET = "eval_set"  # blocked as an evaluation benchmark: offered for decontamination, not for training
    REJECTED = "rejected"  # blocked for any other reason


def label_verdict(reasons: Sequence[Reason] | Sequence[Mapping[str, object]]) -> VerdictLabel:
    """Return the label of a verdict from its reasons (`{"code", "blocking", …}`); blocking reasons reject."""
    blocking = [str(r.get("code")) for r in reasons if r.get("blocking")]
    if blocking:
        return VerdictLabel.EVAL_SET if blocking == [ReasonCode.BENCHMARK] * len(blocking) else VerdictLabel.REJECTED
    codes = {str(r.get("code")) for r in reasons} - INFORMATIONAL_CODES
    if not codes:
        return VerdictLabel.ACCEPTED
    return VerdictLabel.UNVERIFIED if codes <= UNVERIFIED_CODES else VerdictLabel.FLAGGED


# Hub repo ids: `owner/name`, each part letters, digits, '-', '_', '.', not starting or ending with '-'/'.',
# no '--' or '..', at most 96 characters for the name (huggingface_hub's validate_repo_id rules).
_HUB_PART = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?"
HUB_ID_PATTERN = re.compile(rf"^{_HUB_PART}/{_HUB_PART}$")
# The rules for one part (owner or name) as one regular expression Python and JSON Schema both read.
HUB_PART_SCHEMA_PATTERN = rf"^(?!.*--)(?!.*\.\.)(?!.*\n){_HUB_PART}$"
# A whole `owner/name` id by the same rules, for ids sent in a request body.
HUB_ID_SCHEMA_PATTERN = rf"^(?!.*--)(?!.*\.\.)(?!.*\n){_HUB_PART}/{_HUB_PART}$"


class MalformedHubIdError(ValueError):
    """Raised for a string that is not a valid `owner/name` Hub dataset id."""


def parse_hub_id(value: str) -> str:
    """Return `value` stripped if it is a valid `owner/name` Hub id, else raise MalformedHubIdError."""
    text = value.strip()
    if not HUB_ID_PATTERN.match(text) or "--" in text or ".." in text:
        raise MalformedHubIdError(f"malformed Hub dataset id {value!r}: expected 'owner/name'")
    return text


def is_hub_id(value: str) -> bool:
    """True when `value` is a valid `owner/name` Hub id."""
    try:
        parse_hub_id(value)
    except MalformedHubIdError:
        return False
    return True
