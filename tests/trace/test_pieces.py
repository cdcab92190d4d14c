"""One big document decoded piece by piece (bounded memory) gives the tables of one piece."""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import goodhart_prof.trace.decode as decoder
import goodhart_prof.trace.load as loader
import goodhart_prof.trace.pieces as cutter
import goodhart_prof.trace.ranges as ranges
from goodhart_prof.trace import columnar
from goodhart_prof.trace.load import load
from tests.support.paths import DATA, ROOT

V100 = DATA / "hta" / "v100_ddp_rank1.json.gz"  # 35 MB of JSON, memory events, 2 GPUs' kernels


@pytest.fixture(autouse=True)
def msgspec_way(monkeypatch):
    """These tests are about the msgspec way's pieces and ranges: the native decoder (which reads
    windows of its own, tests/trace/test_columnar.py and test_loader.py) is off here."""
    monkeypatch.setattr(columnar, "AVAILABLE", False)


def same_trace(a, b) -> None:
    assert a.events.equals(b.events)
    for c in ("name", "cat", "input_types", "input_dims", "concrete_inputs", "comm_args"):
        assert list(a.events[c].cat.categories) == list(b.events[c].cat.categories), c
    assert a.frames.columns.keys() == b.frames.columns.keys()
    for c, values in a.frames.columns.items():
        assert np.array_equal(values, b.frames.columns[c]) and values.dtype == b.frames.columns[c].dtype, c
    assert a.memory.equals(b.memory)
    assert (a.ranks, a.rank_source, a.device_properties, a.skipped_events, a.warnings, a.world_size) == \
        (b.ranks, b.rank_source, b.device_properties, b.skipped_events, b.warnings, b.world_size)


def small_pieces(monkeypatch, piece_bytes: int, guard: int = 64 << 10) -> None:
    monkeypatch.setattr(loader, "PIECE_BYTES", piece_bytes)
    monkeypatch.setattr(cutter, "TAIL_GUARD", guard)


@pytest.fixture(scope="module")
def v100_plain(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("pieces") / "v100.json"
    path.write_bytes(gzip.decompress(V100.read_bytes()))
    return path


def test_a_real_trace_in_small_pieces_equals_one_piece(monkeypatch, v100_plain):
    whole = load(V100, workers=1)
    used = []
    original = ranges.events_of

    def counted(raw):
        used.append(len(raw))
        return original(raw)
    monkeypatch.setattr(ranges, "events_of", counted)
    small_pieces(monkeypatch, 4 << 20)
    same_trace(load(V100, workers=1), whole)  # gzip: pieces as it inflates
    assert len(used) >= 8 and max(used) < (4 << 20) + (1 << 20)
    used.clear()
    same_trace(load(v100_plain, workers=2), whole)  # plain: two byte ranges, two processes
    assert len(used) >= 4  # this process's range; the worker's pieces are not counted here
    used.clear()
    same_trace(load(v100_plain, workers=1), whole)
    assert len(used) >= 8


def test_a_document_in_memory_is_cut_in_place_over_two_processes(monkeypatch, tmp_path):
    """The gzip V100 trace, inflated in memory (54 MB, over PARALLEL_DOC_BYTES), is decoded in
    two ranges (this process and a forked worker): the same trace as one whole decode. A document
    whose cut lands inside a value (separators inside names) cannot be cut there: it is decoded
    whole, to the same trace."""
    whole = load(V100, workers=1)
    monkeypatch.setattr(ranges, "_core_free", lambda: True)  # whatever the machine's load
    cut = []
    original = ranges.buffer_ranges

    def counted(*args):
        try:
            pieces = original(*args)
        except Exception as exc:
            cut.append(type(exc).__name__)
            raise
        cut.append(len(pieces or []))
        return pieces
    monkeypatch.setattr(ranges, "buffer_ranges", counted)
    same_trace(load(V100, workers=2), whole)
    assert cut == [4]  # head, this process's range, the worker's range, tail
    cut.clear()
    same_trace(load(V100, workers=1), whole)  # one process: never cut in place
    assert cut == []
    tricky = tmp_path / "tricky.json.gz"
    tricky.write_bytes(gzip.compress(json.dumps(_tricky_doc(3000)).encode()))
    alone = load(tricky, workers=1)
    monkeypatch.setattr(ranges, "PARALLEL_DOC_BYTES", 0)
    monkeypatch.setattr(cutter, "TAIL_GUARD", 0)
    same_trace(load(tricky, workers=2), alone)
    assert cut == ["ArrayEnd"]  # the range ends inside a name: decoded whole instead


def test_no_worker_is_forked_when_no_core_is_free(monkeypatch):
    """A busy machine (1-minute load average within half a core of the core count) decodes the
    document in this process: a forked decoder would only compete with it."""
    monkeypatch.setattr(ranges.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(ranges.os, "getloadavg", lambda: (1.7, 1.0, 1.0))
    assert not ranges._core_free()
    cut = []
    original = ranges.buffer_ranges
    monkeypatch.setattr(ranges, "buffer_ranges", lambda *a: cut.append(original(*a)) or cut[-1])
    load(V100, workers=2)
    assert cut == [None]  # asked, and declined: decoded whole
    monkeypatch.setattr(ranges.os, "getloadavg", lambda: (0.4, 1.0, 1.0))
    assert ranges._core_free()


def _tricky_doc(n: int) -> dict:
    """Separators inside names and nested args, odd ids, and header fields after the events
    (a list of objects, which looks like events to the cutter)."""
    events = []
    for i in range(n):
        events.append({"ph": "X", "cat": "cpu_op", "name": f"op {i % 7} }}, {{ \"ph\": \"X\" }},{{",
                       "pid": 1, "tid": "main" if i % 2 else 1, "ts": 10.0 * i, "dur": 5.0,
                       "args": {"External id": i, "Input type": ["float", f"t{i % 5}"],
                                "nested": [{"a": 1}, {"b": 2}]}})
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                       "ts": 10.0 * i + 1, "dur": 1, "args": {"correlation": i, "External id": i}})
        events.append({"ph": "X", "cat": "kernel", "name": f"k{i % 3}", "pid": 0, "tid": 7,
                       "ts": 10.0 * i + 3, "dur": 2, "args": {"device": 0, "stream": 7, "correlation": i}})
        if i % 50 == 0:
            events.append({"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 10.0 * i + 2,
                           "args": {"Device Type": 1, "Device Id": 0, "Bytes": 512, "Total Allocated": 4096}})
    props = [{"id": d, "name": f"GPU {d}", "note": "}, {"} for d in range(200)]
    return {"schemaVersion": 1, "traceEvents": events, "deviceProperties": props,
            "distributedInfo": {"rank": 0, "world_size": 1}, "baseTimeNanoseconds": 1700000000000000000}


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_cuts_inside_strings_and_trailers_load_identically(tmp_path, monkeypatch, gz):
    data = json.dumps(_tricky_doc(2000)).encode()
    path = tmp_path / ("odd.json.gz" if gz else "odd.json")
    path.write_bytes(gzip.compress(data) if gz else data)
    whole = load(path, workers=1)
    assert whole.device_properties[0][-1]["note"] == "}, {" and whole.world_size == 1
    for piece_bytes in (20_000, 33_333, 70_001):  # cuts land in names, in args, in the trailer
        small_pieces(monkeypatch, piece_bytes, guard=0)
        same_trace(load(path, workers=2), whole)
        same_trace(load(path, workers=1), whole)


