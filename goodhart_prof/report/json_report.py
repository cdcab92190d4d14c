"""Every JSON the toolkit writes, in one place: the `goodhart-prof/analysis/v1` document
(`to_document`; docs/DESIGN.md lists its keys) and one function per analysis result that turns it
into plain JSON types (`syncs_json`, `burstiness_json`, `phases_json`, `host_ops_json`,
`communication_json`, `ranks_json`, `memory_json`, `efficiency_json`, `critical_path_json`,
`kernel_sequences_json`, `compile_json`, `cupti_json`, `iterations_json`, `setup_json`,
`finding_json`, `not_judged_json`, `timing_json`, `load_cost_json`, `spread_json`; the diff document, report/diff/document.py, uses them too).

The analyses return data only; `plain` makes any value JSON-safe (numpy scalars -> Python, NaN
and inf -> null), `records` turns a table's rows into objects.
"""
from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import pandas as pd

from ..analysis.critical.path import TOP_OPS, longest_segments
from ..analysis.host.hottest_ops import COLUMNS as HOST_OP_COLUMNS, host_us
from ..analysis.host.line_sites import site_fields
from ..analysis.host.phases import COLUMN_TYPES as PHASE_TYPES, COLUMNS as PHASE_COLUMNS
from ..analysis.host.syncs import KINDS as SYNC_KINDS
from ..analysis.host.borrowed_sites import sites_from
from ..analysis.iterations import find_iterations
from ..analysis.memory.usage import HOST, KEYS as MEMORY_KEYS
from ..analysis.rules.savings import overlap
from ..analysis.setup import setup
from ..units import device_key

