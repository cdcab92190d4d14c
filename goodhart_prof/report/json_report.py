"""The `goodhart-prof/analysis/v1` JSON document (docs/DESIGN.md lists the required keys)."""
from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import pandas as pd

from ..analysis.iterations import find_iterations
from ..analysis.rules.savings import overlap
from ..analysis.setup import setup

SCHEMA = "goodhart-prof/analysis/v1"
# gpu_time's figures within the steps' bounds (null on a rank without iterations)
STEP_KEYS = ("step_span_us", "step_busy_us", "step_idle_us", "step_utilization")


def device_key(rank: int, device: int) -> str:
    return f"rank{int(rank)}/gpu{int(device)}"


def plain(value: Any) -> Any:
    """numpy/pandas scalars -> Python; NaN/inf -> None (JSON has neither)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return [plain(v) for v in value.tolist()]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        value = float(value)
        return value if math.isfinite(value) else None
    if isinstance(value, (np.bool_,)):
        return bool(value)
    if value is pd.NA or value is pd.NaT:
        return None
    return value


def records(frame: pd.DataFrame, columns: list[str]) -> list[dict[str, Any]]:
    cols = [c for c in columns if c in frame.columns]
    return [plain(dict(zip(cols, row))) for row in frame[cols].itertuples(index=False, name=None)]


def to_document(a, top: int | None = None) -> dict[str, Any]:
    started = time.perf_counter()
    trace = a.trace
    kernels = a.kernels if top is None else a.kernels.head(top)
    doc = {
        "schema": SCHEMA,
        "trace": {"paths": [str(p) for p in trace.paths], "ranks": list(trace.ranks),
                  "rank_source": trace.rank_source,
                  "devices": [device_key(r, d) for r, d in trace.devices],
                  "events": int(len(trace.events)), "skipped_events": int(trace.skipped_events),
                  "warnings": list(trace.warnings),
                  "load": trace.load_cost.to_json() if trace.load_cost is not None else None},
        "gpu": {device_key(r["rank"], r["device"]): plain({
            "rank": r["rank"], "device": r["device"], "busy_us": r["busy_us"], "span_us": r["span_us"],
            "idle_us": r["idle_us"], "utilization": r["utilization"], "kernel_us": r.get("kernel_us"),
            **{k: r.get(k) for k in STEP_KEYS}})
            for r in a.gpu.to_dict("records")},
        "gpu_not_recorded": _not_recorded(trace),
        "kernels": records(kernels, ["name", "category", "library", "count", "total_us", "pct", "mean_us",
                                     "min_us", "max_us"]),
        "categories": records(a.categories, ["category", "library", "count", "total_us", "pct"]),
        "libraries": records(a.libraries, ["library", "count", "total_us", "pct"]),
        "sync_points": plain(a.syncs.to_json()),
        "host_reads": plain(a.reads.to_json()) if a.reads is not None else None,
        "burstiness": {device_key(b.rank, b.device): plain(b.to_json()) for b in a.burstiness},
        "phases": plain(_phases_json(a.phases)),
        "phases_by_rank": plain(_phases_json(a.phases_by_rank)),
        "host_ops": plain(_host_ops_json(a.host_ops, top)),
        "communication": plain(a.communication.to_json()) if a.communication is not None else [],
        "communication_sites": records(a.communication.sites, ["kind", "site", "count", "total_us"])
        if a.communication is not None else [],
        "ranks": plain(a.ranks.to_json()) if a.ranks is not None else None,
        "memory": plain(a.memory.to_json()) if a.memory is not None else {},
        "efficiency": plain(_efficiency_json(a.efficiency)),
        "critical_path": plain(a.critical_path.to_json()) if a.critical_path is not None else None,
        "iterations": plain(find_iterations(trace).to_json()),
        "setup": plain(setup(trace).to_json()),
        "findings": [plain(f.to_json()) for f in a.findings],
        "savings_overlap": plain(overlap(a.findings)),
        "not_judged": [n.to_json() for n in a.not_judged],
    }
    # What each stage cost (analysis/timing.py): the load, each analysis, and building this
    # document (its JSON text is written after; snapshot_check.py leaves the section out).
    doc["timing"] = {"load_s": round(trace.load_cost.seconds, 4) if trace.load_cost is not None else None,
                     "analysis_s": a.timing.to_json(), "analysis_total_s": round(a.timing.total, 4),
                     "report_s": round(time.perf_counter() - started, 4)}
    return doc


def _not_recorded(trace) -> "dict[str, Any] | None":
    """A trace with GPUs but no GPU activity recorded (gpu_time.unrecorded_gpu): what shows the
    GPUs were there, and the sentence the reports print; None otherwise."""
    from ..analysis.gpu.device_time import unrecorded_gpu
    u = unrecorded_gpu(trace)
    if u is None:
        return None
    return {"launch_calls": u.launches, "gpu_memory_events": u.gpu_memory, "listed_gpus": u.listed,
            "names": list(u.names), "ranks": sorted(u.ranks), "note": u.text()}


def _phases_json(frame: pd.DataFrame) -> list[dict[str, Any]]:
    from ..analysis.host.phases import phases_json
    return phases_json(frame)


def _host_ops_json(frame: pd.DataFrame, top: int | None) -> dict[str, Any]:
    from ..analysis.host.hottest_ops import hot_ops_json
    return hot_ops_json(frame, top)


EFFICIENCY_OP_KEYS = ["dtype", "count", "flops", "bytes", "time_us", "intensity", "tflops", "gbps",
                      "peak_tflops", "peak_gbps", "ridge", "bound", "pct_peak", "pct_roof"]


def _efficiency_json(eff) -> dict[str, Any] | None:
    """`efficiency` {`devices` [ {`rank`, `device` (-1: the host CPU), `device_name`, `peak_name`,
    `time_source`, `source`} ], `ops` [ {`rank`, `device`, `op`, ...} ], `kernels` [ {`rank`,
    `device`, `name`, `op`, ...} ], `unsized` {op: count}} (docs/DESIGN.md)."""
    if eff is None:
        return None
    return {"devices": records(eff.devices, ["rank", "device", "device_name", "peak_name",
                                             "time_source", "source"]),
            "ops": records(eff.ops, ["rank", "device", "op"] + EFFICIENCY_OP_KEYS),
            "kernels": records(eff.kernels, ["rank", "device", "name", "op"] + EFFICIENCY_OP_KEYS),
            "unsized": dict(eff.unsized)}
