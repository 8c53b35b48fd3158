"""PII scrubbing: each kind of secret becomes its typed placeholder and is counted; ordinary text and code stay."""

from __future__ import annotations

from collections import Counter

import pytest

from curation.pii import scrub_record, scrub_text


@pytest.mark.parametrize(("text", "expected", "kind"), [
    ("write to jane.doe+news@mail.example.co.uk today", "write to <EMAIL> today", "email"),
    ("OPENAI_API_KEY=sk-proj-AbCdEf1234567890GhIjKlMn", "OPENAI_API_KEY=<API_KEY>", "openai_key"),
    ("login hf_abcdefghijklmnopqrstuvwxyzABCDEF12 now", "login <API_KEY> now", "hf_token"),
    ("ghp_123456789012345678901234567890abcdef", "<API_KEY>", "github_token"),
    ("github_pat_11ABCDEFG0123456789_abcdefghijkl", "<API_KEY>", "github_token"),
    ("aws AKIAIOSFODNN7EXAMPLE key", "aws <API_KEY> key", "aws_access_key"),
    ("slack xoxb-1234567890-abcdefghij", "slack <API_KEY>", "slack_token"),
    ("Authorization: Bearer abcdef0123456789abcdef.xyz", "Authorization: Bearer <TOKEN>", "bearer_token"),
    ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N", "<TOKEN>", "jwt"),
    ('client_secret: "Zx81kPq0LmN2vB7cR4tY"', 'client_secret: "<SECRET>"', "secret_assignment"),
    ("server at 10.20.30.40 is down", "server at <IP_ADDRESS> is down", "ip_address"),
    ("call +44 20 7946 0958 or (415) 555-0100", "call <PHONE> or <PHONE>", "phone"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----", "<PRIVATE_KEY>", "private_key"),
])
def test_each_kind_is_replaced_and_counted(text: str, expected: str, kind: str) -> None:
    counts: Counter[str] = Counter()
    assert scrub_text(text, counts) == expected
    assert set(counts) == {kind} and counts[kind] == expected.count("<")


@pytest.mark.parametrize("text", [
    "token = tokenizer(text, add_special_tokens=False)",
    "api_key = os.environ['OPENAI_API_KEY']",
    "bind to 127.0.0.1:8000 or 0.0.0.0, pin version 1.2.3",
    "the answer is 3.14159 and 2024-01-05 was a Friday; 12 * 365 = 4380",
    "password = input('password: ')",
    "task-run-2024 is sk-etched",
])
def test_ordinary_text_and_code_stay(text: str) -> None:
    counts: Counter[str] = Counter()
    assert scrub_text(text, counts) == text and not counts


def test_a_whole_record_is_scrubbed_at_any_depth() -> None:
    counts: Counter[str] = Counter()
    record = {"user": "a@b.io", "messages": [{"role": "user", "content": ["x", {"text": "mail c@d.org"}]}], "n": 3}
    assert scrub_record(record, counts) == {
        "user": "<EMAIL>", "messages": [{"role": "user", "content": ["x", {"text": "mail <EMAIL>"}]}], "n": 3}
    assert counts == {"email": 2}
