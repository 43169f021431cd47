"""stratagym.jsonl.read_jsonl: the one JSON-lines reader (issue 29 item 5).

Input files get an error naming the file, the line and the fix, in the caller's error class; logs the
project appends to (``skip_bad``) pass over a torn row. The readers that use it keep their messages'
contract (``tests/training/test_demos.py``, ``tests/search_qa/test_data.py``,
``tests/reliability/test_cli_errors.py``).
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stratagym.errors import ConfigError, UserError
from stratagym.jsonl import JSONLine, read_jsonl


def test_rows_numbers_and_text(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"a": 1}\n\n  \n{"b": "\xc3\xa9"}\r\n{"c": [1, 2]}')  # blank lines, CRLF, no final newline
    assert list(read_jsonl(path)) == [
        JSONLine(1, {"a": 1}, '{"a": 1}'),
        JSONLine(4, {"b": "é"}, '{"b": "é"}'),
        JSONLine(5, {"c": [1, 2]}, '{"c": [1, 2]}'),
    ]


def test_bad_json_names_the_line_and_column(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_text('{"a": 1}\n{"a": 2}\n{"a": \n{"a": 4}\n')
    with pytest.raises(ConfigError) as err:
        list(read_jsonl(path))
    msg = str(err.value)
    assert msg.startswith(f"{path}: line 3 is not valid JSON: Expecting value at column 7")
    assert "truncated" not in msg and "one JSON object per line" in msg


def test_a_torn_last_line_is_called_truncated(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_text('{"a": 1}\n{"a": 2, "b')
    with pytest.raises(ConfigError, match=r"line 2 is not valid JSON.*\(the file looks truncated\)"):
        list(read_jsonl(path))


def test_not_utf8_and_not_an_object(tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes('{"a": 1}\n{"name": "café"}\n'.encode("latin-1"))
    with pytest.raises(ConfigError) as err:
        list(read_jsonl(path))
    assert str(err.value) == (f"{path} is not UTF-8 text (line 2: invalid continuation byte at byte 13); "
                              "re-save it as UTF-8 (e.g. iconv -t UTF-8)")
    path.write_text('{"a": 1}\n[1, 2]\n')
    with pytest.raises(ConfigError, match=r"line 2: expected a JSON object, got list"):
        list(read_jsonl(path))


def test_the_callers_error_class_and_lazy_reading(tmp_path):
    class DemosError(ConfigError):
        pass

    path = tmp_path / "d.jsonl"
    path.write_text('{"ok": 1}\nnot json\n')
    rows = read_jsonl(path, error=DemosError)
    assert next(rows).value == {"ok": 1}  # rows before the bad line arrive first
    with pytest.raises(DemosError) as err:
        next(rows)
    assert isinstance(err.value, UserError)  # the CLI prints it on one line and exits 2
    with pytest.raises(FileNotFoundError):
        list(read_jsonl(tmp_path / "missing.jsonl"))


def test_skip_bad_passes_over_torn_and_foreign_rows(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"step": 1}\n\xff\xfe\n[3]\n{"step": 2}\n{"step": 3, "lo')
    assert [(r.number, r.value) for r in read_jsonl(path, skip_bad=True)] == [(1, {"step": 1}), (4, {"step": 2})]


_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.dictionaries(st.text(max_size=8), _values, max_size=4), max_size=6),
       ascii_only=st.booleans())
def test_roundtrip_property(tmp_path_factory, rows, ascii_only):
    """Whatever ``json.dumps`` writes one per line reads back equal, numbered 1..n, text unchanged (so a
    caller that rewrites kept lines rewrites the same bytes)."""
    path = tmp_path_factory.mktemp("rt") / "rows.jsonl"
    lines = [json.dumps(r, ensure_ascii=ascii_only, sort_keys=True) for r in rows]
    path.write_bytes("".join(line + "\n" for line in lines).encode("utf-8"))
    got = list(read_jsonl(path))
    assert [g.value for g in got] == rows
    assert [g.number for g in got] == list(range(1, len(rows) + 1))
    assert [g.text for g in got] == lines
