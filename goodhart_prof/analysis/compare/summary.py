"""The summary rows of a comparison and the check that A and B were recorded alike.

**Summary** (`summary_table`): one row per whole-trace figure (SUMMARY_METRICS) with its readable
`name`, its `unit` (`time` in us, `share` in [0, 1], `count`, `per_iteration`), A, B, delta
(B - A), ratio (B / A) and a `verdict` with its reason `why`:

- a figure measured per counted iteration takes the verdict of its row in the spread table
  (`verdicts.spread_table`: iteration time, iteration GPU time): `better`, `worse`, `within noise`
  (the intervals overlap) or `not judged`;
- an exact count per iteration (sync points per iteration) is `better` (fewer), `worse` (more) or
  `same`: counts carry no noise;
- every other row is a whole-trace total or a figure without per-iteration samples: `not judged`,
  and `why` says so (its change may come from the number of traced iterations or from noise);
- a figure that is better neither way (traced iterations, GPU span): `not judged`, `why`
  "neither higher nor lower is better".

**Recording** (`recording_warning`): A and B should be recorded the same way. `mode` of a side is
run.json's `profiling.mode` where its run folder has one, and whether its trace holds Python
stacks (`python_function` frames: full mode, with_stack=True) otherwise; its `device` is the
names of the GPUs that ran its kernels (deviceProperties), else run.json's `device`. One line
warns when the modes or the stacks differ (full mode's stacks, shapes and memory events make
every op slower, so times are not comparable) or when the devices differ.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..result import Analysis
from ...trace.run_record import RunRecord
from ..gpu.hardware import device_name
from .noise import ITERATION_GPU_TIME, ITERATION_TIME

# (metric, readable name, unit, better when): the summary table's rows, in order
SUMMARY_METRICS = (
    ("gpu_busy_us", "GPU busy time", "time", "lower"),
    ("gpu_span_us", "GPU span", "time", None),
    ("gpu_utilization", "GPU utilization", "share", "higher"),
    ("kernel_us", "kernel time", "time", "lower"),
    ("sync_points", "sync points", "count", "lower"),
    ("sync_wait_us", "sync host wait", "time", "lower"),
    ("iterations", "traced iterations", "count", None),
    ("iteration_us", "iteration time", "time", "lower"),
    ("iteration_gpu_us", "iteration GPU time", "time", "lower"),
    ("syncs_per_iteration", "syncs per iteration", "per_iteration", "lower"),
    ("comm_us", "communication kernel time", "time", "lower"),
    ("exposed_comm_per_iteration_us", "exposed communication per iteration", "time", "lower"),
    ("straggler_wait_per_iteration_us", "wait for the slowest rank per iteration", "time", "lower"),
)
GPU_METRICS = ("gpu_busy_us", "gpu_span_us", "gpu_utilization", "kernel_us", "iteration_gpu_us")
COMM_METRICS = ("comm_us", "exposed_comm_per_iteration_us", "straggler_wait_per_iteration_us")
SPREAD_ROWS = {"iteration_us": ITERATION_TIME, "iteration_gpu_us": ITERATION_GPU_TIME}
EXACT = ("syncs_per_iteration",)
SAME = 1e-9  # relative change below which two floats are the same figure
WHOLE_TRACE = "a whole-trace figure with no per-iteration samples: noise cannot be told apart"
NEITHER = "neither higher nor lower is better"


def iteration_rows(phases: pd.DataFrame) -> pd.DataFrame:
    return phases[phases["kind"] == "iteration"]


def mean_iteration_us(phases: pd.DataFrame) -> float:
    """Mean CPU time of one `ProfilerStep#N` (over every rank's instances); NaN without steps."""
    steps = iteration_rows(phases)
    n = int(steps["count"].sum())
    return float(steps["cpu_us"].sum()) / n if n else float("nan")


def syncs_per_iteration(phases: pd.DataFrame) -> float:
    """Sync points inside `ProfilerStep#N` per step instance; NaN without steps."""
    steps = iteration_rows(phases)
    n = int(steps["count"].sum())
    return float(steps["syncs"].sum()) / n if n else float("nan")


def host_reads_per_iteration(phases: pd.DataFrame, host_reads: pd.DataFrame) -> float:
    """Host reads (`.item()`, `nonzero`, `if tensor:` on CPU-only ranks: each a sync on a GPU)
    inside `ProfilerStep#N` per step instance, as `syncs_per_iteration` counts sync points; NaN
    without steps."""
    n = int(iteration_rows(phases)["count"].sum())
    if not n:
        return float("nan")
    inside = int((host_reads["iteration"].to_numpy() >= 0).sum()) if len(host_reads) else 0
    return inside / n


def rank_figures(a: Analysis) -> dict[str, float]:
    """Exposed communication per iteration (mean over ranks and traced iterations) and the
    others' wait for the slowest rank per iteration (mean over iterations); NaN where the trace
    cannot give them."""
    ranks = a.ranks
    out = {"exposed_comm_per_iteration_us": float("nan"), "straggler_wait_per_iteration_us": float("nan")}
    if ranks is None or ranks.ranks.empty:
        return out
    stepped = ranks.ranks[ranks.ranks["step_us"].notna()]
    if not stepped.empty:
        out["exposed_comm_per_iteration_us"] = float(stepped["exposed_us"].mean())
    if ranks.judged:
        out["straggler_wait_per_iteration_us"] = float(ranks.iterations["caused_wait_us"].mean())
    return out


def summary_values(a: Analysis) -> dict[str, float]:
    """The whole-trace figures of the summary table for one analysis."""
    busy, span = float(a.gpu["busy_us"].sum()), float(a.gpu["span_us"].sum())
    steps = iteration_rows(a.phases)
    n = int(steps["count"].sum())
    return {
        "gpu_busy_us": busy, "gpu_span_us": span,
        "gpu_utilization": busy / span if span > 0 else float("nan"),
        "kernel_us": float(a.gpu["kernel_us"].sum()),
        "sync_points": float(a.syncs.total), "sync_wait_us": float(a.sync_points["dur"].sum()),
        "iterations": float(steps["iteration"].nunique()),
        "iteration_us": mean_iteration_us(a.phases),
        "iteration_gpu_us": float(steps["gpu_us"].sum()) / n if n else float("nan"),
        "syncs_per_iteration": syncs_per_iteration(a.phases),
        "comm_us": float(a.communication.collectives["total_us"].sum())
        if a.communication is not None and not a.communication.collectives.empty else 0.0,
        **rank_figures(a),
    }


def ratio(a, b) -> np.ndarray:
    """B / A elementwise: 1 where both are 0, NaN where only A is 0 (or either is NaN)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = b / a
    out[a == 0] = np.nan
    out[(a == 0) & (b == 0)] = 1.0
    return out


def same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(b - a) <= SAME * np.maximum(np.abs(a), np.abs(b))


def summary_table(a: Analysis, b: Analysis, spread: pd.DataFrame) -> pd.DataFrame:
    """The summary rows (module docstring): metric, name, unit, a, b, delta, ratio, better,
    verdict, why."""
    va, vb = summary_values(a), summary_values(b)
    names = [m for m, *_ in SUMMARY_METRICS]
    frame = pd.DataFrame({"metric": names, "name": [n for _, n, _, _ in SUMMARY_METRICS],
                          "unit": [u for *_, u, _ in SUMMARY_METRICS],
                          "better": [w for *_, w in SUMMARY_METRICS],
                          "a": [va[m] for m in names], "b": [vb[m] for m in names]})
    qa, qb = frame["a"].to_numpy(float), frame["b"].to_numpy(float)
    delta = qb - qa
    delta[same(qa, qb)] = 0.0
    frame = frame.assign(delta=delta, ratio=ratio(qa, qb))
    judged = [_verdict(r, spread) for r in frame.itertuples()]
    frame = frame.assign(verdict=[v for v, _ in judged], why=[w for _, w in judged])
    return frame[["metric", "name", "unit", "a", "b", "delta", "ratio", "better", "verdict", "why"]]


def _verdict(row, spread: pd.DataFrame) -> tuple[str, str]:
    if not isinstance(row.better, str):
        return "not judged", NEITHER
    if not (row.a == row.a and row.b == row.b):
        return "not judged", "not measured on " + ("either side" if row.a != row.a and row.b != row.b
                                                    else "A" if row.a != row.a else "B")
    if row.metric in SPREAD_ROWS:
        match = spread[(spread["kind"] == "iteration") & (spread["item"] == SPREAD_ROWS[row.metric])]
        if len(match):
            verdict = str(match["verdict"].iloc[0])
            return verdict, _why(verdict)
        return "not judged", "no counted iterations to sample"
    if row.metric in EXACT:
        if row.delta == 0:
            return "same", "an exact count"
        lower = row.delta < 0
        return ("better" if lower == (row.better == "lower") else "worse"), "an exact count"
    return "not judged", WHOLE_TRACE


def _why(verdict: str) -> str:
    return {"better": "the per-iteration intervals do not overlap",
            "worse": "the per-iteration intervals do not overlap",
            "within noise": "the per-iteration intervals overlap"}.get(
        verdict, "too few counted iterations, or the machine's speed changed (see Time)")


def shown_rows(summary: pd.DataFrame) -> pd.DataFrame:
    """The rows worth printing: GPU rows only when a side has GPU activity, communication rows
    only when a side has communication, never a row undefined on both sides."""
    s = summary.set_index("metric")
    drop = set()
    if not (s.loc["gpu_span_us", ["a", "b"]].fillna(0.0) > 0).any():
        drop |= set(GPU_METRICS)
    if not (s.loc["comm_us", ["a", "b"]].fillna(0.0) > 0).any():
        drop |= set(COMM_METRICS)
    keep = ~summary["metric"].isin(drop) & (summary["a"].notna() | summary["b"].notna())
    return summary[keep]


# -- how each side was recorded ---------------------------------------------------------------------
def recording(analysis: Analysis, run: RunRecord | None) -> dict[str, object]:
    """One side's `mode` (run.json's, or None), `stacks` (its trace holds Python frames) and
    `device` (the GPUs that ran its kernels, else run.json's device, else None)."""
    trace = analysis.trace
    gpus = sorted({name for r, d in trace.devices
                   if (name := device_name(trace.device_properties, r, d)) is not None})
    device = ", ".join(gpus) if gpus else (run.device if run is not None else None)
    return {"mode": run.mode if run is not None else None, "stacks": bool(len(trace.frames) > 0),
            "device": device}


def recording_warning(ra: dict, rb: dict) -> str | None:
    """The one line that says A and B were recorded differently (module docstring), or None."""
    problems = []
    if ra["mode"] and rb["mode"] and ra["mode"] != rb["mode"]:
        problems.append(f"A was recorded in {ra['mode']} mode and B in {rb['mode']} mode")
    elif ra["stacks"] != rb["stacks"]:
        problems.append(f"{'A' if ra['stacks'] else 'B'} holds Python stacks (full mode) and "
                        f"{'B' if ra['stacks'] else 'A'} does not")
    if ra["device"] and rb["device"] and ra["device"] != rb["device"]:
        problems.append(f"A ran on {ra['device']} and B on {rb['device']}")
    if not problems:
        return None
    return ("A and B were recorded differently: " + "; ".join(problems) +
            "; their times are not comparable: record both the same way on the same machine")
