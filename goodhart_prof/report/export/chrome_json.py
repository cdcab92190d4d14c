"""Chrome trace JSON export: `goodhart-prof export PATH -o out.json[.gz]`.

The original document is kept as it is (every event, every header field) and our analysis is
appended as events that only the viewer reads, never the loader's events table (so reloading the
export gives the same complete events, and the same analysis):

- counters (`ph: C`, cat `goodhart_utilization`): per GPU device `GPU <d> utilization` with arg
  `percent`, one sample per burstiness window at its start and 0 at the device's last activity end,
  in the process of that device's GPU events;
- instants (`ph: i`, scope thread, cat `goodhart_sync`): one per sync point, named `sync <kind>`,
  on the thread of its own event, args kind, site, iteration, dur_us;
- flows (`ph: s` at the launch call, `ph: f` with `bp: e` at the GPU activity, cat
  `goodhart_launch`, ids 1..N): one per GPU activity whose launch call is in the trace. Kineto's own
  `ac2g` flows, where the trace has them, stay as they are;
- the critical path (analysis/critical/path.py): per path computed, async slices (`ph: b`/`e`, cat
  `goodhart_critical_path`, one `id` per path) in the process of the rank's host work: one named
  `critical path (rank R, iteration N)` (`..., whole trace)`) over the whole path, which names
  the track, and inside it one per span of the path, named by its event, args `side`. The loader
  skips async events, so they never become events of a reloaded export.

Times stay on our trace clock (microseconds, as in the input). A folder of per-rank traces becomes
one merged document in the layout of `merged_trace.json` (DESIGN.md: every event of rank r gets
`pid = r`, GPU streams tid `1_000_000_000 + 1000 d + s`), without shifting timestamps (the loader
does not shift them either), its header what the ranks' headers share (`merge.merged_header`:
`deviceProperties`, `distributedInfo` less the rank, one common `baseTimeNanoseconds`) and each
rank's own in `goodhartProf`: reloading it gives the same analysis (tests/report/export/test_reload.py).
Limitation: events are matched to their threads by numeric ids; in traces whose pids/tids are
non-numeric strings the added events of those threads carry the loader's negative stand-in ids.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import msgspec
import pandas as pd

from ...fileio import writing
from ...trace.merge import merged_header, remap_rank
from ...trace.raw import RawTraceError, raw_document, read_document
from ...trace.model import GPU_ACTIVITY_CATS, Trace, merged_gpu_tid
from .common import ExportError, ExportSummary, check_output, linked_launches, utilization_samples

COUNTER_CAT, SYNC_CAT, FLOW_CAT = "goodhart_utilization", "goodhart_sync", "goodhart_launch"
PATH_CAT = "goodhart_critical_path"
_GPU_SIDE_CATS = GPU_ACTIVITY_CATS + ("gpu_user_annotation",)

Remap = Callable[[int, int, int], tuple[int, int]]  # (rank, pid, tid) -> (pid, tid) in the output


def write_chrome_json(analysis, path: str | os.PathLike, force: bool = False) -> ExportSummary:
    """Write the original trace plus our counters, sync instants and launch flows as Chrome JSON
    (gzipped when `path` ends in .gz)."""
    out = check_output(path, force)
    trace: Trace = analysis.trace
    summary = ExportSummary(out, "chrome-json", slices=len(trace.events), gpu_slices=len(trace.gpu))
    remap = _identity if len(trace.paths) == 1 else _merged_remap(trace)
    added = (_counters(analysis, remap, summary) + _instants(analysis, remap, summary)
             + _flows(trace, remap, summary) + _critical_path(analysis, remap, summary))
    export = {"counters": summary.counter_samples, "sync_instants": summary.sync_instants,
              "flows": summary.flows, "critical_path_slices": summary.critical_path_slices,
              "categories": [COUNTER_CAT, SYNC_CAT, FLOW_CAT, PATH_CAT]}
    if len(trace.paths) == 1:
        data = _appended(trace.paths[0], added, export)
    else:
        data = msgspec.json.encode(_merged(trace, added, export))
    if out.name.endswith(".gz"):
        data = _gzip(data)
    with writing(out, exclusive=not force) as tmp:
        tmp.write_bytes(data)
    return summary


def _gzip(data: bytes) -> bytes:
    try:
        from isal.igzip import compress
    except ImportError:  # pragma: no cover - isal is a dependency, but only a speed-up
        from gzip import compress
    return compress(data)


def _raw_document(path: Path) -> dict[str, msgspec.Raw]:
    try:
        return raw_document(path)
    except RawTraceError as exc:
        raise ExportError(f"{exc} (reading it again for the export)") from None


def _document(path: Path) -> dict[str, Any]:
    try:
        return read_document(path)
    except RawTraceError as exc:
        raise ExportError(f"{exc} (reading it again for the export)") from None


def _appended(path: Path, added: list[dict[str, Any]], export: dict[str, Any]) -> bytes:
    """The document of `path`, byte for byte in its events, with `added` after its last event
    and `goodhartProf.export` describing them."""
    doc = _raw_document(path)
    events = bytes(doc["traceEvents"]).strip()[1:-1].strip()
    extra = msgspec.json.encode(added)[1:-1]
    doc["traceEvents"] = msgspec.Raw(b"[" + events + (b"," if events and extra else b"") + extra + b"]")
    meta = msgspec.json.decode(doc["goodhartProf"]) if "goodhartProf" in doc else None
    meta = meta if isinstance(meta, dict) else {}
    doc["goodhartProf"] = msgspec.Raw(msgspec.json.encode({**meta, "export": export}))
    return msgspec.json.encode(doc)


def _identity(rank: int, pid: int, tid: int) -> tuple[int, int]:
    return pid, tid


def _merged_remap(trace: Trace) -> Remap:
    """How a loaded (rank, pid, tid) is written in the merged layout (goodhart_prof.trace.merge.merge_rank_traces)."""
    gpu = trace.events[trace.events["cat"].isin(_GPU_SIDE_CATS).to_numpy()]
    gpu_pids = set(map(tuple, gpu[["rank", "pid"]].drop_duplicates().to_numpy().tolist()))

    def remap(rank: int, pid: int, tid: int) -> tuple[int, int]:
        if (rank, pid) in gpu_pids:
            return rank, merged_gpu_tid(max(pid, 0), tid if tid >= 0 else 0)
        return rank, tid
    return remap


def _merged(trace: Trace, added: list[dict[str, Any]], export: dict[str, Any]) -> dict[str, Any]:
    """Several per-rank files as one document in the merged_trace.json layout, timestamps as
    loaded (not shifted)."""
    events: list[dict[str, Any]] = []
    sources, docs = {}, {}
    for i, path in enumerate(trace.paths):
        doc = _document(path)
        info = doc.get("distributedInfo")
        by_info = trace.rank_source == "distributedInfo" and isinstance(info, dict)
        rank = int(info.get("rank")) if by_info else i
        if len(trace.file_ranks) == len(trace.paths) and trace.file_ranks[i] is not None:
            rank = trace.file_ranks[i]  # as loaded: distributedInfo, else the file name
        sources[str(rank)] = Path(path).name
        events.extend(remap_rank(doc.pop("traceEvents"), rank, 0.0))
        docs[rank] = doc  # its header
    header, kept = merged_header(docs)
    return {"schemaVersion": 1, "displayTimeUnit": "ms", **header, "traceEvents": events + added,
            "goodhartProf": {"merged_ranks": sorted(trace.ranks), "sources": sources, **kept,
                             "export": export}}


def _counters(analysis, remap: Remap, summary: ExportSummary) -> list[dict[str, Any]]:
    gpu = analysis.trace.gpu
    pids = gpu.groupby(["rank", "device"])[["pid", "tid"]].first() if len(gpu) else None
    out = []
    for rank, device, times, values in utilization_samples(analysis):
        pid, _ = remap(rank, *map(int, pids.loc[(rank, device)]))
        name = f"GPU {device} utilization"
        out += [{"ph": "C", "cat": COUNTER_CAT, "name": name, "pid": pid, "ts": t,
                 "args": {"percent": v}} for t, v in zip(times.tolist(), values.tolist())]
        summary.counter_tracks += 1
        summary.counter_samples += len(times)
    return out


def _instants(analysis, remap: Remap, summary: ExportSummary) -> list[dict[str, Any]]:
    points: pd.DataFrame = analysis.sync_points
    out = []
    cols = ["rank", "pid", "tid", "ts", "dur", "kind", "site", "iteration"]
    for rank, pid, tid, ts, dur, kind, site, it in points[cols].itertuples(index=False):
        pid, tid = remap(int(rank), int(pid), int(tid))
        out.append({"ph": "i", "s": "t", "cat": SYNC_CAT, "name": f"sync {kind}", "pid": pid,
                    "tid": tid, "ts": float(ts), "args": {"kind": str(kind), "site": str(site),
                                                          "iteration": int(it), "dur_us": float(dur)}})
    summary.sync_instants = len(out)
    return out


def _flows(trace: Trace, remap: Remap, summary: ExportSummary) -> list[dict[str, Any]]:
    links = linked_launches(trace)
    ev = trace.events
    cols = {c: ev[c].to_numpy() for c in ("rank", "pid", "tid", "ts")}
    out = []
    for flow_id, (g, launch) in enumerate(links[["gpu_pos", "launch_pos"]].to_numpy().tolist(), 1):
        for pos, phase in ((launch, "s"), (g, "f")):
            pid, tid = remap(int(cols["rank"][pos]), int(cols["pid"][pos]), int(cols["tid"][pos]))
            event = {"ph": phase, "cat": FLOW_CAT, "name": "launch", "id": flow_id, "pid": pid,
                     "tid": tid, "ts": float(cols["ts"][pos])}
            if phase == "f":
                event["bp"] = "e"
            out.append(event)
    summary.flows = len(links)
    return out


def _critical_path(analysis, remap: Remap, summary: ExportSummary) -> list[dict[str, Any]]:
    """Async slices per path computed (module docstring): the whole path, then its spans."""
    cp = analysis.critical_path
    ev = analysis.trace.events
    out: list[dict[str, Any]] = []
    for path_id, it in enumerate(cp.iterations if cp is not None else [], 1):
        if it.spans.empty:
            continue
        on_path = ev.loc[it.rows]
        host = on_path[~on_path["cat"].isin(_GPU_SIDE_CATS).to_numpy()]
        first = (host if len(host) else on_path).iloc[0]
        pid, _ = remap(int(cp.rank), int(first["pid"]), int(first["tid"]))
        what = "whole trace" if it.step < 0 else f"iteration {it.step}"
        name = f"critical path (rank {cp.rank}, {what})"
        start = it.ts + it.spans["start_ns"].to_numpy() / 1000.0
        end = it.ts + it.spans["end_ns"].to_numpy() / 1000.0
        common = {"cat": PATH_CAT, "id": path_id, "pid": pid}
        out.append({"ph": "b", "name": name, "ts": float(start[0]), **common,
                    "args": {"length_us": it.length_us, "bound": it.bound}})
        for n, side, a, b in zip(it.spans["name"].tolist(), it.spans["side"].tolist(),
                                 start.tolist(), end.tolist()):
            out += [{"ph": "b", "name": n, "ts": a, **common, "args": {"side": side}},
                    {"ph": "e", "name": n, "ts": b, **common}]
        out.append({"ph": "e", "name": name, "ts": float(end[-1]), **common})
        summary.critical_path_slices += len(it.spans)
    return out