def test_stream_pieces_grows_a_bad_cut_and_gives_up_after_retries(monkeypatch):
    monkeypatch.setattr(cutter, "TAIL_GUARD", 0)
    doc = b'{"a":1,"traceEvents":[{"ph":"X","name":"a}, {b"},{"ph":"X","name":"c"},{"ph":"X","name":"d"}],"z":[{"e":1}, {"f":2}]}'
    seen = []

    def use(raw, header):
        if header:
            seen.append(("header", bytes(raw)))
            return "header"
        events = decoder.decode_events(bytes(raw))[0].traceEvents  # DecodeError for a cut inside the first name
        seen.append(bytes(raw))
        return [e.name for e in events]
    assert cutter.stream_pieces(iter([doc]), 1, use) == ["header", ["a}, {b"], ["c"], ["d"], "header"]
    assert seen[0] == ("header", b'{"a":1,"traceEvents":[]}')
    assert seen[1] == b'[{"ph":"X","name":"a}, {b"}]'
    assert seen[3] == b'[{"ph":"X","name":"d"}]'  # a cut in "z" (after the events) closes early: the tail
    assert seen[-1] == ("header", b'{"traceEvents":[],"z":[{"e":1}, {"f":2}]}')
    bad = b'{"traceEvents":[{"ph":"X","name":"a}, {b}, {c}, {d}, {e}, {f}, {g"}]}'
    with pytest.raises(cutter.BadCut):
        cutter.stream_pieces(iter([bad[:20], bad[20:]]), 1, use)


def test_the_json_records_what_the_load_cost():
    proc = subprocess.run([sys.executable, "-m", "goodhart_prof.cli", "analyze",
                           str(DATA / "tracelens" / "h100_bert_small_inference.json.gz"), "--json"],
                          capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 0, proc.stderr
    cost = json.loads(proc.stdout)["trace"]["load"]
    assert set(cost) == {"seconds", "peak_rss_bytes"}
    assert 0 < cost["seconds"] < 30
    assert 20 << 20 < cost["peak_rss_bytes"] < os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


FIXTURES = sorted(p for p in DATA.rglob("*.json*") if p.name.endswith((".json", ".json.gz"))
                  and p.name not in ("findings_labels.json", "run.json", "analysis.json"))


@pytest.mark.parametrize("path", FIXTURES, ids=[str(p.relative_to(DATA)) for p in FIXTURES])
def test_every_fixture_in_2_3_and_7_pieces_equals_it_whole(monkeypatch, tmp_path, path):
    """Events, memory, frames, ranks and header of every fixture trace, decoded whole and cut into
    2 and 7 pieces as the gzip file inflates (this process) and into 3 byte ranges of its plain
    JSON, decoded by worker processes."""
    whole = load(path, workers=1)
    raw = gzip.decompress(path.read_bytes())
    size = len(raw)
    plain = tmp_path / path.name.replace(".gz", "")
    plain.write_bytes(raw)
    del raw
    used = []
    original = ranges.events_of
    monkeypatch.setattr(ranges, "events_of", lambda raw: used.append(len(raw)) or original(raw))
    monkeypatch.setattr(cutter, "TAIL_GUARD", 0)  # cuts may land anywhere, the tail too
    ranged = ranges.file_ranges

    def counted_ranges(*args):
        pieces = ranged(*args)
        used.append(len(pieces or []))
        return pieces
    monkeypatch.setattr(ranges, "file_ranges", counted_ranges)
    for parts, workers in ((2, 1), (3, 2), (7, 1)):
        monkeypatch.setattr(loader, "PIECE_BYTES", size // parts + 1)
        used.clear()
        same_trace(load(path if workers == 1 else plain, workers=workers), whole)
        # streamed: parts-1 pieces or more; in ranges: head, this process's range, tail at least
        assert len(used) >= parts - 1 if workers == 1 else used[-1] >= 3, (parts, used)
