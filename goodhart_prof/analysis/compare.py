"""A/B comparison of two analyses: what changed between trace A (before) and trace B (after).

Every table pairs A and B on a key with an outer merge and, for each compared quantity `q`, has
the columns `q_a`, `q_b`, `q_delta` (= B - A) and `q_ratio` (= B / A; 1.0 when both are 0, NaN
when only A is 0). Tables whose rows can exist on one side only (kernels, sync sites, phases)
count an absent row as zero and say where it was seen in `presence` (`both`, `a_only`,
`b_only`); devices present on one side only keep NaN on the other.

Tables (`Comparison` attributes):

| table | key | quantities |
| --- | --- | --- |
| summary | metric (one row each, columns a, b, delta, ratio, better) | GPU busy/span/utilization/kernel time over all devices, sync points and their host wait, traced iterations, iteration time (mean `ProfilerStep#N` cpu_us), GPU time and syncs per iteration, communication kernel time, exposed communication per iteration (mean over ranks), the others' wait for the slowest rank per iteration |
| categories | category | count, total_us |
| kernels | name (with category) | count, total_us |
| sync_kinds | kind (all of DESIGN.md's kinds) | count, total_us (host wait) |
| sync_sites | kind, site | count, total_us |
| devices | (rank, device); when the ids differ but each side has one device, that pair | span_us, busy_us, idle_us, utilization, kernel_us, util_cv, burstiness_B, gap_count, gap_p50_us, gap_p90_us, gap_p99_us, gap_max_us, gap_total_us, host_wait_us |
| phases | annotation name | count, cpu_us, gpu_us, gpu_kernels, syncs |
| communication | collective kind (all ranks together) | count, total_us (kernel time), bytes (where sizes are recorded) |
| memory | device label (`rank0/gpu0`, `rank0/host`; analysis/memory.py) | peak_allocated, peak_reserved, allocations_per_iteration, growth_per_iteration (a device without memory events on one side keeps NaN there) |
| efficiency | op type (efficiency.py; all devices and dtypes of a side summed) | count, flops, time_us, tflops (achieved TFLOP/s = flops / time) |

Noise first (docs/DESIGN.md "Noise"; `noise.py`, `spread.py`, `verdicts.py`): `spread` holds every
time figure measured per counted iteration (iteration time and GPU time, annotation phases, kernel
categories, kernels, collectives, env-steps/s of a run folder's untraced iterations) with each
side's median and interval, delta (B - A medians), ratio and verdict; `counts` the exact counts
per iteration (sync points and CPU-only host reads per kind, launched GPU kernels). The interval
is the order-statistic confidence interval of the median at >= 95% coverage (`spread.py`: exact
for any distribution, deterministic, no seed; [min, max] for up to 8 values), chosen over a
bootstrap because a trace holds a handful of skewed values, where a bootstrap of the median is
coarse and too narrow.

The headline ("what got better and what got worse") is one row per real change, `verdict`
`better` or `worse`, better ones first, each group by `impact_us` (largest first; counts without a
time estimate last). A time figure is a real change only when both sides have 3+ counted
iterations and the two intervals do not overlap (overlap: `within noise`, listed by
`within_noise`; fewer: `not judged`, and `time_statement` says nothing can be concluded about
time). Better means a lower median time, a higher env-steps/s, fewer counts. `impact_us`: |delta
median| x the mean number of counted iterations for a time figure; the change in host time for a
sync or host-read kind. Warm-up (the run's first iteration) never counts. Items overlap (a kernel
is inside its category, an annotation inside an iteration), so impacts are not to be added up.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from . import Analysis
from ..trace.run import RunRecord
from .noise import Noise, noise
from .syncs import KINDS
from .verdicts import count_table, headline, iterations_line, spread_table, \
    drift_statement, speed_check, time_statement, with_host_time

PRESENCE = {"both": "both", "left_only": "a_only", "right_only": "b_only"}
# Relative change below which two floats are the same figure (sums taken in different orders).
SAME = 1e-9

SUMMARY_METRICS = (  # (metric, better when): the summary table's rows, in order
    ("gpu_busy_us", "lower"), ("gpu_span_us", None), ("gpu_utilization", "higher"),
    ("kernel_us", "lower"), ("sync_points", "lower"), ("sync_wait_us", "lower"),
    ("iterations", None), ("iteration_us", "lower"), ("iteration_gpu_us", "lower"),
    ("syncs_per_iteration", "lower"), ("comm_us", "lower"), ("exposed_comm_per_iteration_us", "lower"),
    ("straggler_wait_per_iteration_us", "lower"),
)
DEVICE_QUANTITIES = ("span_us", "busy_us", "idle_us", "utilization", "kernel_us", "util_cv",
                     "burstiness_B", "gap_count", "gap_p50_us", "gap_p90_us", "gap_p99_us",
                     "gap_max_us", "gap_total_us", "host_wait_us")
PHASE_QUANTITIES = ("count", "cpu_us", "gpu_us", "gpu_kernels", "syncs")
MEMORY_QUANTITIES = ("peak_allocated", "peak_reserved", "allocations_per_iteration", "growth_per_iteration")
EFFICIENCY_QUANTITIES = ("count", "flops", "time_us", "tflops")


@dataclass
class Comparison:
    """The A/B tables (see the module docstring); A is the baseline, B the change."""

    a: Analysis
    b: Analysis
    summary: pd.DataFrame
    categories: pd.DataFrame
    kernels: pd.DataFrame
    sync_kinds: pd.DataFrame
    sync_sites: pd.DataFrame
    devices: pd.DataFrame
    phases: pd.DataFrame
    headline: pd.DataFrame
    communication: pd.DataFrame
    memory: pd.DataFrame = None  # type: ignore[assignment]  # set by compare()
    efficiency: pd.DataFrame = None  # type: ignore[assignment]  # per op type, EFFICIENCY_QUANTITIES
    spread: pd.DataFrame = None  # type: ignore[assignment]  # verdicts.spread_table: time figures
    counts: pd.DataFrame = None  # type: ignore[assignment]  # verdicts.count_table: exact counts
    noise_a: Noise | None = None  # per-iteration samples of each side (analysis/noise.py)
    noise_b: Noise | None = None
    time_statement: str | None = None  # "nothing can be concluded about time: ..." (a side < 3)
    iterations_line: str = ""          # "A: 6 iterations (1 warm-up excluded); B: 6 iterations"
    speed_check: str = ""              # verdicts.speed_check: "held: ...", "changed: ...", "not checked: ..."

    @property
    def better(self) -> pd.DataFrame:
        return self.headline[self.headline["verdict"] == "better"]

    @property
    def worse(self) -> pd.DataFrame:
        return self.headline[self.headline["verdict"] == "worse"]

    @property
    def within_noise(self) -> pd.DataFrame:
        """The time figures whose A and B intervals overlap (never better or worse)."""
        return self.spread[self.spread["verdict"] == "within noise"]


def compare(a: Analysis, b: Analysis, run_a: RunRecord | None = None,
            run_b: RunRecord | None = None) -> Comparison:
    """Pair the tables of two analyses (pure: neither analysis is changed); `run_a`/`run_b`
    are the run records of the sides' run folders (`trace.run.read_run`), when they have one."""
    categories = _paired(a.categories, b.categories, ["category"], ["count", "total_us"])
    kernels = _paired(a.kernels, b.kernels, ["name"], ["count", "total_us"], carry=["category"])
    sync_kinds = _paired(_kind_table(a), _kind_table(b), ["kind"], ["count", "total_us"])
    sync_sites = _paired(a.syncs.sites, b.syncs.sites, ["kind", "site"], ["count", "total_us"])
    phases = _paired(_annotations(a.phases), _annotations(b.phases), ["name"], list(PHASE_QUANTITIES))
    devices = _devices(a, b)
    summary = _summary(a, b)
    communication = _by_size(_paired(_comm_table(a), _comm_table(b), ["kind"],
                                     ["count", "total_us", "bytes"]), "total_us", ["kind"])
    na, nb = noise(a, run_a), noise(b, run_b)
    drift = drift_statement(na, nb)
    spread = spread_table(na, nb, withheld=drift is not None)
    counts = with_host_time(count_table(a, b, na, nb), a, b)
    return Comparison(
        a=a, b=b, summary=summary, spread=spread, counts=counts, noise_a=na, noise_b=nb,
        time_statement=time_statement(na, nb) or drift, iterations_line=iterations_line(na, nb),
        speed_check=speed_check(na, nb),
        categories=_by_size(categories, "total_us", ["category"]),
        kernels=_by_size(kernels, "total_us", ["name"]),
        sync_kinds=sync_kinds.set_index("kind").reindex(list(KINDS)).reset_index(),
        sync_sites=_by_size(sync_sites, "count", ["kind", "site"]),
        devices=devices, phases=_by_size(phases, "cpu_us", ["name"]),
        headline=headline(spread, counts),
        communication=communication, memory=_memory(a, b),
        efficiency=_by_size(_paired(op_rates(a), op_rates(b), ["op"], list(EFFICIENCY_QUANTITIES)),
                            "time_us", ["op"]))


