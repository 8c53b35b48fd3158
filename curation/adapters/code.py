"""Adapters for code datasets: code problems (HumanEval, MBPP), commits, code review, API-call tasks, SWE-bench issues.

Pure functions `record -> list[Message] | Drop`. The prompts they write are short fixed sentences so the
same dataset always yields the same text (byte-identical curation output depends on it).
"""

from __future__ import annotations

import ast
import re

from core.json_types import JSONObject
from curation.conversation import Drop, Message, message

MAX_DIFF_CHARS = 12_000


def code_problem(record: JSONObject) -> list[Message] | Drop:
    """HumanEval `{prompt, canonical_solution}` or MBPP `{text|prompt, code, test_list}` as a task and its solution."""
    solution = record.get("canonical_solution")
    given = record.get("prompt")
    if isinstance(solution, str) and isinstance(given, str):
        prompt = "Complete the following Python function.\n\n```python\n" + given + "```"
        answer = "```python\n" + given + solution + "```"
        return [message("user", prompt), message("assistant", answer)]
    task = record.get("text", record.get("prompt"))
    code = record.get("code")
    if not isinstance(task, str) or not isinstance(code, str):
        return Drop("missing_field", "code problem needs prompt/text and code (or canonical_solution)")
    tests = record.get("test_list") or []
    if not isinstance(tests, list):
        tests = [tests]  # one test given alone
    prompt = task
    if tests:
        prompt += "\nYour code should pass these tests:\n\n" + "\n".join(str(t) for t in tests)
    return [
        message("user", prompt),
        message("assistant", "```python\n" + code.replace("\r\n", "\n") + "\n```"),
    ]


def commit(record: JSONObject) -> list[Message] | Drop:
    """A commit `{diff, message}` as a "write the commit message" turn; diffs are cut at MAX_DIFF_CHARS."""
    diff = record.get("diff")
    msg = record.get("message", record.get("msg"))
    if not isinstance(diff, str) or not isinstance(msg, str):
        return Drop("missing_field", "commit row needs diff and message")
    if len(diff) > MAX_DIFF_CHARS:
        diff = diff[:MAX_DIFF_CHARS] + "\n[diff truncated]"
    prompt = "Write a concise commit message for the following change.\n\n```diff\n" + diff.rstrip() + "\n```"
    return [message("user", prompt), message("assistant", msg.strip())]


def code_review(record: JSONObject) -> list[Message] | Drop:
    """CodeReviewer `{patch, msg}` (code + reviewer comment) as a "review this change" turn."""
    patch = record.get("patch", record.get("code"))
    comment = record.get("msg", record.get("comment"))
    if not isinstance(patch, str) or not isinstance(comment, str):
        return Drop("missing_field", "code review row needs patch and msg")
    lang = record.get("lang") or ""
    prompt = f"Review the following {lang} change and write the reviewer's comment.".replace("  ", " ")
    prompt += "\n\n```diff\n" + patch.rstrip()[:MAX_DIFF_CHARS] + "\n```"
    return [message("user", prompt), message("assistant", comment.strip())]


def apibench(record: JSONObject) -> list[Message] | Drop:
    """Gorilla APIBench `code`: `###Instruction: … ###Output: <<<k>>>: v, …` or a `{'Instruction', 'Output'}`
    dict text."""
    text = record.get("code")
    if not isinstance(text, str) or "Instruction" not in text:
        return Drop("missing_field", "apibench row needs code with an Instruction")
    if text.lstrip().startswith("###"):
        head, _, rest = text.partition("###Output:")
        instruction = head.replace("###Instruction:", "", 1).strip()
        answer = re.sub(r",?\s*<<<(\w+)>>>:\s*", lambda m: "\n" + m.group(1) + ": ", rest).strip()
    else:
        head, _, rest = text.partition("'Output':")
        instruction = head.split("'Instruction':", 1)[-1].strip().strip("{},'\" ")
        answer = _output_text(rest.strip()[:-1].strip())
    if not instruction or not answer:
        return Drop("missing_field", "apibench row has an empty instruction or output")
    return [message("user", instruction), message("assistant", answer)]


def _output_text(literal: str) -> str:
    try:
        output = ast.literal_eval(literal)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return literal
    if isinstance(output, dict):
        return "\n".join(f"{key}: {value}" for key, value in output.items() if value)
    return str(output)


def swe_bench(record: JSONObject) -> list[Message] | Drop:
    """SWE-bench `{repo, problem_statement, patch}`: the issue as the prompt, the gold patch as the answer."""
    problem = record.get("problem_statement")
    patch = record.get("patch")
    if not isinstance(problem, str) or not isinstance(patch, str):
        return Drop("missing_field", "swe-bench row needs problem_statement and patch")
    prompt = f"Fix the following issue in the repository {record.get('repo', '')}.\n\n{problem.strip()}"
    return [message("user", prompt), message("assistant", "```diff\n" + patch.rstrip() + "\n```")]
