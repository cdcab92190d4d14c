"""goodhart_prof/trace/merge.py: per-rank trace files -> one merged trace. Each rank one process
named `rank <r>`, GPU streams its threads (`merged_gpu_tid`), times shifted onto the earliest
base, the header holding what the ranks share (`merged_header`) and each rank's own fields kept
under `goodhartProf`; the merged file loads back with the ranks it was given."""
from __future__ import annotations

import gzip
import json

from goodhart_prof.trace.load import load
from goodhart_prof.trace.merge import merge_rank_traces, merged_header, remap_rank
from goodhart_prof.trace.model import merged_gpu_tid


def _kineto_like(pid: int, base_ns: int, ts: float, rank: int) -> dict:
    return {
        "baseTimeNanoseconds": base_ns,
        "distributedInfo": {"rank": rank, "world_size": 2, "backend": "nccl"},
        "traceEvents": [
            {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "python"}},
            {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7"}},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": pid, "tid": pid, "ts": ts, "dur": 5.0},
            {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": ts + 2, "dur": 3.0,
             "args": {"device": 0, "stream": 7, "correlation": 11}},
        ],
    }


def test_merge_ranks_one_process_each_and_aligned_time(tmp_path):
    files = {}
    for rank, (pid, base) in enumerate(((4242, 1_000_000_000), (4343, 1_000_002_000))):
        files[rank] = tmp_path / f"rank-{rank}.pt.trace.json.gz"
        with gzip.open(files[rank], "wt") as fh:
            json.dump(_kineto_like(pid, base, 100.0, rank), fh)
    merge_rank_traces(files, tmp_path / "merged_trace.json")
    merged = json.loads((tmp_path / "merged_trace.json").read_text())
    names = {e["pid"]: e["args"]["name"] for e in merged["traceEvents"] if e.get("name") == "process_name"}
    assert names == {0: "rank 0", 1: "rank 1"}
    ops = {e["pid"]: e for e in merged["traceEvents"] if e.get("name") == "aten::mm"}
    kernels = {e["pid"]: e for e in merged["traceEvents"] if e.get("name") == "gemm"}
    # Rank 1's clock base is 2 us later: its events move 2 us later on the common base.
    assert merged["baseTimeNanoseconds"] == 1_000_000_000
    assert ops[0]["ts"] == 100.0 and ops[1]["ts"] == 102.0
    # GPU streams become their own threads of the rank's process, device kept in args.
    assert kernels[1]["tid"] == 1_000_000_000 + 7 and kernels[1]["args"]["device"] == 0
    assert merged["goodhartProf"]["distributedInfo"]["1"]["rank"] == 1


def test_the_merged_file_loads_back_with_its_ranks(tmp_path):
    files = {}
    for rank, pid in ((0, 11), (3, 12)):
        files[rank] = tmp_path / f"r{rank}.json"
        files[rank].write_text(json.dumps(_kineto_like(pid, 5_000, 100.0, rank)))
    summary = merge_rank_traces(files, tmp_path / "merged_trace.json")
    assert summary == {"ranks": [0, 3], "events": {0: 5, 3: 5}}  # 2 process entries + 3 kept events each
    trace = load(tmp_path / "merged_trace.json", progress=False)
    assert trace.ranks == [0, 3] and trace.world_size == 2
    kernels = trace.events[trace.events["cat"] == "kernel"]
    assert sorted(kernels["rank"].tolist()) == [0, 3] and kernels["ts"].tolist() == [102.0, 102.0]


def test_remap_rank_moves_gpu_streams_into_the_ranks_process():
    events = [
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
        {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "args": {"labels": "x"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 20, "args": {"name": "stream 20"}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 1, "tid": 20, "ts": 10, "dur": 1, "args": None},
        {"ph": "X", "cat": "gpu_memcpy", "name": "m", "pid": 1, "tid": "stream 0x1", "ts": "odd", "dur": 1},
        {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 77, "tid": 78, "ts": 9.5, "dur": 1},
    ]
    out = remap_rank(events, 2, 0.5)
    assert out[:2] == [
        {"ph": "M", "name": "process_name", "pid": 2, "tid": 0, "args": {"name": "rank 2"}},
        {"ph": "M", "name": "process_sort_index", "pid": 2, "tid": 0, "args": {"sort_index": 2}}]
    thread, kernel, copy, op = out[2:]
    assert thread["tid"] == merged_gpu_tid(1, 20) == 1_000_001_020 and thread["args"] == {"name": "GPU 1 stream 20"}
    assert (kernel["pid"], kernel["tid"], kernel["ts"], kernel["args"]) == (2, 1_000_001_020, 10.5, {"device": 1})
    assert (copy["tid"], copy["ts"]) == (merged_gpu_tid(1, 0), "odd")  # a text stream: stream 0; no time to shift
    assert (op["pid"], op["tid"], op["ts"]) == (2, 78, 10.0)
    assert events[3]["pid"] == 1 and events[3]["ts"] == 10  # the input is not changed


def test_the_header_keeps_what_the_ranks_share_and_each_ranks_own():
    info = {r: {"rank": r, "world_size": 3, "backend": b} for r, b in ((0, "nccl"), (1, "gloo"), (2, "nccl"))}
    docs = {0: {"deviceProperties": [], "distributedInfo": info[0], "baseTimeNanoseconds": 7},
            1: {"deviceProperties": [{"name": "A100"}], "distributedInfo": info[1], "baseTimeNanoseconds": 7},
            2: {"distributedInfo": info[2], "baseTimeNanoseconds": 7}}
    header, kept = merged_header(docs)
    assert header == {"deviceProperties": [{"name": "A100"}], "distributedInfo": {"world_size": 3},
                      "baseTimeNanoseconds": 7}  # the backends differ: left out
    assert kept == {"distributedInfo": {"0": info[0], "1": info[1], "2": info[2]},
                    "baseTimeNanoseconds": {"0": 7, "1": 7, "2": 7}}  # a rank with no list: no conflict
    docs[2]["deviceProperties"] = [{"name": "H100"}]
    docs[2]["baseTimeNanoseconds"] = 8
    del docs[0]["distributedInfo"]
    header, kept = merged_header(docs)
    assert header == {"deviceProperties": [{"name": "A100"}]}  # no shared base; one rank states no info
    assert kept["deviceProperties"] == {"0": [], "1": [{"name": "A100"}], "2": [{"name": "H100"}]}
    assert kept["distributedInfo"]["0"] is None
    assert merged_header({}) == ({"deviceProperties": []}, {"distributedInfo": {}, "baseTimeNanoseconds": {}})
