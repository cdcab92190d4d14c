"""Per-rank trace files -> one `merged_trace.json`: the capture side's writer.

It reads back the files the ranks just wrote (through `trace.raw`, so JSON is parsed only inside
`trace/`) and re-emits every event in the merged layout that docs/DESIGN.md describes.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import msgspec

from ..fileio import writing
from .model import merged_gpu_tid
from .raw import read_document


def merge_rank_traces(rank_files: Mapping[int, Path], out: Path) -> dict[str, Any]:
    """Write all ranks into one Chrome trace, each rank its own process named `rank <r>`.

    Every event of rank r gets `pid = r`. CPU threads keep their tids; a GPU stream s of device
    d (Kineto gives it pid = d, tid = s) becomes tid `merged_gpu_tid(d, s)` and keeps
    `args.device`, so devices stay distinguishable. Timestamps are shifted onto the earliest
    rank's `baseTimeNanoseconds`. Returns a summary (ranks, event counts).
    """
    ranks = sorted(rank_files)
    docs = {r: read_document(rank_files[r]) for r in ranks}
    bases = {r: int(docs[r].get("baseTimeNanoseconds", 0) or 0) for r in ranks}
    base = min(bases.values()) if ranks else 0
    events: list[dict[str, Any]] = []
    counts = {}
    for r in ranks:
        shift_us = (bases[r] - base) / 1000.0
        rank_events = remap_rank(docs[r]["traceEvents"], r, shift_us)
        counts[r] = len(rank_events)
        events.extend(rank_events)
    header, kept = merged_header(docs)
    merged = {
        "schemaVersion": 1,
        "displayTimeUnit": "ms",
        **header,
        "baseTimeNanoseconds": base,
        "goodhartProf": {"merged_ranks": ranks,
                         "sources": {str(r): Path(rank_files[r]).name for r in ranks}, **kept},
        "traceEvents": events,
    }
    with writing(out) as tmp:
        tmp.write_bytes(msgspec.json.encode(merged))
    return {"ranks": ranks, "events": counts}


def merged_header(docs: Mapping[int, Mapping[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """What the ranks' headers say, for one merged document (this writer's and the Chrome JSON
    export's): (top-level fields, per-rank fields for `goodhartProf`).

    The loader reads a header once per file, for every rank in it, so the top level holds what
    the ranks share: `deviceProperties` (rank order's first non-empty list), `distributedInfo`
    less `rank` (world_size, backend: the fields every rank states alike; the ranks themselves
    are the `rank <r>` process names) and `baseTimeNanoseconds` where all ranks have one base.
    `goodhartProf` keeps each rank's `distributedInfo` and `baseTimeNanoseconds`, and each
    rank's `deviceProperties` where the ranks' lists differ (the loader then uses the top
    level's for all: a limitation of one header per file)."""
    ranks = sorted(docs)
    props = {r: docs[r].get("deviceProperties") or [] for r in ranks}
    first = next((p for p in props.values() if p), [])
    infos = {r: docs[r].get("distributedInfo") for r in ranks}
    stated = [i for i in infos.values() if isinstance(i, dict)]
    shared = {k: v for k, v in stated[0].items() if k != "rank" and all(i.get(k) == v for i in stated)
              } if stated and len(stated) == len(ranks) else {}
    bases = {r: docs[r].get("baseTimeNanoseconds") for r in ranks}
    header: dict[str, Any] = {"deviceProperties": first}
    if shared:
        header["distributedInfo"] = shared
    if ranks and len(set(map(str, bases.values()))) == 1 and bases[ranks[0]] is not None:
        header["baseTimeNanoseconds"] = bases[ranks[0]]
    kept: dict[str, Any] = {"distributedInfo": {str(r): infos[r] for r in ranks},
                            "baseTimeNanoseconds": {str(r): bases[r] for r in ranks}}
    if any(p and p != first for p in props.values()):
        kept["deviceProperties"] = {str(r): props[r] for r in ranks}
    return header, kept


_GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "Kernel", "Memcpy",
             "Memset"}


def remap_rank(events: list[dict[str, Any]], rank: int, shift_us: float) -> list[dict[str, Any]]:
    """One rank's raw events in the merged layout (see merge_rank_traces)."""
    gpu_pids = {e.get("pid") for e in events if e.get("cat") in _GPU_CATS}
    out: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "args": {"name": f"rank {rank}"}},
        {"ph": "M", "name": "process_sort_index", "pid": rank, "tid": 0, "args": {"sort_index": rank}},
    ]
    for ev in events:
        name, pid, tid = ev.get("name"), ev.get("pid"), ev.get("tid")
        if ev.get("ph") == "M" and name in ("process_name", "process_labels", "process_sort_index"):
            continue
        ev = dict(ev)
        if pid in gpu_pids:
            device = int(pid) if str(pid).isdigit() else 0
            stream = int(tid) if str(tid).lstrip("-").isdigit() else 0
            ev["tid"] = merged_gpu_tid(device, stream)
            if ev.get("ph") == "M" and name == "thread_name":
                ev["args"] = {"name": f"GPU {device} stream {stream}"}
            elif ev.get("ph") != "M":
                args = ev.get("args")
                ev["args"] = {**(args if isinstance(args, dict) else {}), "device": device}
        ev["pid"] = rank
        if shift_us and isinstance(ev.get("ts"), (int, float)):
            ev["ts"] = ev["ts"] + shift_us
        out.append(ev)
    return out
