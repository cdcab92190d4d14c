"""Hypothesis strategies that damage real traces, and the property every damaged trace must keep.

Used by tests/trace/test_load_properties.py (a bounded run) and scripts/fuzz_loader.py (a long one).
A mutant starts from a seed document (a real Kineto/ROCm fixture or a small synthetic trace), is
damaged at the JSON level (drop keys, change value types, replace events or header fields) and
then, maybe, at the byte level (cut, insert garbage, overwrite, gzip or not).

The property (`check`): the loader either loads the file, and then the analysis and both reports
run, or raises the documented TraceError with a one-line message naming the file.
"""
from __future__ import annotations

import copy
import gzip
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import strategies as st

from tests.support import broken_corpus
from goodhart_prof.textsafe import quote_path
from tests.support.paths import DATA

FIXTURE = DATA / "hta" / "mi250_minitoy_rocm.json.gz"


def seed_documents() -> list[dict[str, Any]]:
    """Seeds: the small ROCm fixture (220 events: ops, launches, kernels, memcpys, flows,
    metadata), a synthetic trace with syncs and iterations, and a merged two-rank trace."""
    rocm = json.loads(gzip.decompress(FIXTURE.read_bytes()))
    e = broken_corpus.event
    steps = []
    for it in range(3):
        t0 = 100.0 * it
        steps += [e(t0, 90, f"ProfilerStep#{it}", cat="user_annotation"),
                  e(t0 + 1, 40, "rollout", cat="user_annotation"),
                  e(t0 + 2, 5, "aten::item", args={"External id": 10 * it}),
                  e(t0 + 3, 2, "aten::_local_scalar_dense", args={"External id": 10 * it}),
                  e(t0 + 4, 1, "cudaMemcpyAsync", cat="cuda_runtime",
                    args={"correlation": 10 * it + 1, "External id": 10 * it}),
                  e(t0 + 6, 3, "Memcpy DtoH (Device -> Pageable)", cat="gpu_memcpy", pid=0, tid=7,
                    args={"device": 0, "stream": 7, "correlation": 10 * it + 1, "bytes": 4}),
                  e(t0 + 10, 2, "cudaLaunchKernel", cat="cuda_runtime",
                    args={"correlation": 10 * it + 2, "External id": 10 * it + 5}),
                  e(t0 + 12, 20, "void at::native::vectorized_elementwise_kernel", cat="kernel",
                    pid=0, tid=7, args={"device": 0, "stream": 7, "correlation": 10 * it + 2}),
                  e(t0 + 40, 8, "cudaStreamSynchronize", cat="cuda_runtime"),
                  e(t0 + 50, 5, "train.py(42): step", cat="python_function",
                    args={"Python id": it + 1, "Python parent id": 0})]
    synthetic = {"schemaVersion": 1, "baseTimeNanoseconds": 1_700_000_000_000_000_000,
                 "distributedInfo": {"rank": 0, "world_size": 1, "backend": "nccl"},
                 "deviceProperties": [{"id": 0, "name": "GPU"}], "traceEvents": steps}
    merged_events = []
    for rank in (0, 1):
        merged_events.append({"ph": "M", "name": "process_name", "pid": rank, "tid": 0,
                              "args": {"name": f"rank {rank}"}})
        for ev in broken_corpus.good_events():
            ev = dict(ev, pid=rank)
            if ev["cat"] == "kernel":
                ev["tid"] = 1_000_000_007
            merged_events.append(ev)
    merged = {"schemaVersion": 1, "goodhartProf": {"merged_ranks": [0, 1]},
              "traceEvents": merged_events}
    return [rocm, synthetic, merged]


SEEDS = seed_documents()
EVENT_KEYS = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "id", "s"]
ARG_KEYS = ["device", "stream", "correlation", "External id", "external id", "Python id",
            "Python parent id", "bytes", "name"]
HEADER_KEYS = ["traceEvents", "distributedInfo", "baseTimeNanoseconds", "deviceProperties",
               "goodhartProf", "schemaVersion"]

# Values of the wrong type, out of range, or hostile in other ways.
hostile_values = st.deferred(lambda: st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 2**31, 2**63, -(2**63) - 1, 10**400, 2**64]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e308, -1e308, 5e-324, 1e15, 4203669604663.686]),
    st.text(max_size=12),
    st.sampled_from(["", "X", "M", "rank 1", "rank 99999999999999", "stream 7", "-12", "0x1f",
                     "kernel", "gpu_memcpy", "cuda_runtime", "python_function", "ProfilerStep#x",
                     "aten::item", "Memcpy HtoD (Pageable -> Device)"]),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.sampled_from(ARG_KEYS + ["rank", "x"]), st.integers(), max_size=3),
))


# Numbers at the edges of what decoders and columns hold: float's range and its smallest
# subnormal, int64's and uint64's edges, integers no float or int64 holds exactly, negative zero.
EXTREME_NUMBERS = [1e308, -1e308, 2**63, 2**64, -(2**63), 2**63 - 1, 1e18, 10**18, -0.0, 5e-324,
                   1234567890123456789012345, -9876543210987654321098765]
NUMBER_KEYS = ["ts", "dur", "pid", "tid"]


