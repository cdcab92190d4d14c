"""The native decoder (trace/columnar.py + native/columnar.c) gives exactly the tables of the
msgspec path, or hands the document to it: on every fixture trace, on every broken-corpus case,
with the events cut in two halves (the threaded join), and on seeded random mutations that put odd
values (text, null, booleans, floats, bignums, lists) into every field the tables read."""
from __future__ import annotations

import gzip
import json
import os
import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.support import broken_corpus
from goodhart_prof.errors import TraceError
from goodhart_prof.trace import columnar
from goodhart_prof.trace.load import load
from tests.support.paths import DATA



def _is_trace(path: Path) -> bool:
    head = gzip.open(path).read(1 << 16) if path.suffix == ".gz" else path.open("rb").read(1 << 16)
    return b'"traceEvents"' in head


FIXTURES = sorted(p for p in DATA.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz"))
                  and _is_trace(p))

if columnar._columnar is None:
    if os.environ.get("CI"):  # .ci/run builds it (setup.py): its absence there is a failure
        raise RuntimeError("the native decoder (goodhart_prof.trace.cdecoder) was not built")
    pytest.skip("the native decoder is not built here (no C compiler)", allow_module_level=True)


def _load(path: Path, native: bool, monkeypatch) -> "object":
    with monkeypatch.context() as m:
        m.setattr(columnar, "AVAILABLE", native)
        try:
            return load(path, progress=False)
        except TraceError as exc:
            return f"TraceError: {exc}"


def assert_same(a, b, where) -> None:
    if isinstance(a, str) or isinstance(b, str):
        assert a == b, where
        return
    pd.testing.assert_frame_equal(a.events, b.events, check_exact=True, obj=f"{where} events")
    assert list(a.events["name"].cat.categories) == list(b.events["name"].cat.categories), where
    for col in a.frames.columns:
        x, y = a.frames[col], b.frames[col]
        assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), (where, col)
    pd.testing.assert_frame_equal(a.memory, b.memory, check_exact=True, obj=f"{where} memory")
    for attr in ("skipped_events", "warnings", "device_properties", "ranks", "rank_source", "world_size", "file_ranks"):
        assert getattr(a, attr) == getattr(b, attr), (where, attr)


class _Count:
    """Counts the native decoder's answers (columns, or None: handed to msgspec)."""

    def __init__(self, monkeypatch):
        self.columns = self.handed = 0
        real = columnar._columnar.events

        def events(*args):
            out = real(*args)
            if out is None:
                self.handed += 1
            else:
                self.columns += 1
            return out
        monkeypatch.setattr(columnar, "_columnar", type("M", (), {"events": staticmethod(events),
                                                                   "release": staticmethod(columnar._columnar.release)}))


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: str(p.relative_to(DATA)))
def test_fixture_traces_read_the_same(path, monkeypatch):
    count = _Count(monkeypatch)
    assert_same(_load(path, True, monkeypatch), _load(path, False, monkeypatch), path.name)
    if not isinstance(_load(path, False, monkeypatch), str):
        assert count.columns >= 1 and count.handed == 0, "every fixture trace is plain: read natively"


@pytest.mark.parametrize("path", [p for p in FIXTURES if p.stat().st_size > 20_000][:12],
                         ids=lambda p: p.name)
def test_two_halves_joined_read_the_same(path, monkeypatch):
    """The events cut in two (threads), their codes and rows joined: as one pass."""
    monkeypatch.setattr(columnar, "PARALLEL_BYTES", 1)
    joined = []
    real = columnar.join
    monkeypatch.setattr(columnar, "join", lambda *parts: joined.append(len(parts)) or real(*parts))
    assert_same(_load(path, True, monkeypatch), _load(path, False, monkeypatch), path.name)
    assert joined


def test_broken_corpus_reads_the_same(tmp_path, monkeypatch):
    cases = broken_corpus.build(tmp_path)
    try:
        checked = 0
        for name, case in cases.items():
            try:
                if case.skip_reason or not case.path.is_file() or case.path.stat().st_size > 64 << 20:
                    continue
            except OSError:  # a name too long, a path through a file: nothing to decode
                continue
            assert_same(_load(case.path, True, monkeypatch), _load(case.path, False, monkeypatch), name)
            checked += 1
        assert checked >= 30
    finally:
        broken_corpus.restore_permissions(tmp_path)


ODD_VALUES = [None, True, False, "12", " 7", "007", "abc", "", "ü", 1.5, 3.0, -1, -2, 0, 2**63, 2**64 + 5,
              2**70, [1, 2], {"a": 1}, 1e300]
FIELDS = ["cat", "name", "pid", "tid", "ts", "dur"]
ARGS = ["External id", "external id", "correlation", "device", "stream", "bytes", "flops", "Python id",
        "Python parent id", "Input type", "Input Dims", "Concrete Inputs", "name", "Collective name",
        "In msg nelems", "Group size", "dtype", "wait_on_stream", "wait_on_cuda_event_record_corr_id"]
MEMORY_ARGS = ["Device Type", "Device Id", "Bytes", "Addr", "Total Allocated", "Total Reserved"]


