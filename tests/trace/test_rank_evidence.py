"""Which rank and which GPU each event belongs to, when the evidence is odd or contradicts itself:
string and mixed pids named `rank <r>`, distributedInfo.rank against process names and file
names, device and stream ids past int32 (tests/support/broken_corpus.py runs the same inputs through the
command line). Every figure is worked out by hand from the events written here."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from goodhart_prof.analysis.gpu.device_time import gpu_time
from goodhart_prof.trace.load import TraceError, load


def write(path: Path, doc: dict) -> Path:
    path.write_text(json.dumps(doc))
    return path


def op(ts, dur, pid, name="aten::mm", tid=1, cat="cpu_op"):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}


def gpu(ts, dur, pid, name, device=0, stream=7, cat="kernel", tid=1_000_000_007):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            "args": {"device": device, "stream": stream}}


def process_name(pid, name):
    return {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}}


def two_ranks(pid0, pid1) -> list[dict]:
    """A merged two-rank trace's events (the layout merge.py writes): each rank's host op and
    two kernels on its GPU 0. Rank 0's kernels cover 20-50 and 60-80 (busy 50 of a 60 us span),
    rank 1's 1020-1050 and 1100-1120 (busy 50 of 100 us)."""
    return [process_name(pid0, "rank 0"), process_name(pid1, "rank 1"),
            op(10, 80, pid0, "host0 step"), gpu(20, 30, pid0, "r0 k1"), gpu(60, 20, pid0, "r0 k2"),
            op(1010, 120, pid1, "host1 step"), gpu(1020, 30, pid1, "r1 k1"), gpu(1100, 20, pid1, "r1 k2")]


def ranks_by_name(trace) -> dict[str, int]:
    ev = trace.events
    return dict(zip(ev["name"].astype(str), ev["rank"].tolist()))


EXPECTED_RANKS = {"host0 step": 0, "r0 k1": 0, "r0 k2": 0, "host1 step": 1, "r1 k1": 1, "r1 k2": 1}


def utilization(trace) -> dict[tuple[int, int], float]:
    g = gpu_time(trace)
    return {(int(r), int(d)): round(float(u), 6) for r, d, u in zip(g["rank"], g["device"], g["utilization"])}


# -- string and mixed pids ---------------------------------------------------------------------
@pytest.mark.parametrize("pids", [("host0", "host1"), ("host1 rank 0", "host0 rank 1"),
                                  (0, "worker"), ("worker", 0), (2**40, 2**40 + 1), (7, 2**70)],
                         ids=["strings", "strings_reversed", "int_then_string", "string_then_int",
                              "beyond_int32", "beyond_int64"])
def test_each_pid_takes_its_own_process_names_rank(tmp_path, pids):
    """Every string pid used to map to the same stand-in (-2) when the names were read, so the
    first host's events took the last `rank <r>` named and `--rank 0` found no rank 0."""
    trace = load(write(tmp_path / "merged.json", {"traceEvents": two_ranks(*pids)}))
    assert trace.ranks == [0, 1] and trace.rank_source == "process names"
    assert ranks_by_name(trace) == EXPECTED_RANKS
    assert utilization(trace) == {(0, 0): round(50 / 60, 6), (1, 0): 0.5}
    assert trace.warnings == []
    assert sorted(trace.select(rank=0).events["name"].astype(str)) == ["host0 step", "r0 k1", "r0 k2"]


def test_frames_and_memory_events_of_a_string_pid_take_its_rank(tmp_path):
    """The python frames and `[memory]` instants of a host named by a string pid follow the same
    pid -> rank mapping as its complete events."""
    events = two_ranks("host0", "host1") + [
        {"ph": "X", "cat": "python_function", "name": "train.py(3): step", "pid": "host1", "tid": 1,
         "ts": 1012, "dur": 5, "args": {"Python id": 1}},
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": "host1", "tid": 1, "ts": 1015,
         "s": "t", "args": {"Device Type": 1, "Device Id": 0, "Bytes": 512, "Addr": 1,
                            "Total Allocated": 512, "Total Reserved": 2048}},
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": "host0", "tid": 1, "ts": 15,
         "s": "t", "args": {"Device Type": 1, "Device Id": 0, "Bytes": 256, "Addr": 2,
                            "Total Allocated": 256, "Total Reserved": 2048}}]
    trace = load(write(tmp_path / "merged.json", {"traceEvents": events}))
    assert ranks_by_name(trace) == EXPECTED_RANKS
    assert trace.frames["rank"].tolist() == [1]
    assert dict(zip(trace.memory["bytes"].tolist(), trace.memory["rank"].tolist())) == {256.0: 0, 512.0: 1}


