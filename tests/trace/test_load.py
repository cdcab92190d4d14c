"""trace/: every format variant loads into the same table; ranks; splitting; malformed events."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

import goodhart_prof.trace.load as loader
import goodhart_prof.trace.pieces as cutter
import goodhart_prof.trace.ranges as ranges
from goodhart_prof.trace import columnar, native_ranges
from goodhart_prof.analysis.host.links import gpu_launches
from goodhart_prof.trace.load import TraceError, load
from tests.support.paths import DATA

SHARED = DATA  # copies of ../shared/traces (tests/data/SOURCES.md)


def need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"{path} not present (shared traces live beside the repository)")
    return path


def write(path: Path, doc, gz: bool = False) -> Path:
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def kernel(ts, dur, corr, name="k", pid=0, tid=7, **args):
    return {"ph": "X", "cat": "kernel", "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            "args": {"device": pid if isinstance(pid, int) else 0, "stream": tid, "correlation": corr, **args}}


def launch(ts, dur, corr, pid=100, tid=100):
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": pid, "tid": tid,
            "ts": ts, "dur": dur, "args": {"correlation": corr, "External id": corr}}


def test_2021_format_capitalised_categories_and_string_tids():
    tr = load(need(SHARED / "kineto" / "resnet50_v100_2021.pt.trace.json.gz"))
    cats = set(tr.events["cat"].astype(str))
    assert {"kernel", "cpu_op", "cuda_runtime", "gpu_memcpy"} <= cats
    assert not cats & {"Kernel", "Operator", "Runtime", "Memcpy"}
    gpu = tr.gpu
    assert (gpu["stream"] == 7).mean() > 0.9  # "stream 7" tids became stream 7
    assert tr.devices == [(0, 0)]
    memcpy = gpu[gpu["cat"] == "gpu_memcpy"]
    assert memcpy["bytes"].notna().all() and memcpy["external_id"].ge(0).all()  # "external id"
    assert (gpu_launches(tr)["launch_row"] >= 0).all()


def test_rocm_trace_hip_names_and_hex_streams():
    tr = load(DATA / "hta" / "mi250_minitoy_rocm.json.gz")
    names = set(tr.events["name"].astype(str))
    assert "hipMemcpyWithStream" in names and any(n.startswith("Cijk_") for n in names)
    assert tr.devices == [(0, 2)]
    links = gpu_launches(tr)
    assert (links["launch_row"] >= 0).mean() > 0.9


def test_current_kineto_with_base_time_and_device_properties():
    tr = load(DATA / "tracelens" / "h100_owlv2_inference.json.gz")
    assert tr.rank_source == "single file" and tr.ranks == [0]
    assert tr.device_properties[0][0]["name"].startswith("NVIDIA H100")
    ev = tr.events
    assert ev["ts"].is_monotonic_increasing and (ev["dur"] >= 0).all()
    assert (ev["end"] == ev["ts"] + ev["dur"]).all()
    # with_stack frames live apart from the events table, with their ids and names.
    frames = tr.frames
    # 65,313 frames in the file; torch's own and built-in calls can never be a user site, so
    # 55,373 are dropped; of torch's, only the packages whose code reads or syncs on the user's
    # behalf stay (trace.model.KEPT_TORCH_FRAMES: here torch.profiler's 13, around its own
    # device synchronize).
    assert len(frames) == 65_313 - 55_373 + 13 and not (ev["cat"] == "python_function").any()
    torch_own = [n for n in frames["name"] if n.startswith(("torch/", "<built-in "))]
    assert len(torch_own) == 13 and all(n.startswith("torch/profiler/profiler.py(") for n in torch_own)
    assert (frames["python_id"] >= 0).all() and (frames["end"] >= frames["ts"]).all()
    assert frames["ts"].tolist() == sorted(frames["ts"].tolist())
    assert all(isinstance(n, str) and n for n in frames["name"][:1000])


def test_eight_ranks_from_distributed_info_and_parallel_equals_serial():
    folder = need(SHARED / "param" / "dlrm_8rank")
    parallel = load(folder, workers=2)
    serial = load(folder, workers=1)
    assert parallel.ranks == list(range(8)) and parallel.rank_source == "distributedInfo"
    assert parallel.events.equals(serial.events)
    assert sorted(parallel.events.groupby("rank").size().index) == list(range(8))


def test_folder_without_rank_info_uses_file_order_and_says_so(tmp_path):
    for i in range(2):
        write(tmp_path / f"w{i}.json", {"traceEvents": [kernel(10 + i, 5, 1)]})
    tr = load(tmp_path)
    assert tr.rank_source == "file order" and tr.ranks == [0, 1]
    assert any("file order" in w for w in tr.warnings)


def test_two_files_claiming_one_rank_is_an_error(tmp_path):
    for i in range(2):
        write(tmp_path / f"w{i}.json", {"distributedInfo": {"rank": 3}, "traceEvents": [kernel(1, 1, 1)]})
    with pytest.raises(TraceError, match="claims rank 3"):
        load(tmp_path)


def test_merged_trace_ranks_from_process_names(tmp_path):
    doc = {"traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "rank 0"}},
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "rank 1"}},
        kernel(5, 2, 1, pid=0), kernel(6, 2, 1, pid=1)]}
    tr = load(write(tmp_path / "merged_trace.json", doc))
    assert tr.rank_source == "process names" and tr.ranks == [0, 1]
    assert tr.events["rank"].tolist() == [0, 1]


def test_string_pids_and_tids_get_stable_ids(tmp_path):
    doc = {"traceEvents": [
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
         "ts": 1, "dur": 100},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": "123", "tid": "456", "ts": 2, "dur": 3},
        kernel(4, 1, 9)]}
    ev = load(write(tmp_path / "t.json", doc)).events.set_index("name")
    assert ev.loc["aten::mm", "pid"] == 123 and ev.loc["aten::mm", "tid"] == 456
    assert ev.loc["PyTorch Profiler (0)", "pid"] < 0 and ev.loc["PyTorch Profiler (0)", "tid"] < 0


@pytest.mark.parametrize("odd", [None, 2.0, 2.5, "7", " 12 ", "1_000", "99999999999999999999", "x"],
                         ids=["ints", "integral-float", "float", "numeric-str", "spaced-str",
                              "underscored-str", "str-beyond-int64", "name"])
def test_id_columns_agree_with_the_row_by_row_definition(odd):
    """pid/tid through the real decoder: all ints but a tail of string ids (Kineto's last event)
    take the C-level path; a float id makes the decoder fall back to its loose types, an odd
    string the table builder to its slower path; every path gives `int_id` of each value."""
    from goodhart_prof.trace.decode import decode
    from goodhart_prof.trace.columns import int_id
    from goodhart_prof.trace.tables import events_table
    pids = [5, 1 << 40, 5, 9] + ([odd] if odd is not None else []) + [3, "Spans", "Spans", "x"]
    doc = {"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": p, "tid": 0, "ts": float(i),
                            "dur": 1.0} for i, p in enumerate(pids)]}
    decoded, skipped = decode(json.dumps(doc).encode())
    assert skipped == 0 and decoded.int_or_str_ids == (not isinstance(odd, float))
    names: dict = {}
    expected = [int_id(p, names) for p in pids]
    got = events_table(decoded)[0]["pid"].tolist()
    assert got == expected
    assert got[-3] == got[-2] < 0 and got[-1] < 0 and got[-1] != got[-2]
    if isinstance(odd, float):  # a float id is a name of its own (not the int it equals)
        assert got[4] < 0
    if odd in ("7", " 12 ", "1_000"):  # numeric strings are read as int() reads them
        assert got[4] == int(odd)
    if odd == "99999999999999999999":  # beyond int64: a name
        assert got[4] < 0


def test_malformed_events_are_skipped_and_counted(tmp_path):
    doc = {"traceEvents": [kernel(1, 2, 1), {"ph": "X", "cat": "kernel", "name": "bad", "ts": "soon"},
                           {"ph": "X", "cat": "kernel", "name": "no ts", "pid": 0, "tid": 7},
                           "not an event", kernel(5, -3, 2), kernel(9, 1, 3)]}
    tr = load(write(tmp_path / "t.json", doc))
    assert tr.skipped_events == 3
    assert any("skipped 3 malformed" in w for w in tr.warnings)
    assert tr.events["name"].astype(str).tolist() == ["k", "k", "k"]
    assert tr.events["dur"].tolist() == [2.0, 0.0, 1.0]  # a negative duration counts as an instant


def _big_doc(n: int, tricky_names: bool) -> dict:
    events = []
    for i in range(n):
        name = f"op {i} }}, {{ \"ph\": \"X\" }},{{" if tricky_names else f"op{i}"
        events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": 10.0 * i,
                       "dur": 5.0, "args": {"External id": i, "nested": [{"a": 1}, {"b": 2}]}})
        events.append(launch(10.0 * i + 1, 1, i))
        events.append(kernel(10.0 * i + 3, 2, i))
    return {"schemaVersion": 1, "traceEvents": events, "traceName": "after the events"}


@pytest.mark.skipif(not columnar.AVAILABLE, reason="the native decoder is not built here")
@pytest.mark.parametrize("tricky", [False, True], ids=["plain", "separators-inside-names"])
def test_native_windows_equal_whole_decode(tmp_path, monkeypatch, tricky):
    """A plain file read natively in windows on two threads (native_ranges.py) gives the tables
    of a whole decode; a cut inside a name hands the file to the msgspec way, with the same result."""
    path = write(tmp_path / "big.json", _big_doc(3000, tricky))
    whole = load(path, workers=1)
    monkeypatch.setattr(loader, "PIECE_BYTES", path.stat().st_size // 3)
    monkeypatch.setattr(native_ranges, "WINDOW_BYTES", path.stat().st_size // 5)
    windows, handed = [], []
    original = native_ranges._window
    monkeypatch.setattr(native_ranges, "_window", lambda chunk, hi: windows.append(hi) or original(chunk, hi))
    fallback = ranges.file_ranges
    monkeypatch.setattr(ranges, "file_ranges", lambda *a, **k: handed.append(1) or fallback(*a, **k))
    split = load(path, workers=2)
    assert split.events.equals(whole.events) and len(split.events) == 9000
    assert len(windows) >= (1 if tricky else 5)
    assert bool(handed) == tricky  # a window cut inside a name is not JSON: the msgspec way reads the file


@pytest.mark.parametrize("tricky,gz", [(False, False), (True, False), (False, True)],
                         ids=["plain", "separators-inside-names", "gzip"])
def test_split_decode_equals_whole_decode(tmp_path, monkeypatch, tricky, gz):
    """The msgspec way's pieces (the native decoder off: native_ranges has its own test)."""
    monkeypatch.setattr(columnar, "AVAILABLE", False)
    path = write(tmp_path / ("big.json.gz" if gz else "big.json"), _big_doc(3000, tricky), gz=gz)
    whole = load(path, workers=1)
    size = len(gzip.decompress(path.read_bytes())) if gz else path.stat().st_size
    monkeypatch.setattr(loader, "PIECE_BYTES", size // 3)  # cut even this small file into pieces
    monkeypatch.setattr(cutter, "TAIL_GUARD", 0)
    used = []
    original = ranges.events_of
    monkeypatch.setattr(ranges, "events_of", lambda raw: used.append(len(raw)) or original(raw))
    split = load(path, workers=3)
    assert split.events.equals(whole.events)
    # A cut inside a name makes that piece invalid JSON: it is grown to the next cut.
    assert len(used) >= (2 if gz else 1)  # the workers' pieces are not counted here
    assert len(whole.events) == 9000 and np.isfinite(whole.events["ts"]).all()
