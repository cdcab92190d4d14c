"""trace/schema.py: the event phases both trace readers know, and the structs that skip them."""
from __future__ import annotations

from typing import Union

import msgspec
import pytest

from goodhart_prof.trace import decode, extra_events
from goodhart_prof.trace.schema import PHASES, skipped_phases


def test_the_phases_of_the_trace_event_format_each_once():
    assert len(PHASES) == len(set(PHASES)) == 21
    assert set("XBEiICMstfcv") <= set(PHASES)


def test_skipped_phases_match_their_tag_and_keep_no_field():
    structs = skipped_phases(read="XMi")
    assert sorted(s.__struct_config__.tag for s in structs) == sorted(set(PHASES) - set("XMi"))
    event = msgspec.json.decode(b'{"ph": "C", "name": "mem", "ts": 5, "args": {"a": 1}}', type=Union[structs])
    assert type(event).__name__ == "Skipped_C" and msgspec.structs.asdict(event) == {}
    with pytest.raises(msgspec.ValidationError):  # a phase that is read is not among the skipped
        msgspec.json.decode(b'{"ph": "X", "name": "k"}', type=Union[structs])


def test_both_readers_read_a_trace_holding_every_phase(tmp_path):
    events = [{"ph": p, "name": f"e{p}", "cat": "python_function" if p == "X" else "c", "pid": 1,
               "tid": 2, "ts": 10, "dur": 5, "args": {"value": 3}} for p in PHASES]
    raw = msgspec.json.encode({"traceEvents": events})
    typed = msgspec.json.decode(raw, type=decode.TraceDoc).traceEvents  # no event refused
    assert [e.__struct_config__.tag for e in typed] == list(PHASES)
    assert [type(e).__name__ for e in typed if not type(e).__name__.startswith("Skipped_")] \
        == ["Complete", "Instant", "Metadata"]
    path = tmp_path / "every_phase.json"
    path.write_bytes(raw)
    extras = extra_events.read_extras(path)  # the python slice, both instants, the counter, the metadata
    assert (extras.py_count(), len(extras.instants), len(extras.metadata), extras.skipped) == (1, 2, 1, 0)
    assert extras.counters == [(1, "eC", None, 10.0, {"value": 3.0})]
