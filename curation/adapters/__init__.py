"""Format adapters: one pure function per dataset shape, chosen from the columns or named in the manifest.

`detect_format(columns)` returns an adapter name from the columns a dataset has (first rule that matches);
`Source.format` overrides it and `Source.field_mapping` (adapter field → dataset column) lets a dataset with
other column names use an existing adapter. `ADAPTERS[name](record)` returns the messages or a Drop;
`adapt` also links every tool result to the call it answers (`core.tool_calls.link_results`) and turns a tool
call that cannot be read into the row's Drop. `TOOL_READERS[name](record)` reads the row's `tools` schema for
the formats that carry one (`adapt_tools`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

from core.json_types import JSONObject, JSONValue
from core.tool_calls import Tool, ToolFormatError, link_results
from curation.adapters import agents, chat, code, plain_text, traffic
from curation.conversation import Drop, Message, tool_drop
from curation.errors import CurationError

logger = logging.getLogger(__name__)

Adapter = Callable[[JSONObject], "list[Message] | Drop"]

ADAPTERS: dict[str, Adapter] = {
    "alpaca": chat.alpaca,
    "self_instruct": chat.self_instruct,
    "sharegpt": chat.sharegpt,
    "openai_messages": chat.openai_messages,
    "prompt_completion": chat.prompt_completion,
    "qa": chat.qa,
    "prompt_only": chat.prompt_only,
    "code_problem": code.code_problem,
    "commit": code.commit,
    "code_review": code.code_review,
    "apibench": code.apibench,
    "swe_bench": code.swe_bench,
    "swe_agent_trajectory": agents.swe_agent_trajectory,
    "toolbench_answer": agents.toolbench_answer,
    "toolbench_query": agents.toolbench_query,
    "bfcl": agents.bfcl,
    "hh_transcript": plain_text.hh_transcript,
    "instruction_only": plain_text.instruction_only,
    "paired_lines": plain_text.paired_lines,
    "traffic_request": traffic.traffic_request,  # chosen by a manifest `kind: traffic` source, never detected
}

# The formats whose rows carry the tools they offer, and where each reads them.
TOOL_READERS: dict[str, Callable[[JSONObject], list[Tool] | None]] = {
    "sharegpt": chat.row_tools,
    "openai_messages": chat.row_tools,
    "toolbench_answer": agents.answer_tools,
    "bfcl": agents.bfcl_tools,
}

# (adapter, columns that must all be present), checked in order: the more specific shapes first.
DETECTION_RULES: tuple[tuple[str, frozenset[str]], ...] = (
    ("swe_agent_trajectory", frozenset({"history", "trajectory"})),
    ("toolbench_answer", frozenset({"answer_generation"})),
    ("toolbench_query", frozenset({"query", "api_list"})),
    ("bfcl", frozenset({"question", "function"})),
    ("swe_bench", frozenset({"problem_statement", "patch"})),
    ("code_problem", frozenset({"prompt", "canonical_solution"})),
    ("code_problem", frozenset({"code", "test_list"})),
    ("commit", frozenset({"diff", "message"})),
    ("code_review", frozenset({"patch", "msg"})),
    ("apibench", frozenset({"code", "api_call"})),
    ("sharegpt", frozenset({"conversations"})),
    ("openai_messages", frozenset({"messages"})),
    ("self_instruct", frozenset({"instruction", "instances"})),
    ("alpaca", frozenset({"instruction", "output"})),
    ("alpaca", frozenset({"instruction", "response"})),
    ("prompt_completion", frozenset({"prompt", "completion"})),
    ("prompt_completion", frozenset({"prompt", "response"})),
    ("qa", frozenset({"question", "answer"})),
    ("hh_transcript", frozenset({"chosen", "rejected"})),  # after sharegpt: a DPO row with conversations is one
    ("paired_lines", frozenset({"source_line", "target_line"})),
    ("prompt_only", frozenset({"turns"})),
    ("prompt_only", frozenset({"text", "question_id"})),
    ("instruction_only", frozenset({"instruction"})),  # last: any answer column makes it one of the above
)


class FormatError(CurationError, ValueError):
    """No adapter fits a dataset, or a field mapping names columns the dataset does not have."""


def detect_format(columns: Iterable[str]) -> str | None:
    """Return the adapter name for a dataset with these columns, or None when no rule matches."""
    present = set(columns)
    for name, needed in DETECTION_RULES:
        if needed <= present:
            return name
    return None


def apply_mapping(record: Mapping[str, JSONValue], mapping: Mapping[str, str]) -> JSONObject:
    """Return `record` with each mapped column also available under its adapter field name."""
    if not mapping:
        return dict(record)
    out = dict(record)
    for field, column in mapping.items():
        if column in record:
            out[field] = record[column]
    return out


# Format names the catalog's guesser writes that are hints, not adapters: the columns decide.
FORMAT_HINTS = frozenset({"trajectories", "tool_calls", "commits", "preference", "code", "other", "unknown"})


def _fits(fmt: str, columns: set[str]) -> bool:
    rules = [needed for name, needed in DETECTION_RULES if name == fmt]
    return not rules or any(needed <= columns for needed in rules)


def resolve_format(columns: Iterable[str], fmt: str | None, mapping: Mapping[str, str], where: str) -> str:
    """Return the adapter to use for a dataset, or raise FormatError naming the columns available.

    A named adapter is used when the columns (with the mapping) fit it; when they do not and the columns
    fit another adapter, that one is used and a warning logged (catalog manifests carry guessed formats).
    Catalog hints that are not adapter names (`commits`, `trajectories`, …) leave the choice to the columns.
    """
    available = sorted(set(columns))
    missing = [col for col in mapping.values() if col not in available]
    if mapping and missing:
        raise FormatError(
            f"{where}: field_mapping names columns {missing} not in the data; columns are {available}"
        )
    mapped = set(available) | set(mapping)
    if fmt is not None and fmt not in FORMAT_HINTS:
        if fmt not in ADAPTERS:
            raise FormatError(
                f"{where}: unknown format {fmt!r}; known formats: {', '.join(sorted(ADAPTERS))}"
            )
        if mapping or _fits(fmt, mapped) or detect_format(mapped) is None:
            return fmt
        logger.warning(
            "%s: columns %s do not fit format %r; using %r", where, available, fmt, detect_format(mapped)
        )
    detected = detect_format(mapped)
    if detected is None:
        raise FormatError(
            f"{where}: no adapter matches columns {available}; set `format` and `field_mapping` in the manifest"
        )
    return detected


def adapt(record: Mapping[str, JSONValue], fmt: str, mapping: Mapping[str, str]) -> list[Message] | Drop:
    """Return the conversation for one record, each tool result naming its call, or the Drop its adapter gave
    (a tool call or result that cannot be read: the reason `core.tool_calls` names)."""
    try:
        result = ADAPTERS[fmt](apply_mapping(record, mapping))
        return result if isinstance(result, Drop) else link_results(result)  # type: ignore[return-value]
    except ToolFormatError as exc:
        return tool_drop(exc)


def adapt_tools(record: Mapping[str, JSONValue], fmt: str, mapping: Mapping[str, str]) -> list[Tool] | Drop | None:
    """Return the tools schema one record offers (None for a format or row without one), or the Drop of a
    schema that cannot be read (not a list: `tools_not_list`)."""
    reader = TOOL_READERS.get(fmt)
    if reader is None:
        return None
    try:
        return reader(apply_mapping(record, mapping))
    except ToolFormatError as exc:
        return tool_drop(exc)