@st.composite
def damaged_document(draw) -> tuple[dict[str, Any], list[str]]:
    """A seed document with a few JSON-level injuries, and what was done (for the report)."""
    doc = copy.deepcopy(draw(st.sampled_from(SEEDS)))
    events = doc["traceEvents"]
    done: list[str] = []
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["drop_key", "set_key", "set_arg", "replace_event",
                                     "drop_events", "header", "extreme"]))
        if kind == "header":
            key = draw(st.sampled_from(HEADER_KEYS))
            if draw(st.booleans()):
                doc.pop(key, None)
                done.append(f"drop header {key}")
            else:
                doc[key] = draw(hostile_values)
                done.append(f"header {key} = {doc[key]!r:.40}")
            events = doc.get("traceEvents") if isinstance(doc.get("traceEvents"), list) else []
            continue
        if not events:
            continue
        i = draw(st.integers(0, len(events) - 1))
        ev = events[i]
        if kind == "drop_events":
            j = draw(st.integers(i, len(events)))
            del events[i:j]
            done.append(f"drop events {i}:{j}")
        elif kind == "replace_event":
            events[i] = draw(hostile_values)
            done.append(f"event {i} = {events[i]!r:.40}")
        elif not isinstance(ev, dict):
            continue
        elif kind == "drop_key":
            key = draw(st.sampled_from(EVENT_KEYS))
            ev.pop(key, None)
            done.append(f"event {i} drop {key}")
        elif kind == "extreme":
            key = draw(st.sampled_from(NUMBER_KEYS + ARG_KEYS))
            where = ev if key in NUMBER_KEYS else ev.setdefault("args", {})
            if isinstance(where, dict):
                where[key] = draw(st.sampled_from(EXTREME_NUMBERS))
                done.append(f"event {i} {key} = {where[key]!r}")
        elif kind == "set_key":
            key = draw(st.sampled_from(EVENT_KEYS))
            ev[key] = draw(hostile_values)
            done.append(f"event {i} {key} = {ev[key]!r:.40}")
        else:
            args = ev.setdefault("args", {})
            if isinstance(args, dict):
                key = draw(st.sampled_from(ARG_KEYS))
                args[key] = draw(hostile_values)
                done.append(f"event {i} args.{key} = {args[key]!r:.40}")
    return doc, done


@st.composite
def damaged_file(draw) -> tuple[bytes, list[str]]:
    """Bytes of a damaged document (json.dumps writes NaN/Infinity as Python does), then maybe
    byte-level damage and gzip."""
    doc, done = draw(damaged_document())
    data = json.dumps(doc).encode()
    for _ in range(draw(st.integers(0, 1))):
        data = draw(duplicated_key(data, done))
    for _ in range(draw(st.integers(0, 2))):
        kind = draw(st.sampled_from(["cut", "insert", "overwrite", "none", "none"]))
        if kind == "none" or not data:
            continue
        at = draw(st.integers(0, len(data)))
        if kind == "cut":
            data = data[:at]
        else:
            junk = draw(st.one_of(st.binary(min_size=1, max_size=16),
                                  st.sampled_from([b"\xff\xfe", b"NaN", b"[" * 5000, b"}", b",", b'"',
                                                   b"\x1f\x8b", b"\x00"])))
            data = data[:at] + junk + data[at + (len(junk) if kind == "overwrite" else 0):]
        done.append(f"bytes {kind} at {at}")
    if draw(st.booleans()):
        data = gzip.compress(data, 1)
        if draw(st.integers(0, 4)) == 0:
            cut = draw(st.integers(0, len(data)))
            data = data[:cut]
            done.append(f"gzip cut at {cut}")
        else:
            done.append("gzip")
    return data, done


@st.composite
def duplicated_key(draw, data: bytes, done: list[str]) -> bytes:
    """`data` (json.dumps of an object) with a key written twice: a top-level one appended
    before the closing brace, or one inside an event inserted after its opening brace."""
    value = json.dumps(draw(st.one_of(st.sampled_from(EXTREME_NUMBERS), hostile_values,
                                      st.just([]), st.just({"rank": 1})))).encode()
    starts = [i for i in range(len(data)) if data.startswith(b'{"ph": ', i)]
    if draw(st.booleans()) or not starts or not data.endswith(b"}"):
        if not data.endswith(b"}"):
            return data
        key = draw(st.sampled_from(HEADER_KEYS))
        done.append(f"top-level key {key} twice")
        return data[:-1] + b', "' + key.encode() + b'": ' + value + b"}"
    at = draw(st.sampled_from(starts)) + 1
    key = draw(st.sampled_from(EVENT_KEYS))
    done.append(f"event key {key} twice at byte {at}")
    return data[:at] + b'"' + key.encode() + b'": ' + value + b", " + data[at:]


def check(path: Path) -> str:
    """The property. Returns "loaded" or "error"; raises AssertionError (or the unexpected
    exception itself) when the loader or the analysis misbehaves."""
    from rich.console import Console

    from goodhart_prof.analysis import analyze
    from goodhart_prof.report.json_report import to_document
    from goodhart_prof.report.text.report import render
    from goodhart_prof.trace.load import TraceError, load

    try:
        trace = load(path, progress=False, workers=1)
    except TraceError as exc:
        message = exc.format_message()
        assert "\n" not in message and message.startswith(quote_path(path)), message
        return "error"
    ev = trace.events
    assert len(ev) > 0 and np.isfinite(ev["ts"]).all(), "an event without a finite ts was kept"
    assert ((ev["dur"] >= 0) & np.isfinite(ev["dur"])).all(), "a bad duration was kept"
    result = analyze(trace)
    json.dumps(to_document(result))
    render(result, Console(file=io.StringIO(), width=140), 5)
    return "loaded"