# -- distributedInfo against process names and file names ------------------------------------------
def test_distributed_info_contradicting_the_process_names_warns_and_uses_the_names(tmp_path):
    """A merged two-rank trace whose header says distributedInfo.rank 5 used to become one rank 5
    whose GPU 0 was the union of both ranks' GPU 0: busy 100 us of a 1,100 us span (9.1%)."""
    doc = {"distributedInfo": {"rank": 5, "world_size": 8}, "traceEvents": two_ranks(0, 1)}
    trace = load(write(tmp_path / "merged.json", doc))
    assert trace.ranks == [0, 1] and trace.rank_source == "process names"
    assert ranks_by_name(trace) == EXPECTED_RANKS
    assert utilization(trace) == {(0, 0): round(50 / 60, 6), (1, 0): 0.5}
    assert trace.warnings == ["rank evidence conflicts in merged.json: distributedInfo.rank 5, "
                              "process names rank 0/rank 1; using the process names"]


def test_distributed_info_agreeing_with_the_process_name_is_no_conflict(tmp_path):
    events = [process_name(4321, "rank 3"), op(1, 10, 4321), gpu(2, 4, 0, "k", device=3)]
    trace = load(write(tmp_path / "rank-3.json", {"distributedInfo": {"rank": 3}, "traceEvents": events}))
    assert trace.ranks == [3] and trace.rank_source == "distributedInfo"
    assert trace.events["rank"].tolist() == [3, 3] and trace.warnings == []


def test_a_file_name_contradicting_distributed_info_is_a_warning(tmp_path):
    events = [op(1, 10, 1), gpu(2, 4, 0, "k")]
    trace = load(write(tmp_path / "rank-1.json", {"distributedInfo": {"rank": 5}, "traceEvents": events}))
    assert trace.ranks == [5] and trace.events["rank"].tolist() == [5, 5]
    assert trace.warnings == ["rank evidence conflicts in rank-1.json: distributedInfo.rank 5, "
                              "file name rank 1; using distributedInfo.rank"]


def test_folder_with_one_file_whose_distributed_info_contradicts_its_process_names(tmp_path):
    """rank-0.json is an ordinary rank file; rank-1.json holds ranks 1 and 2 as a merge names them
    but says distributedInfo.rank 0 (which rank-0.json claims). The names win for that file, the
    other file keeps its distributedInfo, and nothing falls back to file order."""
    write(tmp_path / "rank-0.json", {"distributedInfo": {"rank": 0},
                                     "traceEvents": [op(1, 10, 1, "r0 op"), gpu(2, 4, 0, "r0 k")]})
    events = [process_name(1, "rank 1"), process_name(2, "rank 2"),
              op(1, 10, 1, "r1 op"), op(1, 10, 2, "r2 op"), gpu(2, 4, 2, "r2 k")]
    write(tmp_path / "rank-1.json", {"distributedInfo": {"rank": 0}, "traceEvents": events})
    trace = load(tmp_path)
    assert trace.ranks == [0, 1, 2] and trace.rank_source == "distributedInfo and process names"
    assert ranks_by_name(trace) == {"r0 op": 0, "r0 k": 0, "r1 op": 1, "r2 op": 2, "r2 k": 2}
    assert trace.warnings == ["rank evidence conflicts in rank-1.json: distributedInfo.rank 0, "
                              "process names rank 1/rank 2; using the process names"]


def test_folder_file_whose_names_claim_anothers_rank_is_an_error(tmp_path):
    write(tmp_path / "a.json", {"distributedInfo": {"rank": 1}, "traceEvents": [op(1, 10, 1)]})
    events = [process_name(0, "rank 0"), process_name(1, "rank 1"), op(1, 10, 0), op(1, 10, 1)]
    write(tmp_path / "b.json", {"traceEvents": events})
    with pytest.raises(TraceError, match=r"b\.json: claims rank 1, like a\.json"):
        load(tmp_path)


