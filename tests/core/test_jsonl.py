"""The one JSONL reader: rows split on "\n" only, whatever line separators their strings hold."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from core.jsonl import JsonlError, iter_jsonl, parse_jsonl, read_jsonl, split_records

TRICKY = "a\u2028b\u2029c\rd\x85e\x1cf"  # every separator str.splitlines() honours, besides "\n"


def _rows() -> list[dict[str, object]]:
    return [{"id": "1", "text": TRICKY}, {"id": "2", "text": "plain"}]


def _write(path: Path, rows: list[dict[str, object]], newline: str = "\n") -> None:
    text = "".join(json.dumps(r, ensure_ascii=False) + newline for r in rows)
    assert "\u2028" in text  # the separator is written raw, as datasets and ensure_ascii=False do
    path.write_bytes(text.encode("utf-8"))


def test_a_row_holding_line_separators_reads_back_whole(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    _write(path, _rows())
    assert len(path.read_text(encoding="utf-8").splitlines()) > 2  # the bug this reader exists for
    assert read_jsonl(path) == _rows()


def test_raw_carriage_return_inside_a_line_does_not_split_it(tmp_path: Path) -> None:
    path = tmp_path / "raw.jsonl"
    # a raw "\r" between tokens is JSON whitespace; text-mode files would split the line there
    path.write_bytes(b'{"id": "1",\r "text": "x\xe2\x80\xa8y"}\n{"id": "2"}\n')
    assert [v["id"] for v in read_jsonl(path)] == ["1", "2"]


def test_crlf_files_and_blank_lines_are_read_with_line_numbers(tmp_path: Path) -> None:
    path = tmp_path / "crlf.jsonl"
    _write(path, _rows(), newline="\r\n\n")
    numbered = list(iter_jsonl(path))
    assert [n for n, _ in numbered] == [1, 3]
    assert [v for _, v in numbered] == _rows()


def test_gzip_files_are_read_transparently(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl.gz"
    path.write_bytes(gzip.compress("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in _rows()).encode()))
    assert read_jsonl(path) == _rows()


def test_text_in_memory_splits_the_same_way() -> None:
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in _rows())
    assert [v for _, v in parse_jsonl(text)] == _rows()
    assert len(split_records(text)) == 2


def test_a_bad_line_is_named_by_path_and_number(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": 1}\n\n{"id": \n', encoding="utf-8")
    with pytest.raises(JsonlError, match=r"bad\.jsonl:3: not valid JSON"):
        read_jsonl(path)


def test_objects_only_refuses_a_list_line() -> None:
    with pytest.raises(JsonlError, match="<text>:2: expected a JSON object"):
        list(parse_jsonl('{"a": 1}\n[1, 2]\n', objects=True))


def test_invalid_utf8_follows_the_decoding_policy(tmp_path: Path) -> None:
    path = tmp_path / "bytes.jsonl"
    path.write_bytes(b'{"t": "ok"}\n{"t": "\xff"}\n')
    with pytest.raises(JsonlError, match=r"bytes\.jsonl:2: not UTF-8 \(byte 0xff at byte 8 of the line\)"):
        read_jsonl(path)  # strict: a one-line error naming the line, not a traceback from the codec
    assert read_jsonl(path, errors="replace") == [{"t": "ok"}, {"t": "\ufffd"}]


def test_a_truncated_gzip_file_is_a_jsonl_error_naming_it(tmp_path: Path) -> None:
    whole = gzip.compress(b"".join(json.dumps({"i": i}).encode() + b"\n" for i in range(2000)))
    path = tmp_path / "rows.jsonl.gz"
    path.write_bytes(whole[: len(whole) // 2])  # a copy cut short
    with pytest.raises(JsonlError, match=r"rows\.jsonl\.gz.*not a readable gzip file"):
        read_jsonl(path)
