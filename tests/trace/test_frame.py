"""goodhart_prof/trace/frame.py: the top level of a trace document found without decoding its
events: where the `traceEvents` array starts (`events_start`) and where it closes (`events_end`,
from the end, also on a tail cut out of the document), its top-level keys with repeats
(`top_keys`, `duplicated`) and the length of one JSON value (`value_length`)."""
from __future__ import annotations

import json

import pytest

from goodhart_prof.trace.frame import TAIL_WINDOW, duplicated, events_end, events_start, top_keys, value_length

# a name holding `]}` and a tail string ending in an escaped quote then `]`: brackets and quotes
# inside strings must not count
DOC = json.dumps({"schemaVersion": 1, "traceEvents": [{"name": "a]}"}, {"name": "b"}],
                  "traceName": 'x\\"]', "displayTimeUnit": "ms"}).encode()
OPEN = DOC.index(b"[")
CLOSE = DOC.index(b"}], ") + 1


def test_events_start_is_just_past_the_arrays_opening_bracket():
    assert events_start(DOC) == OPEN + 1
    assert events_start(b'{"traceEvents":[]}') == 16
    assert events_start(b"[1, 2]") is None
    assert events_start(b'{"traceEvents": 5}') is None
    # a "traceEvents" nested in an earlier field is not the document's
    assert events_start(b'{"x": {"traceEvents": [1]}, "traceEvents": [2]}') is None


def test_events_end_is_the_arrays_closing_bracket():
    assert DOC[CLOSE:CLOSE + 1] == b"]"
    assert events_end(DOC, OPEN) == CLOSE
    assert events_end(b'{"traceEvents":[]}', 15) == 16
    assert events_end(DOC[OPEN + 5:], None, partial=True) == CLOSE - OPEN - 5  # a tail cut out of it
    assert events_end(b'{"traceEvents":[1], "b": 1', 15) is None  # not an object's end
    assert events_end(b'{"traceEvents":[1]} x', 15) is None


def test_events_end_grows_its_window_past_a_long_tail():
    doc = json.dumps({"traceEvents": [{"name": "a"}], "traceName": "x" * (3 * TAIL_WINDOW)}).encode()
    start = events_start(doc)
    assert events_end(doc, start - 1) == doc.index(b"}]") + 1


@pytest.mark.xfail(strict=True, reason="events_end takes the `]` of an array field after the events for "
                                       "the events' own when that field is longer than TAIL_WINDOW")
def test_events_end_past_a_long_array_after_the_events():
    doc = json.dumps({"traceEvents": [{"name": "a"}],
                      "deviceProperties": [{"name": "x" * (3 * TAIL_WINDOW)}]}).encode()
    start = events_start(doc)
    assert events_end(doc, start - 1) == doc.index(b"}]") + 1


def test_top_keys_in_order_with_repeats():
    assert top_keys(DOC) == ["schemaVersion", "traceEvents", "traceName", "displayTimeUnit"]
    assert top_keys(b' {"a": [1, {"b": 2}], "c": "}", "a": null} ') == ["a", "c", "a"]
    assert top_keys(b"{}") == [] and top_keys(b"[1]") is None and top_keys(b'{"a": [1,') is None
    assert duplicated(["a", "c", "a"]) == "a" and duplicated(["a", "b"]) is None


def test_value_length_spans_a_value_up_to_what_follows():
    assert value_length(memoryview(b'[1, "]", 2]  , 3')) == 13
    assert value_length(memoryview(b'"only one value"')) is None
    assert value_length(memoryview(b"[1,")) is None
