"""A hand-made Kineto trace whose critical path runs through CUDA event waits, and HTA's own
critical path of it (the oracle of tests/analysis/critical/test_path.py and test_graph.py).

One host thread (pid 1, tid 1), one GPU (pid 0) with streams 7, 8 and 9, integer microseconds, no
ProfilerStep#N (the path spans the whole trace). Each `cudaEventRecord` has a `cuda_sync` event
naming it (`wait_on_cuda_event_record_corr_id`, with the stream it was recorded on,
`wait_on_stream`), as Kineto writes them:

- fwd [0, 100] launches KA (stream 7, [20, 520]), records an event on stream 7 (corr 2), makes
  stream 8 wait for it (`Stream Wait Event`) and launches KB (stream 8, [525, 625]); records an
  event on stream 8 (corr 5); cudaEventSynchronize [100, 630] waits for it (`Event Sync`); tail
  [630, 700].
- step2 [700, 1000]: KC (stream 7, [715, 735]) recorded (corr 12), KD (stream 8, [722, 822]),
  stream 8 waits for corr 12, KE (stream 8, [822, 832]: after KD, and after KC); KE recorded
  (corr 16), stream 7 waits for it, KF (stream 7, [835, 1035]); KF recorded (corr 20); stream 9
  waits for corr 12 and KG (stream 9, [770, 780]) follows; busy [850, 950]; stream 8 waits for
  corr 20 and KH (stream 8, [1036, 1046]); cudaDeviceSynchronize [1000, 1050] (`Context Sync`);
  end [1050, 1060].

    python event_waits.py            # writes event_waits.json.gz beside this file
    python event_waits.py --hta      # and event_waits_hta.tsv: HTA 0.5.0's path and GPU edges

`--hta` needs HTA 0.5.0 importable with pandas < 3 (HTA's `drop(axis=1, columns=...)` fails on
pandas 3): e.g. a venv with pandas 2.2.3, numpy < 2, networkx, psutil, pyyaml, plotly, pydot, and
HTA's package on PYTHONPATH. It writes, one fact a line, tab-separated (tests/support/hta_table.py reads it): HTA's path of
the trace (`with_wait_args`) and of the same trace without the two wait args
(`without_wait_args`), each as its length (`length`, the sum of its edges' weights) and its events
(`path`, name and ts); and every launch, kernel -> kernel and sync edge of HTA's graph of the trace
(`edge`: type, source node, destination node, weight; a node is an event's name, ts, and `start`
or `end`). A text table, not JSON: every .json(.gz) under tests/data is read as a trace.
"""
from __future__ import annotations

import gzip
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
TRACE = HERE / "event_waits.json.gz"
HTA_OUTPUT = HERE / "event_waits_hta.tsv"


def write_gzip(path: Path, doc: dict) -> None:
    path.write_bytes(gzip.compress((json.dumps(doc, indent=1) + "\n").encode(), mtime=0))


