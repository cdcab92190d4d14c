"""The critical path (analysis/critical/path.py): against HTA's own output on its simple_add input,
and on small hand-made traces whose path is worked out by hand."""
from __future__ import annotations

import gzip
import json

import pytest

from goodhart_prof.analysis.critical.path import critical_path
from goodhart_prof.report.json_report import critical_path_json
from goodhart_prof.trace.load import load
from tests.support.events import X
from tests.support.hta_table import read_hta
from tests.support.paths import DATA as FIXTURES

DATA = FIXTURES / "hta"
HTA_INPUT = DATA / "critical_path_simple_add.json.gz"
HTA_OUTPUT = DATA / "critical_path_simple_add_hta_overlaid.json.gz"
BLOCKING = {"cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventQuery", "cudaEventSynchronize",
            "cudaMemcpy"}


def load_events(tmp_path, events, name="t.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"traceEvents": events}))
    return load(path, progress=False)


def path_events(trace, it) -> set[tuple[str, int]]:
    ev = trace.events.loc[it.rows]
    return {(str(n), int(round(ts))) for n, ts in zip(ev["name"], ev["ts"])}


def hta_path(events: list[dict]) -> tuple[set[tuple[str, int]], float]:
    """The ops HTA marks critical, and its path's length read back from its overlaid trace: the
    path runs from its first node to its last, and every edge weighs the time between its nodes
    except the weight-0 ones, whose time is taken off: the dependency and sync edges (its
    `critical_path` flows; a flow leaving a GPU event is written 1 us before the event's end, put
    back here) and the exit from a blocking call the path did not reach by a sync edge."""
    critical = [e for e in events if e.get("ph") == "X" and e.get("args", {}).get("critical")]
    first = min(e["ts"] for e in critical)
    last = max(e["ts"] + e["dur"] for e in critical)
    flows: dict[int, dict] = {}
    for e in events:
        if e.get("cat") == "critical_path":
            flows.setdefault(e["id"], {})[e["ph"]] = e
    gpu_ends = {(e["pid"], e["tid"], e["ts"] + e["dur"] - min(1, e["dur"])): e["ts"] + e["dur"]
                for e in events if e.get("ph") == "X" and e.get("args", {}).get("device", -1) >= 0}
    skipped, sync_ends = 0.0, set()
    for f in flows.values():
        s, t = f["s"], f["f"]
        if s["args"]["type"] in ("critical_path_dependency", "critical_path_sync_dependency"):
            start = gpu_ends.get((s["pid"], s["tid"], s["ts"]), s["ts"])
            skipped += t["ts"] - start
            if s["args"]["type"] == "critical_path_sync_dependency":
                sync_ends.add((t["tid"], t["ts"]))
    skipped += sum(e["dur"] for e in critical
                   if e["name"] in BLOCKING and (e["tid"], e["ts"] + e["dur"]) not in sync_ends)
    return {(e["name"], int(e["ts"])) for e in critical}, last - first - skipped


def test_simple_add_matches_hta_output():
    trace = load(HTA_INPUT, progress=False)
    with gzip.open(HTA_OUTPUT) as f:
        expected, hta_length = hta_path(json.load(f)["traceEvents"])
    cp = critical_path(trace)
    assert cp.scope == "trace" and len(cp.iterations) == 1  # no ProfilerStep#N: the whole trace
    assert critical_path_json(cp)["iterations_found"] == 0 and critical_path_json(cp)["shown_step"] == -1
    it = cp.iterations[0]
    assert path_events(trace, it) == expected  # the same 624 ops and kernels
    assert len(expected) == 624
    assert abs(it.length_us - hta_length) <= 0.01 * hta_length  # measured: equal, 41,435,012 us
    assert it.launch_us == 1572.0  # the sum of the launch edges' weights HTA writes on its flows
    assert it.bound == "host" and it.host_share > 0.99
    assert it.ops.iloc[0]["name"] == "cudaDeviceGetStreamPriorityRange"


WAITS = FIXTURES / "ours" / "critical" / "event_waits.json.gz"  # its docstring: event_waits.py beside it
WAITS_HTA = FIXTURES / "ours" / "critical" / "event_waits_hta.tsv"  # HTA 0.5.0's path of it


def test_cuda_event_waits_match_hta(tmp_path):
    # By hand: fwd to the first launch 10, its launch wait 10, KA 500, KB 100 after KA (Stream
    # Wait Event, weight 0), cudaEventSynchronize ends after KB (Event Sync), tail 70 = 690; step2
    # to KD's launch 16 (its launch call, a record), the launch wait 6, KD 100, the 0 us gap, KE
    # 10, KF 200 after KE and KH 10 after KF (Stream Wait Events), the device sync after KH,
    # end 10: 1042 us. Host 10 + 70 + 16 + 10, launch waits 16, GPU 920. HTA 0.5.0 finds the same.
    trace = load(WAITS, progress=False)
    hta = read_hta(WAITS_HTA)
    it = critical_path(trace).iterations[0]
    assert it.length_us == hta["with_wait_args"]["length_us"] == 1042
    assert sorted(map(list, path_events(trace, it))) == hta["with_wait_args"]["path_events"]
    assert (it.host_us, it.launch_us, it.gpu_us, it.gap_us) == (106.0, 16.0, 920.0, 0.0)
    assert it.bound == "gpu" and {"KA", "KF", "KH"} <= set(it.ops["name"])
    # Without what the sync events wait on (the args gone), KB follows its own launch (495 us
    # after it) and nothing leads back to the host: the path ends at KB, 30 + 495 + 100 = 625 us,
    # and KA is not on it; HTA 0.5.0 on that trace finds the same.
    doc = json.loads(gzip.decompress(WAITS.read_bytes()))
    for e in doc["traceEvents"]:
        e["args"].pop("wait_on_stream", None)
        e["args"].pop("wait_on_cuda_event_record_corr_id", None)
    bare = load_events(tmp_path, doc["traceEvents"])
    it = critical_path(bare).iterations[0]
    assert (it.length_us, it.launch_us, it.gpu_us) == (625.0, 495.0, 100.0)
    assert ("KA", 20) not in path_events(bare, it) and ("KB", 525) in path_events(bare, it)
    assert it.length_us == hta["without_wait_args"]["length_us"]
    assert sorted(map(list, path_events(bare, it))) == hta["without_wait_args"]["path_events"]


def test_what_if_through_an_event_wait():
    # Without KA the chain still runs through the wait: KA's end is reached at 20 (fwd 10, launch
    # wait 10), KB after it, and the rest as before: 1042 - 500 = 542 us.
    it = critical_path(load(WAITS, progress=False)).iterations[0]
    assert (it.what_if[0].name, it.what_if[0].path_without_us) == ("KA", 542.0)


def launch(ts, dur, corr, tid=100):
    return X("cudaLaunchKernel", "cuda_runtime", ts, dur, tid=tid, correlation=corr)


def kernel(name, ts, dur, corr, stream=7):
    return X(name, "kernel", ts, dur, pid=0, tid=stream, device=0, stream=stream, correlation=corr)


def test_host_bound(tmp_path):
    # Thread 100: A [0,100] launches K1 (cudaLaunchKernel [10,15], K1 [20,30]); B [100,1100] is a
    # long CPU op; C [1100,1200] launches K2 ([1110,1115], K2 [1120,1130]); cudaDeviceSynchronize
    # [1200,1300] waits for K2 (Context Sync). By hand: the host chain A.s -10-> L1.s -5-> L1.e
    # -85-> A.e -0-> B.s -1000-> B.e -0-> C.s -10-> L2.s -5-> L2.e -85-> C.e = 1200 us; through
    # K2 from L2.s: 10 + 10 into the sync's end (weight 0), less than 5 + 85 on the host. The
    # sync's weight-0 edges after C.e end no path. Ops: B 1000, A 10 + 85, C 10 + 85, launches 5 + 5.
    events = [X("A", "cpu_op", 0, 100), launch(10, 5, 1), kernel("K1", 20, 10, 1),
              X("B", "cpu_op", 100, 1000),
              X("C", "cpu_op", 1100, 100), launch(1110, 5, 2), kernel("K2", 1120, 10, 2),
              X("cudaDeviceSynchronize", "cuda_runtime", 1200, 100, correlation=3),
              X("Context Sync", "cuda_sync", 1200, 100, pid=0, tid=0, device=0, correlation=3)]
    trace = load_events(tmp_path, events)
    it = critical_path(trace).iterations[0]
    assert it.length_us == 1200.0
    assert (it.host_us, it.launch_us, it.gpu_us, it.gap_us) == (1200.0, 0.0, 0.0, 0.0)
    assert it.bound == "host"
    assert path_events(trace, it) == {("A", 0), ("cudaLaunchKernel", 10), ("B", 100), ("C", 1100),
                                      ("cudaLaunchKernel", 1110)}
    ops = {(r.name, r.side): (r.us, r.count) for r in it.ops.itertuples()}
    assert ops == {("B", "host"): (1000.0, 1), ("A", "host"): (95.0, 1), ("C", "host"): (95.0, 1),
                   ("cudaLaunchKernel", "host"): (10.0, 2)}
    assert [(s.side, s.us) for s in it.segments] == [("host", 1200.0)]


def test_gpu_bound_stream_sync(tmp_path):
    # A [0,50] launches K1 ([10,20]; K1 [25,1025], 1 ms); cudaStreamSynchronize [60,1040] waits
    # for stream 7 (Stream Sync); then D [1040,1100]. By hand: into the sync call's end the host
    # brings 50 (A) + 0 (its exit weighs 0), the GPU 10 (A until the launch) + 15 (launch wait)
    # + 1000 (K1) + 0 (sync edge) = 1025; then D adds 60: 1085 us. Host 10 + 60, launch 15, GPU
    # 1000: GPU-bound. Segments: host 25 (to K1's start), GPU 1000, host 60.
    events = [X("A", "cpu_op", 0, 50), launch(10, 10, 1), kernel("K1", 25, 1000, 1),
              X("cudaStreamSynchronize", "cuda_runtime", 60, 980, correlation=2),
              X("Stream Sync", "cuda_sync", 60, 980, pid=0, tid=7, device=0, stream=7, correlation=2),
              X("D", "cpu_op", 1040, 60)]
    trace = load_events(tmp_path, events)
    it = critical_path(trace).iterations[0]
    assert it.length_us == 1085.0
    assert (it.host_us, it.launch_us, it.gpu_us, it.gap_us) == (70.0, 15.0, 1000.0, 0.0)
    assert it.bound == "gpu" and it.gpu_share == pytest.approx(1000 / 1085)
    assert path_events(trace, it) == {("A", 0), ("cudaLaunchKernel", 10), ("K1", 25),
                                      ("cudaStreamSynchronize", 60), ("D", 1040)}
    assert [(s.side, s.ts, s.end, s.us) for s in it.segments] == [
        ("host", 0.0, 25.0, 25.0), ("gpu", 25.0, 1025.0, 1000.0), ("host", 1040.0, 1100.0, 60.0)]


def test_what_if_recomputes_the_path(tmp_path):
    # The GPU-bound trace above (1085 us: A 10, launch wait 15, K1 1000, D 60). Without K1 the
    # path is not 1085 - 1000 = 85 (the GPU route: A 10 + wait 15 + D 60) but the host's 110:
    # A's 50 (its launch call included), the sync's exit (0), D 60. Without D: 1025. Without A
    # (its own time 10 + 30 at 0, the launch call's 10 kept): the GPU route 15 + 1000 + 60 = 1075;
    # A holds 10 of 1085 us, under WHAT_IF_SHARE (5%): not recomputed.
    events = [X("A", "cpu_op", 0, 50), launch(10, 10, 1), kernel("K1", 25, 1000, 1),
              X("cudaStreamSynchronize", "cuda_runtime", 60, 980, correlation=2),
              X("Stream Sync", "cuda_sync", 60, 980, pid=0, tid=7, device=0, stream=7, correlation=2),
              X("D", "cpu_op", 1040, 60)]
    cp = critical_path(load_events(tmp_path, events))
    it = cp.iterations[0]
    assert [(w.name, w.side, w.on_path_us, w.path_without_us) for w in it.what_if] == [
        ("K1", "gpu", 1000.0, 110.0), ("D", "host", 60.0, 1025.0)]
    assert critical_path_json(cp)["iterations"][0]["what_if"][0] == {
        "name": "K1", "side": "gpu", "on_path_us": 1000.0, "path_without_us": 110.0}


def test_what_if_on_simple_add():
    # One host thread holds 99.9% of the path: without a name, nothing else takes over, so each
    # path without it is the length less its time on the path (41,435,012 - 24,587,247 us).
    it = critical_path(load(HTA_INPUT, progress=False)).iterations[0]
    first = it.what_if[0]
    assert (first.name, first.on_path_us, first.path_without_us) == (
        "cudaDeviceGetStreamPriorityRange", 24_587_247.0, 16_847_765.0)
    # the names holding 5%+ of the path (at most 5): the priority-range query (59.3%) and cudaFree (20.1%) first
    shares = (it.ops["us"] / it.length_us).head(5)
    assert [w.name for w in it.what_if] == list(it.ops["name"].head(5)[shares >= 0.05])
    assert [w.name for w in it.what_if][:2] == ["cudaDeviceGetStreamPriorityRange", "cudaFree"]
    assert all(it.length_us - w.on_path_us <= w.path_without_us <= it.length_us for w in it.what_if)
    # the spans (the export's track) tile the path: its length, in time order
    assert it.spans["us"].sum() == it.length_us == 41_435_012.0
    assert (it.spans["ts"].to_numpy()[1:] >= it.spans["end"].to_numpy()[:-1]).all()
    assert len(it.spans) == 1026


def test_device_sync_waits_for_the_longest_stream(tmp_path):
    # A [0,25] launches K7 on stream 7 ([10,14]; K7 [20,220]) and K8 on stream 8 ([15,19]; K8
    # [25,725]); cudaDeviceSynchronize [30,740] (Context Sync: every stream) then E [740,800].
    # By hand: K7's end is reached at 10 + 10 + 200 = 220, K8's at 10 + 4 + 1 + 10 + 700 = 725
    # (A to L7's start, L7, A between the launches, the launch wait, K8), the host at 25: the
    # sync call ends at 725 by K8, E adds 60: 785 us. K7 is not on the path.
    events = [X("A", "cpu_op", 0, 25), launch(10, 4, 1), launch(15, 4, 2),
              kernel("K7", 20, 200, 1, stream=7), kernel("K8", 25, 700, 2, stream=8),
              X("cudaDeviceSynchronize", "cuda_runtime", 30, 710, correlation=3),
              X("Context Sync", "cuda_sync", 30, 710, pid=0, tid=0, device=0, correlation=3),
              X("E", "cpu_op", 740, 60)]
    trace = load_events(tmp_path, events)
    it = critical_path(trace).iterations[0]
    assert it.length_us == 785.0
    assert (it.host_us, it.launch_us, it.gpu_us) == (75.0, 10.0, 700.0)
    names = path_events(trace, it)
    assert ("K8", 25) in names and ("K7", 20) not in names
    assert ("cudaDeviceSynchronize", 30) in names and ("E", 740) in names


def test_per_iteration_on_marked_steps(tmp_path):
    # Two ProfilerStep#N of 800 us, an op of 500 then 200 us in each: the median step by
    # duration (a tie: the first) is the one computed; `every` computes both, and the one shown
    # is the median path (of 2: the shorter, step 2: op 10 + 185 us around its 5 us launch).
    events = []
    for n, (start, long) in enumerate(((0, 500), (1000, 200))):
        events += [X(f"ProfilerStep#{n + 1}", "user_annotation", start, 800),
                   X("op", "cpu_op", start + 10, long), launch(start + 20, 5, 10 + n),
                   kernel("K", start + 30, 10, 10 + n)]
    trace = load_events(tmp_path, events)
    cp = critical_path(trace)
    assert cp.scope == "iteration" and cp.total == 2 and [it.step for it in cp.iterations] == [1]
    every = critical_path(trace, every=True)
    assert [round(it.length_us) for it in every.iterations] == [500, 200]
    doc = critical_path_json(every)
    assert doc["shown_step"] == 2 and doc["iterations_found"] == 2
    assert doc["ops"][0] == {"name": "op", "side": "host", "us": 195.0, "share": 0.975, "count": 1}


def test_no_gpu_activity(tmp_path):
    trace = load_events(tmp_path, [X("A", "cpu_op", 0, 10)])
    cp = critical_path(trace)
    assert cp.shown is None and cp.note == "no GPU activity in the trace"
    assert critical_path_json(cp)["iterations"] == []


def test_whole_trace_path_is_bounded(monkeypatch):
    """Without iterations, a rank over WHOLE_TRACE_EVENTS events gets no path but the reason
    (the 586 MB benchmark trace took 1.8 s), never a silent absence."""
    from goodhart_prof.analysis.critical import path as cp_mod
    from goodhart_prof.trace.load import load
    trace = load(HTA_INPUT, progress=False)
    n = int((trace.events["rank"] == trace.gpu["rank"].min()).sum())
    monkeypatch.setattr(cp_mod, "WHOLE_TRACE_EVENTS", n - 1)
    out = cp_mod.critical_path(trace)
    assert out.scope == "none" and out.shown is None
    assert out.note.startswith(f"not computed: no iterations were found, and the whole rank ({n:,} events)")
    monkeypatch.setattr(cp_mod, "WHOLE_TRACE_EVENTS", n)
    assert cp_mod.critical_path(trace).scope == "trace"