# -- device and stream ids keep their full width ----------------------------------------------------
def test_device_and_stream_ids_never_wrap_or_merge(tmp_path):
    """Device 2^32 used to wrap to 0 in an int32 column and merge with GPU 0; 2^31 became
    -2^31 and 2^63-1 became -1 (then the pid). Ids that no int64 holds, and negative ones, are
    malformed: skipped and counted."""
    kept = [(0, 7), (2**31, 7), (2**32, 2**32), (2**63 - 1, 2**63 - 1)]
    events = [op(0, 100, 1)] + [gpu(10 + 10 * i, 5, 0, f"k{i}", d, s) for i, (d, s) in enumerate(kept)]
    bad = [(-1, 7), (2**64, 7), (0, -3), (0, 2**64)]
    events += [gpu(60 + 10 * i, 5, 0, f"bad{i}", d, s) for i, (d, s) in enumerate(bad)]
    trace = load(write(tmp_path / "devices.json", {"traceEvents": events}))
    g = trace.gpu
    assert list(zip(g["name"].astype(str), g["device"].tolist(), g["stream"].tolist())) == \
        [(f"k{i}", d, s) for i, (d, s) in enumerate(kept)]
    assert trace.skipped_events == 4
    assert [d for _, d in trace.devices] == [0, 2**31, 2**32, 2**63 - 1]
    assert trace.warnings == ["skipped 4 malformed event(s) in devices.json"]


def test_ids_in_digits_int_refuses_read_as_absent(tmp_path):
    """`"²".isdigit()` is true but int() refuses it: a traceback (ValueError) before."""
    k = {**gpu(10, 5, 3, "k", device="\u00b2", stream="\u00b2", tid=9)}
    k["args"]["correlation"] = "\u00b2"
    trace = load(write(tmp_path / "sup.json", {"traceEvents": [op(0, 20, 1), k]}))
    g = trace.gpu
    assert (g["device"].tolist(), g["stream"].tolist(), g["correlation"].tolist()) == ([3], [9], [-1])


def test_memory_device_ids_keep_their_width(tmp_path):
    events = [op(0, 100, 1)] + [
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 1 + i,
         "s": "t", "args": {"Device Type": 1, "Device Id": d, "Bytes": 64, "Addr": i,
                            "Total Allocated": 64, "Total Reserved": 64}}
        for i, d in enumerate([0, 2**32, 2**31])]
    trace = load(write(tmp_path / "mem.json", {"traceEvents": events}))
    assert trace.memory["device"].tolist() == [0, 2**32, 2**31]


# -- a folder without distributedInfo: the ranks the file names state ---------------------------------
def test_folder_ranks_from_file_names_survive_the_exports(tmp_path):
    """rank-10.json sorts before rank-2.json: file order made rank-10 rank 0. The names state
    their ranks, and the Chrome JSON and Perfetto exports keep them."""
    from goodhart_prof.analysis import analyze
    from goodhart_prof.report.export.chrome_json import write_chrome_json
    from goodhart_prof.report.export.perfetto import write_perfetto
    from tests.support.pftrace import decode
    folder = tmp_path / "ranks"
    folder.mkdir()
    for rank, dur in ((2, 30), (10, 40)):
        write(folder / f"rank-{rank}.json", {"traceEvents": [op(1, 50, 77, f"op of {rank}"),
                                                             gpu(5, dur, 0, f"k of {rank}")]})
    trace = load(folder)
    assert trace.ranks == [2, 10] and trace.rank_source == "file names" and trace.warnings == []
    assert ranks_by_name(trace) == {"op of 2": 2, "k of 2": 2, "op of 10": 10, "k of 10": 10}
    a = analyze(trace)
    write_chrome_json(a, tmp_path / "merged.json")
    again = load(tmp_path / "merged.json")
    assert again.ranks == [2, 10] and ranks_by_name(again) == ranks_by_name(trace)
    write_perfetto(a, tmp_path / "t.pftrace")
    pf = decode(tmp_path / "t.pftrace")
    ranks_of_slices = {name: pf.rank_of(uuid) for uuid, _, _, name, _, _ in pf.slices}
    assert {n: ranks_of_slices[n] for n in ("op of 2", "k of 2", "op of 10", "k of 10")} == \
        {"op of 2": "rank 2", "k of 2": "rank 2", "op of 10": "rank 10", "k of 10": "rank 10"}


def test_analyze_rank_0_of_a_merged_trace_with_string_pids(tmp_path):
    """`analyze --rank 0` said `no rank 0 (ranks: [1])` on this trace."""
    import subprocess
    import sys
    from tests.support.helpers import clean_env
    path = write(tmp_path / "merged.json", {"traceEvents": two_ranks("host0", "host1")})
    res = subprocess.run([sys.executable, "-m", "goodhart_prof.cli", "analyze", str(path), "--rank", "0",
                          "--json"], capture_output=True, text=True, env=clean_env(), timeout=120)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["trace"]["ranks"] == [0] and doc["trace"]["rank_source"] == "process names"
    assert {k: (g["busy_us"], g["span_us"]) for k, g in doc["gpu"].items()} == {"rank0/gpu0": (50.0, 60.0)}