def X(name, cat, ts, dur, pid=1, tid=1, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def call(name, ts, dur, corr) -> dict:
    return X(name, "cuda_runtime", ts, dur, **{"External id": corr, "cbid": 0, "correlation": corr})


def kernel(name, ts, dur, corr, stream) -> dict:
    return X(name, "kernel", ts, dur, pid=0, tid=stream, device=0, stream=stream, correlation=corr,
             **{"External id": corr, "context": 1})


def sync(kind, ts, dur, corr, stream, wait_stream=None, wait_record=None) -> dict:
    args = {"External id": corr, "cuda_sync_kind": kind}
    if wait_record is not None:
        args.update(wait_on_stream=wait_stream, wait_on_cuda_event_record_corr_id=wait_record,
                    wait_on_cuda_event_id=wait_record)
    args.update(stream=stream, correlation=corr, device=0, context=1)
    return X(kind, "cuda_sync", ts, dur, pid=0, tid=max(stream, 0), **args)


def stream_wait(ts, corr, stream, wait_stream, wait_record) -> list[dict]:
    return [call("cudaStreamWaitEvent", ts, 2, corr),
            sync("Stream Wait Event", ts, 2, corr, stream, wait_stream, wait_record)]


def events() -> list[dict]:
    ev = [X("fwd", "cpu_op", 0, 100),
          call("cudaLaunchKernel", 10, 5, 1), kernel("KA", 20, 500, 1, 7),
          call("cudaEventRecord", 20, 2, 2), *stream_wait(25, 3, 8, 7, 2),
          call("cudaLaunchKernel", 30, 5, 4), kernel("KB", 525, 100, 4, 8),
          call("cudaEventRecord", 40, 2, 5),
          call("cudaEventSynchronize", 100, 530, 6), sync("Event Sync", 100, 530, 6, -1, 8, 5),
          X("tail", "cpu_op", 630, 70),
          X("step2", "cpu_op", 700, 300),
          call("cudaLaunchKernel", 705, 5, 11), kernel("KC", 715, 20, 11, 7),
          call("cudaEventRecord", 712, 2, 12),
          call("cudaLaunchKernel", 716, 4, 13), kernel("KD", 722, 100, 13, 8),
          *stream_wait(724, 14, 8, 7, 12),
          call("cudaLaunchKernel", 728, 4, 15), kernel("KE", 822, 10, 15, 8),
          call("cudaEventRecord", 740, 2, 16), *stream_wait(744, 17, 7, 8, 16),
          call("cudaLaunchKernel", 750, 4, 18), kernel("KF", 835, 200, 18, 7),
          call("cudaEventRecord", 756, 2, 20),
          *stream_wait(760, 26, 9, 7, 12),
          call("cudaLaunchKernel", 764, 4, 27), kernel("KG", 770, 10, 27, 9),
          X("busy", "cpu_op", 850, 100),
          *stream_wait(952, 21, 8, 7, 20),
          call("cudaLaunchKernel", 956, 4, 22), kernel("KH", 1036, 10, 22, 8),
          call("cudaDeviceSynchronize", 1000, 50, 23), sync("Context Sync", 1000, 50, 23, -1),
          X("end", "cpu_op", 1050, 10)]
    # Kineto writes the host events in time order and the GPU ones after them
    return sorted(ev, key=lambda e: (e["pid"] == 0, e["ts"]))


def write_trace() -> None:
    write_gzip(TRACE, {"schemaVersion": 1, "deviceProperties": [], "traceEvents": events()})


def write_hta() -> None:
    doc = json.loads(gzip.decompress(TRACE.read_bytes()))
    lines = [f"# HTA 0.5.0's critical path of {TRACE.name} (python {Path(__file__).name} --hta)"]
    lines += hta_path(doc, "with_wait_args", edges=True)
    for e in doc["traceEvents"]:
        e["args"].pop("wait_on_stream", None)
        e["args"].pop("wait_on_cuda_event_record_corr_id", None)
    lines += hta_path(doc, "without_wait_args", edges=False)
    HTA_OUTPUT.write_text("\n".join(lines) + "\n")


def hta_path(doc: dict, case: str, edges: bool) -> list[str]:
    """HTA's critical path of a document as lines: its length, its events, and (`edges`) its
    graph's edges into and out of GPU activity."""
    from hta.analyzers.critical_path_analysis import CPEdgeType
    from hta.trace_analysis import TraceAnalysis
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "trace.json").write_text(json.dumps(doc))
        analysis = TraceAnalysis(trace_dir=folder)
        graph, ok = analysis.critical_path_analysis(rank=0, annotation="", instance_id=None)
        assert ok
    df = analysis.t.get_trace(0)
    names = analysis.t.symbol_table.get_sym_table()

    def node(k):
        n = graph.node_list[k]
        return [names[df.name.loc[n.ev_idx]], int(n.ts), "start" if n.is_start else "end"]
    nodes = graph.critical_path_nodes
    length = sum(graph.edges[u, v]["weight"] for u, v in zip(nodes[:-1], nodes[1:]))
    kinds = {CPEdgeType.KERNEL_LAUNCH_DELAY, CPEdgeType.KERNEL_KERNEL_DELAY, CPEdgeType.SYNC_DEPENDENCY}
    gpu_edges = sorted([e.type.value, node(u), node(v), int(e.weight)]
                       for u, v, e in ((u, v, d["object"]) for u, v, d in graph.edges(data=True))
                       if e.type in kinds)
    on_path = sorted([names[df.name.loc[i]], int(df.ts.loc[i])] for i in graph.critical_path_events_set)
    lines = [f"length\t{case}\t{int(length)}"] + [f"path\t{case}\t{n}\t{ts}" for n, ts in on_path]
    return lines + ["\t".join(map(str, ["edge", case, kind, *u, *v, w])) for kind, u, v, w in gpu_edges] \
        if edges else lines


if __name__ == "__main__":
    write_trace()
    if "--hta" in sys.argv[1:]:
        write_hta()