def _base_events() -> list[dict]:
    ev = broken_corpus.event
    out = []
    for i in range(6):
        t = 100.0 * i
        out += [
            ev(t, 50, "aten::mm", args={"External id": 10 + i, "Input type": ["float", "float"],
                                        "Input Dims": [[4, 4], [4, 4]], "Concrete Inputs": ["", ""]}),
            ev(t + 2, 5, "cudaLaunchKernel", cat="cuda_runtime", args={"correlation": 70 + i, "External id": 10 + i}),
            ev(t + 20, 30, "gemm_kernel", cat="kernel", pid=0, tid=7,
               args={"device": 0, "stream": 7, "correlation": 70 + i, "External id": 10 + i}),
            ev(t + 60, 4, "Memcpy HtoD", cat="gpu_memcpy", pid=0, tid=7,
               args={"device": 0, "stream": 7, "correlation": 90 + i, "bytes": 4096}),
            ev(t + 1, 70, "train.py(12): step", cat="python_function", args={"Python id": i, "Python parent id": -1}),
            ev(t + 3, 9, "record_param_comms", args={"Collective name": "allreduce", "In msg nelems": 16,
                                                     "Group size": 2, "dtype": "Float"}),
            ev(t + 5, 2, "Stream Wait Event", cat="cuda_sync", pid=0, tid=8,
               args={"stream": 8, "correlation": 80 + i, "wait_on_stream": 7,
                     "wait_on_cuda_event_record_corr_id": 60 + i}),
            {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": t + 4, "s": "t",
             "args": {"Device Type": 1, "Device Id": 0, "Bytes": 512, "Addr": 1234, "Total Allocated": 512,
                      "Total Reserved": 2048}},
        ]
    out.append({"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "rank 0"}})
    return out


def _mutated(rng: random.Random) -> list[dict]:
    events = _base_events()
    for _ in range(rng.randint(1, 4)):
        ev = rng.choice(events)
        value = rng.choice(ODD_VALUES + ["<absent>"])
        if ev["ph"] == "i":
            target, key = ev.setdefault("args", {}), rng.choice(MEMORY_ARGS + ["<field>"])
        else:
            target, key = (ev, rng.choice(FIELDS)) if rng.random() < 0.4 else (ev.setdefault("args", {}), rng.choice(ARGS))
        if key == "<field>":
            target, key = ev, rng.choice(["pid", "tid", "ts", "name"])
        if value == "<absent>":
            target.pop(key, None)
        else:
            target[key] = value
    return events


def test_random_odd_values_read_the_same(tmp_path, monkeypatch):
    """Seeded mutations; each document is read both ways (plain and gzip) and must agree."""
    rng = random.Random(34)
    both = 0
    for k in range(400):
        doc = {"schemaVersion": 1, "traceEvents": _mutated(rng)}
        path = tmp_path / f"m{k}.json"
        data = json.dumps(doc).encode()
        path.write_bytes(data if k % 2 else gzip.compress(data))
        count = _Count(monkeypatch)
        native = _load(path, True, monkeypatch)
        monkeypatch.undo()
        assert_same(native, _load(path, False, monkeypatch), f"case {k}: {data[:3000]!r}")
        both += count.columns
    assert both > 150  # most mutations stay on the native path (others are handed over, and agree)


def _inflated_size(path: Path) -> int:
    with path.open("rb") as fh:
        fh.seek(-4, 2)
        return int.from_bytes(fh.read(4), "little")


@pytest.mark.parametrize("path", [p for p in FIXTURES if p.suffix == ".gz" and p.stat().st_size > 20_000
                                  and _inflated_size(p) <= 64 << 20][:8], ids=lambda p: p.name)
def test_gzip_read_while_inflated_reads_the_same(path, monkeypatch):
    """native_gzip.py: the first half parsed while the rest is inflated, in small steps here."""
    from goodhart_prof.trace import native_gzip
    monkeypatch.setattr(columnar, "PARALLEL_BYTES", 1)
    monkeypatch.setattr(native_gzip, "CHUNK_BYTES", 64 << 10)
    monkeypatch.setattr(native_gzip, "TAIL_BYTES", 4 << 10)
    read = []
    real = native_gzip.document
    monkeypatch.setattr(native_gzip, "document", lambda p: read.append(out := real(p)) or out)
    assert_same(_load(path, True, monkeypatch), _load(path, False, monkeypatch), path.name)
    assert read and read[0] is not None


def test_gzip_document_bigger_than_its_trailer_says_goes_the_other_way(tmp_path, monkeypatch):
    """Two gzip members: the trailer gives the last one's size only; past PIECE_BYTES the native
    way stops and the piece-by-piece way reads the file, with the same tables."""
    from goodhart_prof.trace import native_gzip
    doc = json.dumps({"traceEvents": _base_events() * 50}).encode()
    path = tmp_path / "two.json.gz"
    path.write_bytes(gzip.compress(doc[:len(doc) // 2]) + gzip.compress(doc[len(doc) // 2:]))
    monkeypatch.setattr(columnar, "PARALLEL_BYTES", 1)
    monkeypatch.setattr(native_gzip, "PIECE_BYTES", len(doc) // 3)
    monkeypatch.setattr(native_gzip, "CHUNK_BYTES", 4 << 10)
    assert native_gzip.document(path) is None
    assert_same(_load(path, True, monkeypatch), _load(path, False, monkeypatch), "two members")