def _memory(a: Analysis, b: Analysis) -> pd.DataFrame:
    """Per device label: the memory figures of A and B (NaN where a side has no such device or
    no memory events), deltas and ratios."""
    cols = ["label"] + list(MEMORY_QUANTITIES)

    def side(x: Analysis) -> pd.DataFrame:
        if x.memory is None or not x.memory.recorded:
            return pd.DataFrame({c: pd.Series(dtype=object if c == "label" else float) for c in cols})
        return x.memory.devices[cols].astype({q: float for q in MEMORY_QUANTITIES})

    m = side(a).merge(side(b), on="label", how="outer", suffixes=("_a", "_b"), indicator=True)
    m["presence"] = m.pop("_merge").astype(str).map(PRESENCE)
    return _with_deltas(m, list(MEMORY_QUANTITIES)).sort_values("label", ignore_index=True)


# -- pairing ---------------------------------------------------------------------------------------
def ratio(a, b) -> np.ndarray:
    """B / A elementwise: 1 where both are 0, NaN where only A is 0 (or either is NaN)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = b / a
    out[a == 0] = np.nan
    out[(a == 0) & (b == 0)] = 1.0
    return out


def _with_deltas(frame: pd.DataFrame, quantities: list[str]) -> pd.DataFrame:
    out = {}
    for q in quantities:
        qa, qb = frame[f"{q}_a"].to_numpy(float), frame[f"{q}_b"].to_numpy(float)
        delta = qb - qa
        delta[_same(qa, qb)] = 0.0
        if all(pd.api.types.is_integer_dtype(frame[f"{q}_{s}"]) for s in ("a", "b")):
            delta = delta.astype(np.int64)  # counts stay counts
        out[f"{q}_delta"], out[f"{q}_ratio"] = delta, ratio(qa, qb)
    frame = frame.assign(**out)
    paired = [f"{q}_{s}" for q in quantities for s in ("a", "b", "delta", "ratio")]
    return frame[[c for c in frame.columns if c not in paired] + paired]


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(b - a) <= SAME * np.maximum(np.abs(a), np.abs(b))


def _paired(a: pd.DataFrame, b: pd.DataFrame, keys: list[str], quantities: list[str],
            carry: list[str] = ()) -> pd.DataFrame:
    """Outer-merge a and b on keys; absent rows count as zero; deltas and ratios per quantity."""
    cols = keys + list(carry) + quantities
    left, right = _keyed(a, cols, keys), _keyed(b, cols, keys)
    m = left.merge(right, on=keys, how="outer", suffixes=("_a", "_b"), indicator=True, sort=False)
    for c in carry:  # a carried label (a kernel's category) comes from whichever side has the row
        m[c] = m[f"{c}_a"].where(m[f"{c}_a"].notna(), m[f"{c}_b"])
        m = m.drop(columns=[f"{c}_a", f"{c}_b"])
    m["presence"] = m.pop("_merge").astype(str).map(PRESENCE)
    for q in quantities:
        for side, frame in (("a", a), ("b", b)):
            col = m[f"{q}_{side}"].fillna(0)
            integer = q in frame.columns and pd.api.types.is_integer_dtype(frame[q])
            m[f"{q}_{side}"] = col.astype(np.int64) if integer else col.astype(float)
    return _with_deltas(m, quantities)


def _keyed(frame: pd.DataFrame, cols: list[str], keys: list[str]) -> pd.DataFrame:
    frame = frame[[c for c in cols if c in frame.columns]].copy()
    for k in keys:
        frame[k] = frame[k].astype(object).astype(str)
    return frame


def _by_size(frame: pd.DataFrame, quantity: str, keys: list[str]) -> pd.DataFrame:
    """Largest first by max(A, B), then by key, so the order does not depend on merge order."""
    size = np.maximum(frame[f"{quantity}_a"].to_numpy(float), frame[f"{quantity}_b"].to_numpy(float))
    order = frame.assign(_size=-size).sort_values(["_size"] + keys, kind="stable").index
    return frame.loc[order].reset_index(drop=True)


def _kind_table(a: Analysis) -> pd.DataFrame:
    counts = pd.Series(a.syncs.by_kind, dtype=np.int64).reindex(list(KINDS), fill_value=0)
    points = a.sync_points
    wait = points.groupby("kind")["dur"].sum() if len(points) else pd.Series(dtype=float)
    return pd.DataFrame({"kind": list(KINDS), "count": counts.to_numpy(np.int64),
                         "total_us": wait.reindex(list(KINDS), fill_value=0.0).to_numpy(float)})


def _comm_table(a: Analysis) -> pd.DataFrame:
    """Communication per collective kind, all ranks together (bytes: NaN-free sum of the sized)."""
    columns = ["kind", "count", "total_us", "bytes"]
    comm = a.communication
    if comm is None or comm.collectives.empty:
        return pd.DataFrame({c: pd.Series(dtype=object if c == "kind" else float) for c in columns})
    out = comm.collectives.groupby("kind", as_index=False).agg(
        count=("count", "sum"), total_us=("total_us", "sum"), bytes=("bytes", "sum"))
    return out.astype({"count": np.int64})[columns]


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


def op_rates(a: Analysis) -> pd.DataFrame:
    """Per efficiency op type: count, flops, time_us summed over devices and dtypes, and the
    achieved tflops = flops / time (empty without efficiency ops)."""
    eff = a.efficiency
    if eff is None or eff.ops.empty:
        return pd.DataFrame({"op": pd.Series(dtype=object), "count": pd.Series(dtype=np.int64),
                             **{q: pd.Series(dtype=float) for q in ("flops", "time_us", "tflops")}})
    out = eff.ops.groupby("op", sort=False)[["count", "flops", "time_us"]].sum().reset_index()
    out["count"] = out["count"].astype(np.int64)
    out["tflops"] = out["flops"] / out["time_us"] / 1e6  # FLOPs per us -> TFLOP/s
    return out


def _annotations(phases: pd.DataFrame) -> pd.DataFrame:
    return phases[phases["kind"] == "annotation"]


# -- devices ---------------------------------------------------------------------------------------
def device_table(a: Analysis) -> pd.DataFrame:
    """One row per (rank, device): gpu_time's columns plus burstiness and idle-gap figures."""
    gpu = a.gpu[["rank", "device", "span_us", "busy_us", "idle_us", "utilization", "kernel_us"]]
    rows = []
    for d in a.burstiness:
        g = d.gaps or {}
        rows.append({"rank": d.rank, "device": d.device, "util_cv": d.util_cv,
                     "burstiness_B": d.burstiness_B, "gap_count": g.get("count", 0),
                     **{f"gap_{k}": g.get(k) for k in ("p50_us", "p90_us", "p99_us", "max_us", "total_us")},
                     "host_wait_us": g.get("by_class", {}).get("host_wait", {}).get("total_us", 0.0)})
    burst = pd.DataFrame(rows, columns=["rank", "device"] + list(DEVICE_QUANTITIES[5:]))
    out = gpu.merge(burst.astype({"rank": np.int64, "device": np.int64}), on=["rank", "device"], how="left")
    return out.astype({q: float for q in DEVICE_QUANTITIES})


