"""goodhart_prof/trace/decode.py: trace bytes -> typed events. The fields kept from each kind of
event, the loose ids of a float pid, malformed events skipped and counted (another tool's phase
is not malformed), NaN/Infinity read as null, every unusable document a one-phrase DecodeError,
pieces of an events array (`decode_events`, `ArrayEnd`) and plain JSON (`parse_json`)."""
from __future__ import annotations

import json

import pytest

from goodhart_prof.trace.decode import (AmbiguousDoc, ArrayEnd, Complete, DecodeError, Instant, Metadata,
                                        decode, decode_events, parse_json)


def _doc(*events, **header) -> bytes:
    return json.dumps({"traceEvents": list(events), **header}).encode()


def test_each_kind_of_event_keeps_the_fields_the_analyses_use():
    kernel = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 5,
              "args": {"device": 0, "stream": 7, "correlation": 3, "External id": 9, "other": [1, 2]}}
    name = {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}}
    memory = {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 3, "args": {"Bytes": 512, "Device Id": 0}}
    flow = {"ph": "f", "id": 1, "ts": 4}
    doc, skipped = decode(_doc(kernel, name, memory, flow, distributedInfo={"rank": 3, "world_size": 8}))
    assert skipped == 0 and doc.int_or_str_ids
    k, m, i, f = doc.traceEvents
    assert isinstance(k, Complete) and (k.cat, k.name, k.pid, k.tid, k.ts, k.dur) == ("kernel", "k", 0, 7, 10, 5)
    assert (k.args.device, k.args.stream, k.args.correlation, k.args.external_id) == (0, 7, 3, 9)
    assert isinstance(m, Metadata) and m.args.process_name == "GPU 0"
    assert isinstance(i, Instant) and (i.args.bytes, i.args.device_id, i.args.addr) == (512, 0, None)
    assert not isinstance(f, (Complete, Metadata, Instant))  # a flow: recognised, its fields skipped
    assert (doc.distributedInfo.rank, doc.distributedInfo.world_size) == (3, 8)


def test_a_float_pid_takes_the_loose_decode():
    doc, skipped = decode(_doc({"ph": "X", "pid": 1.0, "tid": 2, "ts": 1, "dur": 1}))
    assert skipped == 0 and not doc.int_or_str_ids
    assert doc.traceEvents[0].pid == 1.0 and isinstance(doc.traceEvents[0].pid, float)


def test_malformed_events_are_skipped_and_counted_but_other_tools_phases_are_not():
    doc, skipped = decode(_doc({"ph": "X", "ts": 1}, {"ph": "X", "ts": "soon"}, {"ph": "Z"}, 5))
    assert skipped == 2  # "soon" and the bare 5; the unknown phase Z is another tool's extension
    assert [e.ts for e in doc.traceEvents] == [1]


def test_nan_infinity_and_a_bom_are_read():
    doc, _ = decode(b'{"traceEvents":[{"ph":"X","pid":1,"ts":NaN,"dur":Infinity}]}')
    assert (doc.traceEvents[0].pid, doc.traceEvents[0].ts, doc.traceEvents[0].dur) == (1, None, None)
    doc, _ = decode(b"\xef\xbb\xbf" + _doc({"ph": "X", "ts": 2}))
    assert doc.traceEvents[0].ts == 2


@pytest.mark.parametrize("raw, message", [
    (b"", "empty file"),
    (b"  \n", "only whitespace"),
    (b"{", "not valid JSON (Input data was truncated)"),
    (b"[1]", "not a trace: top level is a list, not an object"),
    (b'{"a": []}', "not a trace: no traceEvents list"),
    (b'{"traceEvents": {}}', "not a trace: traceEvents is an object, not a list"),
    (b'{"traceEvents": [{"ph": "X", "ts": "soon"}]}',
     "not a trace: none of its 1 events is well-formed (Expected `int | float | null`, got `str` - at "
     "`$.traceEvents[0].ts`)"),
])
def test_unusable_documents_say_why(raw, message):
    with pytest.raises(DecodeError) as info:
        decode(raw)
    assert str(info.value) == message


def test_a_duplicated_top_level_key_is_ambiguous():
    with pytest.raises(AmbiguousDoc, match='^duplicated top-level key "traceEvents"$'):
        decode(b'{"traceEvents": [], "traceEvents": [{"ph": "X"}]}')
    with pytest.raises(AmbiguousDoc, match='"distributedInfo"'):  # one key before the events, one after
        decode(b'{"distributedInfo": {}, "traceEvents": [{"ph": "X", "ts": 1}], "distributedInfo": {}}')


def test_pieces_of_an_events_array():
    doc, skipped = decode_events(b'[{"ph":"X","ts":1},{"ph":"X","ts":"bad"},{"ph":"X","ts":NaN}]')
    assert skipped == 1 and [e.ts for e in doc.traceEvents] == [1, None]
    with pytest.raises(ArrayEnd) as info:  # the last piece: the array closes, the header goes on
        decode_events(b'[{"ph":"X","ts":1}]\n  , "distributedInfo": {}}')
    assert info.value.at == 18
    with pytest.raises(DecodeError, match="^not a list of events$"):
        decode_events(b'{"a": 1}')


def test_parse_json_reads_nonstandard_numbers_and_refuses_deep_nesting():
    assert parse_json(b'\xef\xbb\xbf{"a": NaN, "b": [1, -Infinity]}') == {"a": None, "b": [1, None]}
    assert parse_json(b"[1, 2]", list[int]) == [1, 2]
    with pytest.raises(DecodeError, match="^nested too deeply"):
        parse_json(b"[" * 100_000)
    with pytest.raises(DecodeError, match="^not UTF-8 text"):
        parse_json(b'"\xff"')
