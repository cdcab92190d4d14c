"""A/B comparison of two analyses: what changed between trace A (before) and trace B (after).

Every table pairs A and B on a key with an outer merge and, for each compared quantity `q`, has
the columns `q_a`, `q_b`, `q_delta` (= B - A) and `q_ratio` (= B / A; 1.0 when both are 0, NaN
when only A is 0). Tables whose rows can exist on one side only (kernels, sync sites, phases)
count an absent row as zero and say where it was seen in `presence` (`both`, `a_only`,
`b_only`); devices present on one side only keep NaN on the other.

Tables (`Comparison` attributes):

| table | key | quantities |
| --- | --- | --- |
| summary | metric (one row each, columns name, unit, a, b, delta, ratio, better, verdict, why: `compare_summary.py`) | GPU busy/span/utilization/kernel time over all devices, sync points and their host wait, traced iterations, iteration time (mean `ProfilerStep#N` cpu_us), GPU time and syncs per iteration, communication kernel time, exposed communication per iteration (mean over ranks), the others' wait for the slowest rank per iteration |
| categories | category | count, total_us |
| kernels | name (with category) | count, total_us |
| sync_kinds | kind (all of DESIGN.md's kinds) | count, total_us (host wait) |
| sync_sites | kind, site | count, total_us |
| devices | (rank, device); when the ids differ but each side has one device, that pair | span_us, busy_us, idle_us, utilization, kernel_us, util_cv, burstiness_B, gap_count, gap_p50_us, gap_p90_us, gap_p99_us, gap_max_us, gap_total_us, host_wait_us |
| phases | annotation name | count, cpu_us, gpu_us, gpu_kernels, syncs |
| communication | collective kind (all ranks together) | count, total_us (kernel time), bytes (where sizes are recorded) |
| memory | device label (`rank0/gpu0`, `rank0/host`; analysis/memory/usage.py) | peak_allocated, peak_reserved, allocations_per_iteration, growth_per_iteration (a device without memory events on one side keeps NaN there) |
| efficiency | op type (efficiency.py; all devices and dtypes of a side summed) | count, flops, time_us, tflops (achieved TFLOP/s = flops / time) |
| host_ops | cpu op name (hotops.hot_ops) | calls, self_us, total_us (whole traces); median_a/low_a/high_a, median_b/... (self time per counted iteration) and verdict (`host_op_table`) |

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
sync or host-read kind. A figure seen in the counted iterations of one side only (a phase, kernel,
category or collective that appears or disappears) is `only in A` / `only in B`, never better or
worse (`one_sided`). `recording_warning` says when A and B were recorded in different modes (lite
vs full: run.json's mode, or Python stacks in one trace only) or on different devices
(`compare_summary.recording`). Warm-up (the run's first iteration) never counts. Items overlap (a kernel
is inside its category, an annotation inside an iteration), so impacts are not to be added up.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..result import Analysis
from ...trace.run_record import RunRecord
from .summary import ratio, recording, recording_warning, same, summary_table
from .noise import Noise, noise
from .spread import MIN_ITERATIONS, median_interval
from ..host.syncs import KINDS
from ..iterations import iterations
from ..tree import host_tree
from ...units import device_key
from .verdicts import count_table, headline, iterations_line, spread_table, \
    drift_statement, speed_check, time_statement, with_host_time

PRESENCE = {"both": "both", "left_only": "a_only", "right_only": "b_only"}
ONLY = {"a_only": "only in A", "b_only": "only in B"}  # the verdict of a figure seen on one side
HOST_OP_QUANTITIES = ("calls", "self_us", "total_us")
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
    noise_a: Noise | None = None  # per-iteration samples of each side (analysis/compare/noise.py)
    noise_b: Noise | None = None
    time_statement: str | None = None  # "nothing can be concluded about time: ..." (a side < 3)
    iterations_line: str = ""          # "A: 6 iterations (1 warm-up excluded); B: 6 iterations"
    speed_check: str = ""              # verdicts.speed_check: "held: ...", "changed: ...", "not checked: ..."
    host_ops: pd.DataFrame = None  # type: ignore[assignment]  # per op name: HOST_OP_QUANTITIES, verdict
    recording: dict = None  # type: ignore[assignment]  # {"a", "b"}: compare_summary.recording
    recording_warning: str | None = None  # A and B recorded differently (mode, stacks, device)

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
    are the run records of the sides' run folders (`trace.run_record.read_run`), when they have one."""
    categories = _paired(a.categories, b.categories, ["category"], ["count", "total_us"])
    kernels = _paired(a.kernels, b.kernels, ["name"], ["count", "total_us"], carry=["category"])
    sync_kinds = _paired(_kind_table(a), _kind_table(b), ["kind"], ["count", "total_us"])
    sync_sites = _paired(a.syncs.sites, b.syncs.sites, ["kind", "site"], ["count", "total_us"])
    phases = _paired(_annotations(a.phases), _annotations(b.phases), ["name"], list(PHASE_QUANTITIES))
    devices = _devices(a, b)
    communication = _by_size(_paired(_comm_table(a), _comm_table(b), ["kind"],
                                     ["count", "total_us", "bytes"]), "total_us", ["kind"])
    na, nb = noise(a, run_a), noise(b, run_b)
    drift = drift_statement(na, nb)
    spread = one_sided(spread_table(na, nb, withheld=drift is not None), na, nb)
    counts = with_host_time(count_table(a, b, na, nb), a, b)
    summary = summary_table(a, b, spread)
    rec = {"a": recording(a, run_a), "b": recording(b, run_b)}
    return Comparison(
        a=a, b=b, summary=summary, spread=spread, counts=counts, noise_a=na, noise_b=nb,
        host_ops=host_op_table(a, b, na, nb, withheld=drift is not None), recording=rec,
        recording_warning=recording_warning(rec["a"], rec["b"]),
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


# -- one side only, host ops ----------------------------------------------------------------------
def one_sided(spread: pd.DataFrame, na: Noise, nb: Noise) -> pd.DataFrame:
    """A figure seen in the counted iterations of one side only (a phase, kernel, category or
    collective that appears or disappears) is `only in A` / `only in B`, never better or worse:
    its absence on the other side is no measurement of it."""
    def seen(n: Noise) -> set:
        return set(zip(n.samples["kind"], n.samples["item"]))
    sa, sb = seen(na), seen(nb)
    keys = list(zip(spread["kind"], spread["item"]))
    verdict = [v if kind in ("throughput", "iteration") else
               ONLY["a_only"] if (kind, item) in sa and (kind, item) not in sb else
               ONLY["b_only"] if (kind, item) in sb and (kind, item) not in sa else v
               for (kind, item), v in zip(keys, spread["verdict"])]
    return spread.assign(verdict=verdict)


def host_op_samples(a: Analysis, counted: list[int]) -> pd.DataFrame:
    """Self time per cpu op name per counted iteration (name, iteration, value in us): summed per
    rank, the largest rank's, 0 where the op did not run in the iteration (as noise.py's figures)."""
    tree = host_tree(a.trace)
    ops = np.flatnonzero(tree.is_op & ~tree.is_step)
    it = iterations(a.trace, tree.rank[ops], tree.ts[ops])
    keep = np.isin(it, counted)
    ops, it = ops[keep], it[keep]
    if not len(ops) or not counted:
        return pd.DataFrame({"name": pd.Series(dtype=object), "iteration": pd.Series(dtype=np.int64),
                             "value": pd.Series(dtype=float)})
    frame = pd.DataFrame({"name": np.asarray(tree.names, dtype=object)[tree.name[ops]],
                          "rank": tree.rank[ops], "iteration": it, "value": tree.self_us[ops]})
    per_rank = frame.groupby(["name", "rank", "iteration"], sort=False)["value"].sum()
    per_it = per_rank.groupby(level=["name", "iteration"], sort=False).max()
    full = pd.MultiIndex.from_product([per_it.index.get_level_values("name").unique(), counted],
                                      names=["name", "iteration"])
    return per_it.reindex(full, fill_value=0.0).reset_index()


def host_op_table(a: Analysis, b: Analysis, na: Noise, nb: Noise, withheld: bool = False) -> pd.DataFrame:
    """Host ops paired by name (hotops.hot_ops: calls, self_us, total_us over the whole traces,
    with `q_a`, `q_b`, `q_delta`, `q_ratio` and `presence`), largest self time first, and the
    verdict on the self time per counted iteration: `median_a`, `low_a`, `high_a`, `median_b`,
    ... (spread.median_interval) and `verdict` as the spread table's (`better`/`worse` only when
    both sides have 3+ counted iterations and the intervals do not overlap; `only in A`/`only
    in B` for an op that ran on one side only; `not judged` with too few iterations or when the
    machine's speed changed)."""
    paired = _paired(a.host_ops, b.host_ops, ["name"], list(HOST_OP_QUANTITIES))
    paired = _by_size(paired, "self_us", ["name"])
    sa, sb = host_op_samples(a, na.iterations), host_op_samples(b, nb.iterations)
    ga, gb = dict(tuple(sa.groupby("name", sort=False)["value"])), dict(tuple(sb.groupby("name", sort=False)["value"]))
    rows = []
    for name, presence in zip(paired["name"], paired["presence"]):
        xa = ga[name].to_numpy(float) if name in ga else np.zeros(na.n)
        xb = gb[name].to_numpy(float) if name in gb else np.zeros(nb.n)
        ma, mb = median_interval(xa), median_interval(xb)
        if presence != "both" or (name in ga) != (name in gb):
            verdict = ONLY["a_only" if (presence == "a_only" or name in ga) else "b_only"]
        elif withheld or ma.n < MIN_ITERATIONS or mb.n < MIN_ITERATIONS:
            verdict = "not judged"
        elif ma.low <= mb.high and mb.low <= ma.high:
            verdict = "within noise"
        else:
            verdict = "better" if mb.median < ma.median else "worse"
        rows.append((ma.median, ma.low, ma.high, mb.median, mb.low, mb.high, verdict))
    judged = pd.DataFrame(rows, columns=["median_a", "low_a", "high_a", "median_b", "low_b", "high_b",
                                         "verdict"], index=paired.index)
    return pd.concat([paired, judged], axis=1)


# -- pairing ---------------------------------------------------------------------------------------
def _with_deltas(frame: pd.DataFrame, quantities: list[str]) -> pd.DataFrame:
    out = {}
    for q in quantities:
        qa, qb = frame[f"{q}_a"].to_numpy(float), frame[f"{q}_b"].to_numpy(float)
        delta = qb - qa
        delta[same(qa, qb)] = 0.0
        if all(pd.api.types.is_integer_dtype(frame[f"{q}_{s}"]) for s in ("a", "b")):
            delta = delta.astype(np.int64)  # counts stay counts
        out[f"{q}_delta"], out[f"{q}_ratio"] = delta, ratio(qa, qb)
    frame = frame.assign(**out)
    paired = [f"{q}_{s}" for q in quantities for s in ("a", "b", "delta", "ratio")]
    return frame[[c for c in frame.columns if c not in paired] + paired]


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
    if ra != ra:
        return device_key(rb, db)
    if rb != rb or (ra, da) == (rb, db):
        return device_key(ra, da)
    return f"{device_key(ra, da)} vs {device_key(rb, db)}"