def _devices(a: Analysis, b: Analysis) -> pd.DataFrame:
    da, db = device_table(a), device_table(b)
    da = da.assign(rank_a=da["rank"], device_a=da["device"])
    db = db.assign(rank_b=db["rank"], device_b=db["device"])
    keys = ["rank", "device"]
    if len(da) == 1 and len(db) == 1 and da[keys].to_numpy().tolist() != db[keys].to_numpy().tolist():
        db = db.assign(rank=da["rank"].to_numpy(), device=da["device"].to_numpy())  # the only pair
    m = da.merge(db, on=keys, how="outer", suffixes=("_a", "_b"), indicator=True)
    m["presence"] = m.pop("_merge").astype(str).map(PRESENCE)
    m["label"] = [_device_label(*row) for row in m[["rank_a", "device_a", "rank_b", "device_b"]]
                  .to_numpy(float).tolist()]
    m = m.drop(columns=keys)
    for side in ("a", "b"):
        m[[f"rank_{side}", f"device_{side}"]] = m[[f"rank_{side}", f"device_{side}"]].astype("Int64")
    m = _with_deltas(m, list(DEVICE_QUANTITIES))
    head = ["label", "rank_a", "device_a", "rank_b", "device_b", "presence"]
    return m[head + [c for c in m.columns if c not in head]].reset_index(drop=True)


def _device_label(ra: float, da: float, rb: float, db: float) -> str:
    def key(r, d):
        return f"rank{int(r)}/gpu{int(d)}"
    if ra != ra:
        return key(rb, db)
    if rb != rb or (ra, da) == (rb, db):
        return key(ra, da)
    return f"{key(ra, da)} vs {key(rb, db)}"


# -- summary ---------------------------------------------------------------------------------------
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


def _summary(a: Analysis, b: Analysis) -> pd.DataFrame:
    va, vb = summary_values(a), summary_values(b)
    names = [m for m, _ in SUMMARY_METRICS]
    frame = pd.DataFrame({"metric": names, "better": [w for _, w in SUMMARY_METRICS],
                          "a": [va[m] for m in names], "b": [vb[m] for m in names]})
    qa, qb = frame["a"].to_numpy(float), frame["b"].to_numpy(float)
    delta = qb - qa
    delta[_same(qa, qb)] = 0.0
    return frame.assign(delta=delta, ratio=ratio(qa, qb))[["metric", "a", "b", "delta", "ratio", "better"]]
