"""goodhart_prof/trace/raw.py: trace files read back as raw documents for the writers (rank merge,
Chrome JSON export). Events that are not objects or cannot be decoded alone are left out as the
loader skips them, NaN/Infinity read as null, gzip told by its bytes, and a file that is no trace
a one-line RawTraceError naming it."""
from __future__ import annotations

import gzip

import msgspec
import pytest

from goodhart_prof.trace.raw import RawTraceError, raw_document, read_document


def test_the_document_with_its_undecodable_events_left_out(tmp_path):
    path = tmp_path / "t.json"
    path.write_bytes(b'{"traceEvents": [{"ph": "X", "ts": 1}, 5, {"name": "\xff"}, {"n": 1e999}],'
                     b' "deviceProperties": [{"name": "A100"}]}')
    assert read_document(path) == {"traceEvents": [{"ph": "X", "ts": 1}], "deviceProperties": [{"name": "A100"}]}


def test_nonstandard_numbers_a_bad_header_field_and_gzip(tmp_path):
    path = tmp_path / "nan.json"
    path.write_bytes(b'{"traceEvents": [{"ph": "X", "ts": NaN}], "x": Infinity}')
    assert read_document(path) == {"traceEvents": [{"ph": "X", "ts": None}], "x": None}
    path.write_bytes(b'{"traceEvents": [{"ph": "X", "ts": 1}], "x": "\xff"}')  # a header field: dropped
    assert read_document(path) == {"traceEvents": [{"ph": "X", "ts": 1}]}
    zipped = tmp_path / "t.json"  # gzip by its bytes, not its name
    zipped.write_bytes(gzip.compress(b'\xef\xbb\xbf{"traceEvents": [{"ph": "M"}]}'))
    assert read_document(zipped) == {"traceEvents": [{"ph": "M"}]}


def test_raw_document_keeps_top_level_values_raw(tmp_path):
    path = tmp_path / "t.json"
    path.write_bytes(b'{"traceEvents": [ {"ph": "X"} ], "baseTimeNanoseconds": 12}')
    top = raw_document(path)
    assert isinstance(top["traceEvents"], msgspec.Raw) and bytes(top["traceEvents"]) == b'[ {"ph": "X"} ]'
    assert bytes(top["baseTimeNanoseconds"]) == b"12"


@pytest.mark.parametrize("content, why", [
    (b"[1]", "not a trace (the top level is not an object)"),
    (b'{"a": 1}', "not a trace (no traceEvents list)"),
    (b'{"traceEvents": {}}', "not a trace (no traceEvents list)"),
    (b"{", "cannot be read (Input data was truncated)"),
])
def test_a_file_that_is_no_trace_is_one_line_naming_it(tmp_path, content, why):
    path = tmp_path / "t.json"
    path.write_bytes(content)
    with pytest.raises(RawTraceError) as info:
        read_document(path)
    assert str(info.value) == f"{path}: {why}"


def test_a_missing_file_and_an_odd_name(tmp_path):
    with pytest.raises(RawTraceError, match=r"gone\.json: cannot be read \(\[Errno 2\] No such file"):
        read_document(tmp_path / "gone.json")
    odd = tmp_path / "a\nb.json"
    odd.write_bytes(b"[1]")
    with pytest.raises(RawTraceError) as info:
        read_document(odd)
    assert str(info.value) == f"'{tmp_path}/a\\nb.json': not a trace (the top level is not an object)"