SCHEMA = "goodhart-prof/analysis/v1"
# gpu_time's figures within the steps' bounds (null on a rank without iterations)
STEP_KEYS = ("step_span_us", "step_busy_us", "step_idle_us", "step_utilization")


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
                  "load": load_cost_json(trace.load_cost) if trace.load_cost is not None else None},
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
        "sync_points": plain(syncs_json(a.syncs)),
        "host_reads": plain(syncs_json(a.reads)) if a.reads is not None else None,
        "burstiness": {device_key(b.rank, b.device): plain(burstiness_json(b)) for b in a.burstiness},
        "phases": plain(phases_json(a.phases)),
        "phases_by_rank": plain(phases_json(a.phases_by_rank)),
        "host_ops": plain(host_ops_json(a.host_ops, top)),
        "communication": plain(communication_json(a.communication)) if a.communication is not None else [],
        "communication_sites": records(a.communication.sites, ["kind", "site", "count", "total_us"])
        if a.communication is not None else [],
        "ranks": plain(ranks_json(a.ranks)) if a.ranks is not None else None,
        "memory": plain(memory_json(a.memory)) if a.memory is not None else {},
        "efficiency": plain(efficiency_json(a.efficiency)),
        "critical_path": plain(critical_path_json(a.critical_path)) if a.critical_path is not None else None,
        "kernel_sequences": plain(kernel_sequences_json(a.kernel_sequences))
        if a.kernel_sequences is not None else None,
        "compile": plain(compile_json(a.compile)) if a.compile is not None else None,
        "cupti_counters": plain(cupti_json(a.cupti, top)) if a.cupti is not None else None,
        "iterations": plain(iterations_json(find_iterations(trace))),
        "sites_from": sites_from(trace),
        "setup": plain(setup_json(setup(trace))),
        "findings": [plain(finding_json(f)) for f in a.findings],
        "savings_overlap": plain(overlap(a.findings)),
        "not_judged": [not_judged_json(n) for n in a.not_judged],
    }
    # What each stage cost (analysis/timing.py): the load, each analysis, and building this
    # document (its JSON text is written after; snapshot_check.py leaves the section out).
    doc["timing"] = {"load_s": round(trace.load_cost.seconds, 4) if trace.load_cost is not None else None,
                     "analysis_s": timing_json(a.timing), "analysis_total_s": round(a.timing.total, 4),
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


EFFICIENCY_OP_KEYS = ["dtype", "count", "flops", "bytes", "time_us", "intensity", "tflops", "gbps",
                      "peak_tflops", "peak_gbps", "ridge", "bound", "pct_peak", "pct_roof"]


def efficiency_json(eff) -> dict[str, Any] | None:
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


def load_cost_json(cost) -> dict[str, Any]:
    """`trace.load`: what loading cost (trace/model.LoadCost)."""
    return {"seconds": round(cost.seconds, 3), "peak_rss_bytes": int(cost.peak_rss_bytes)}


def timing_json(stages) -> dict[str, float]:
    """`timing.analysis_s`: seconds per analysis stage (analysis/timing.Stages)."""
    return {name: round(s, 4) for name, s in stages.seconds.items()}


def syncs_json(summary) -> dict[str, Any]:
    """`sync_points` (and `host_reads`): DESIGN.md's object of a host/syncs.SyncSummary."""
    per_it = []
    for it, g in summary.per_iteration.groupby("iteration", sort=True):
        by_kind = {k: 0 for k in SYNC_KINDS}
        by_kind.update({str(k): int(c) for k, c in zip(g["kind"], g["count"])})
        per_it.append({"iteration": int(it), "count": int(g["count"].sum()), "by_kind": by_kind})
    return {
        "total": int(summary.total),
        "by_kind": {k: int(v) for k, v in summary.by_kind.items()},
        "sites": [{"kind": str(k), "site": str(s), "count": int(c), "total_us": float(t),
                   "where": site_fields(str(s)), "background": bool(b)}
                  for k, s, c, t, b in summary.sites[["kind", "site", "count", "total_us", "background"]]
                  .itertuples(index=False)],
        "per_iteration": per_it,
    }


def burstiness_json(b) -> dict[str, Any]:
    """One device's `burstiness` object (gpu/burstiness.DeviceBurstiness): plain floats and ints,
    None for undefined."""
    return plain({"window_us": b.window_us, "util_cv": b.util_cv, "burstiness_B": b.burstiness_B,
                  "gaps": b.gaps,
                  "idle_causes": [{"cause": c["cause"], "idle_us": c["idle_us"], "share": c["share"],
                                   "frame": c["frame"],
                                   **({"kind": c["kind"], "context": c["context"]} if "kind" in c else {}),
                                   **({"compiled": c["compiled"]} if "compiled" in c else {})}
                                  for c in b.idle_causes]})


def phases_json(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """`phases` (or `phases_by_rank`, with a `rank` column) of a host/phases table."""
    cols = [c for c in (["rank"] + PHASE_COLUMNS) if c in frame.columns]
    conv = {c: (str if PHASE_TYPES[c] is object else float if PHASE_TYPES[c] is float else int) for c in cols}
    return [{c: conv[c](v) for c, v in zip(cols, row)}
            for row in zip(*(frame[c].tolist() for c in cols))]


def host_ops_json(table: pd.DataFrame, top: int | None = None) -> dict[str, Any]:
    """`host_ops`: {`host_us`, `ops` [ {name, calls, self_us, total_us, self_pct, total_pct} ]}
    (the top `top` by self time; all when None) of a host/hottest_ops table."""
    rows = table if top is None else table.head(top)
    return {"host_us": host_us(table),
            "ops": [{"name": str(n), "calls": int(c), "self_us": float(s), "total_us": float(t),
                     "self_pct": float(sp), "total_pct": float(tp)}
                    for n, c, s, t, sp, tp in zip(*(rows[c].tolist() for c in HOST_OP_COLUMNS))]}


def communication_json(comm) -> list[dict[str, Any]]:
    """`communication`: per device its overlap row with its collectives (ranks/communication)."""
    out = []
    for o in comm.overlap.to_dict("records"):
        mine = comm.collectives[(comm.collectives["rank"] == o["rank"])
                                & (comm.collectives["device"] == o["device"])]
        rows = mine.drop(columns=["rank", "device"]).to_dict("records")
        out.append(dict(o, collectives=rows))
    return out


def ranks_json(ranks) -> dict[str, Any]:
    """`ranks`: the straggler tables of ranks/stragglers.Ranks."""
    return {"ranks": ranks.ranks.to_dict("records"), "iterations": ranks.iterations.to_dict("records"),
            "collectives": ranks.collectives.to_dict("records"),
            "clock_offsets_us": {str(k): v for k, v in ranks.offsets_us.items()},
            "unmatched_kernels": ranks.unmatched, "reason": ranks.reason}


def memory_json(mem) -> dict[str, Any]:
    """`memory`: per device key its row, its iterations and its top 10 sites (memory/usage)."""
    out = {}
    for d in mem.devices.to_dict("records"):
        mine = [(mem.iterations[c] == d[c]).to_numpy() for c in MEMORY_KEYS]
        its = mem.iterations[mine[0] & mine[1] & mine[2]]
        sel = [(mem.sites[c] == d[c]).to_numpy() for c in MEMORY_KEYS]
        sites = mem.sites[sel[0] & sel[1] & sel[2]].head(10)
        out[d.pop("label")] = dict(
            d, kind="host" if d["device_type"] == HOST else "gpu",
            per_iteration=its.drop(columns=MEMORY_KEYS).to_dict("records"),
            sites=sites.drop(columns=MEMORY_KEYS).to_dict("records"))
    return out


def critical_path_json(cp) -> dict[str, Any]:
    """`critical_path` of critical/path.CriticalPath: its iterations, the shown one's top ops and
    longest segments."""
    shown = cp.shown
    return {
        "rank": cp.rank, "scope": cp.scope, "note": cp.note or None,
        "iterations_found": cp.total,
        "iterations": [iteration_path_json(it) for it in cp.iterations],
        "shown_step": None if shown is None else shown.step,
        "ops": [] if shown is None else [
            {"name": str(r.name), "side": r.side, "us": round(float(r.us), 3),
             "share": round(float(r.us) / shown.length_us, 4) if shown.length_us > 0 else 0.0,
             "count": int(r.count)} for r in shown.ops.head(TOP_OPS).itertuples()],
        "segments": [] if shown is None else [
            {"side": s.side, "ts": s.ts, "end": s.end, "us": round(s.us, 3)}
            for s in longest_segments(shown)],
    }


def iteration_path_json(it) -> dict[str, Any]:
    """One iteration of `critical_path.iterations` (critical/path.IterationPath)."""
    return {"step": it.step, "ts": it.ts, "end": it.end, "length_us": round(it.length_us, 3),
            "host_us": round(it.host_us, 3), "launch_us": round(it.launch_us, 3),
            "gpu_us": round(it.gpu_us, 3), "gap_us": round(it.gap_us, 3),
            "host_share": round(it.host_share, 4), "gpu_share": round(it.gpu_share, 4),
            "bound": it.bound,
            "what_if": [{"name": w.name, "side": w.side, "on_path_us": round(w.on_path_us, 3),
                         "path_without_us": round(w.path_without_us, 3)} for w in it.what_if]}


def kernel_sequences_json(ks) -> dict[str, Any]:
    """`kernel_sequences` of gpu/kernel_sequences.KernelSequences: the frequent sequences and
    the fusion candidates, each as `sequence_json`."""
    return {"kernels": ks.kernels, "windows": ks.windows, "note": ks.note or None,
            "sequences": [sequence_json(s) for s in ks.sequences],
            "fusion_candidates": [sequence_json(s) for s in ks.fusion]}


def sequence_json(s) -> dict[str, Any]:
    """One sequence (gpu/kernel_sequences.Sequence): per position its kernel, launching op,
    category and library; its counts, time and fusion figures."""
    return {"kernels": [{"name": k, "op": o or None, "category": c, "library": lib}
                        for k, o, c, lib in zip(s.kernels, s.ops, s.categories, s.libraries)],
            "length": s.length, "op_chain": s.op_chain or None, "count": s.count,
            "per_iteration": s.per_iteration, "total_us": round(s.total_us, 3), "share": round(s.share, 6),
            "site": s.site, "fusible": s.fusible, "launches_saved": s.launches_saved,
            "bytes_saved": s.bytes_saved}


def iterations_json(found) -> dict[str, Any]:
    """`iterations`: how the iterations were found (analysis/iterations.Iterations)."""
    return {"how": found.how, "marker": found.marker, "boundary": found.boundary,
            "count": found.count, "text": found.describe()}


def setup_json(s) -> dict[str, Any]:
    """`setup`: per rank its setup figures, and the calls and ops seen (analysis/setup.Setup)."""
    return {"ranks": [{k: (v if isinstance(v, str) else float(v) if k not in ("rank", "htod_copies") else int(v))
                       for k, v in r.items()} for r in s.ranks.to_dict("records")],
            "calls": s.calls, "ops": s.ops}


def finding_json(f) -> dict[str, Any]:
    """One of `findings` (rules/base.Finding)."""
    return {"rule": f.rule, "severity": f.severity, "title": f.title,
            "est_saving_us": f.est_saving_us, "est_saving_share": f.est_saving_share,
            "saving_basis": f.saving_basis, "saving_note": f.saving_note,
            "evidence": f.evidence, "fix": f.fix}


def not_judged_json(n) -> dict[str, str]:
    """One of `not_judged`: a rule that could not judge this trace, and why."""
    return {"rule": n.rule, "reason": n.reason}


def spread_json(spread) -> dict[str, Any]:
    """A compare/spread.Spread (the diff document's `profiler_cost`): NaN -> None."""
    def num(v: float):
        return None if v != v else float(v)
    return {"n": int(spread.n), "median": num(spread.median), "low": num(spread.low),
            "high": num(spread.high), "confidence": num(spread.confidence)}


def compile_json(use) -> dict[str, Any]:
    """`compile` of gpu/dynamo.CompileUse: what torch.compile did in the traced iterations."""
    regions = [{"frame": int(r.frame), "entry": int(r.entry), "opens_in": int(r.parent), "calls": int(r.calls),
                "calls_per_iteration": r.calls / use.iterations, "host_us": float(r.host_us),
                "function": r.function if isinstance(r.function, str) else None}
               for r in use.regions.itertuples()]
    return {"iterations": use.iterations, "regions": regions, "breaks": use.breaks, "compiles": use.compiles,
            "recompiled_frames": use.recompiled_frames, "compiled_gpu_us": use.compiled_gpu_us,
            "eager_gpu_us": use.eager_gpu_us, "compiled_share": use.compiled_share}


def cupti_json(c, top: int | None = None) -> dict[str, Any]:
    """`cupti_counters` of gpu/cupti.CuptiCounters: per kernel and per op, each counter's sum and the
    FLOPs the SASS counters give (null without them); the top `--top` rows when given."""
    def rows(table, key):
        head = table if top is None else table.head(top)
        return [{key: str(r[key]), "ranges": int(r["ranges"]),
                 "flops": None if pd.isna(r["flops"]) else float(r["flops"]),
                 "counters": {k: float(r[k]) for k in c.counters}} for _, r in head.iterrows()]
    return {"counters": c.counters, "ranges": c.ranges, "matched": c.matched, "note": c.note,
            "flops_by_precision": c.flops_by_precision, "kernels": rows(c.kernels, "name"),
            "ops": rows(c.ops, "op")}

