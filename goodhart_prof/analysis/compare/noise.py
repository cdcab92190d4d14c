"""Per-iteration samples of one side of a comparison: what `diff` tells signal from noise with.

**Counted iterations**: the traced iterations (`ProfilerStep#N`, any rank) that are not warm-up.
Warm-up is the run's first iteration (`trace/run_record.py`: the first row of the run's metrics.jsonl;
iteration 0 when the trace is not part of a run folder): compilation, autotuning and allocator
growth land there. Traces of our trainer never hold it unless the window starts at 0 (the hooks
warm the profiler up in the iteration before the window, which is not recorded).

**Time samples** (`samples`: kind, item, iteration, value in us; one value per counted
iteration, 0 where the item did not occur in it). Each figure is measured per rank, and an
iteration's value is the largest rank's (an iteration ends when its slowest rank does; wall
times are never summed across ranks):

| kind | item | value per iteration |
| --- | --- | --- |
| iteration | `iteration time` | the `ProfilerStep#N` CPU duration |
| iteration | `iteration GPU time` | GPU activity launched inside the step (traces with GPU activity) |
| phase | annotation name | summed durations of its instances starting in the iteration |
| category, kernel | category / kernel name | GPU time of the activity whose launch call starts in the iteration |
| communication | collective kind | kernel time of those collectives |

**Throughput samples** (`throughput`): env-steps/s of each throughput iteration of the run
(`RunRecord.throughput`: untraced, not warm-up), all ranks; empty without a run record.

**Counts** (`counts`: kind, item, site, count): sync points per kind and site (`sync`), CPU-only
host reads per kind and site (`host_read`) and launched GPU kernels (`kernels`, category
`kernel`) inside the counted iterations; a comparison divides them by the number of counted
iterations. Counts are exact: they carry no spread.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...trace.model import Trace, name_codes
from ...trace.run_record import RunRecord
from .spread import Spread, median_interval
from ..iterations import iterations, step_table
from ..tree import STEP, sums_inside

SAMPLE_COLUMNS = ["kind", "item", "iteration", "value"]
ITERATION_TIME, ITERATION_GPU_TIME, ENV_STEPS = "iteration time", "iteration GPU time", "env-steps/s"


@dataclass
class Noise:
    """One side's per-iteration samples (module docstring)."""

    iterations: list[int]              # counted traced iterations
    warmup: list[int]                  # traced iterations left out as warm-up
    samples: pd.DataFrame = field(repr=False)     # SAMPLE_COLUMNS
    throughput: pd.DataFrame = field(repr=False)  # iteration, rate, env_steps_all (RunRecord.throughput)
    counts: pd.DataFrame = field(repr=False)      # kind, item, site, count (in counted iterations)
    profiler_cost: Spread | None = None  # traced / untraced iteration time of the run (`profiler_cost`)

    @property
    def n(self) -> int:
        return len(self.iterations)

    def spread(self, kind: str, item: str) -> Spread:
        """The figure's median and interval over the counted iterations (n = 0: never seen)."""
        if kind == "throughput":
            return median_interval(self.throughput["rate"].to_numpy(float))
        s = self.samples
        values = s["value"].to_numpy(float)[((s["kind"] == kind) & (s["item"] == item)).to_numpy()]
        if not len(values):
            return median_interval(np.zeros(self.n))  # absent on this side: 0 in every iteration
        return median_interval(values)


def noise(analysis, run: RunRecord | None = None) -> Noise:
    """The samples of one analysed trace; `run` is the run record of its folder, if any."""
    trace = analysis.trace
    steps = step_table(trace)
    first = run.first_iteration if run is not None and run.first_iteration is not None else 0
    warm_set = set(run.warmup) if run is not None and run.warmup else {first}
    traced = sorted(set(steps["step"].tolist()))
    counted = [i for i in traced if i not in warm_set]
    warmup = [i for i in traced if i in warm_set]
    parts = [_steps(trace, steps, counted)]
    annotations = _annotations(trace)
    parts.append(_per_iteration("phase", annotations, counted))
    if not trace.gpu.empty:
        parts.append(_gpu(trace, counted))
    samples = pd.concat([p for p in parts if len(p)] or [_empty()], ignore_index=True)
    throughput = run.throughput() if run is not None else pd.DataFrame(
        {"iteration": pd.Series(dtype=np.int64), "rate": pd.Series(dtype=float),
         "env_steps_all": pd.Series(dtype=float)})
    return Noise(iterations=counted, warmup=warmup, samples=samples[SAMPLE_COLUMNS],
                 throughput=throughput, counts=_counts(analysis, counted),
                 profiler_cost=profiler_cost(run) if run is not None else None)


def profiler_cost(run: RunRecord) -> Spread | None:
    """How much longer the run's traced iterations took than its untraced ones, by its own clock
    (metrics.jsonl `iteration_s`): the median ratio, and as interval the ratio of the two
    medians' intervals taken at their extremes (traced low / untraced high, traced high /
    untraced low). None when either side has fewer than 3 iterations. One configuration on one
    machine pays the same profiler cost; two runs whose costs differ beyond these intervals ran
    on a machine whose speed changed (DESIGN.md "Noise", machine drift)."""
    traced = median_interval(run.traced_seconds())
    untraced = median_interval(run.untraced()["iteration_s"].to_numpy(float))
    if not (traced.judged and untraced.judged) or not untraced.low > 0:
        return None
    return Spread(n=min(traced.n, untraced.n), median=traced.median / untraced.median,
                  low=traced.low / untraced.high, high=traced.high / untraced.low,
                  confidence=traced.confidence * untraced.confidence)


def _empty() -> pd.DataFrame:
    return pd.DataFrame({"kind": pd.Series(dtype=object), "item": pd.Series(dtype=object),
                         "iteration": pd.Series(dtype=np.int64), "value": pd.Series(dtype=float)})


def _per_iteration(kind: str, items: pd.DataFrame, counted: list[int]) -> pd.DataFrame:
    """items (item, rank, iteration, value) -> one value per (item, counted iteration): the sum
    per rank, the largest rank's, 0 where the item is absent."""
    if items.empty or not counted:
        return _empty()
    items = items[np.isin(items["iteration"].to_numpy(), counted)]
    if items.empty:
        return _empty()
    per_rank = items.groupby(["item", "rank", "iteration"], sort=False, observed=True)["value"].sum()
    per_it = per_rank.groupby(level=["item", "iteration"], sort=False).max()
    full = pd.MultiIndex.from_product([per_it.index.get_level_values("item").unique(), counted],
                                      names=["item", "iteration"])
    out = per_it.reindex(full, fill_value=0.0).reset_index()
    return out.assign(kind=kind)[SAMPLE_COLUMNS]


def _steps(trace: Trace, steps: pd.DataFrame, counted: list[int]) -> pd.DataFrame:
    if steps.empty:
        return _empty()
    base = pd.DataFrame({"rank": steps["rank"].to_numpy(), "iteration": steps["step"].to_numpy(),
                         "value": steps["dur"].to_numpy(float)})
    parts = [_per_iteration("iteration", base.assign(item=ITERATION_TIME), counted)]
    if not trace.gpu.empty:
        from ..host.links import gpu_launches
        launches = gpu_launches(trace)
        launches = launches[launches["launch_row"].to_numpy() >= 0]
        (gpu_us,) = sums_inside(steps, launches, "launch_ts", [launches["dur"].to_numpy()], ("rank",))
        parts.append(_per_iteration("iteration", base.assign(item=ITERATION_GPU_TIME, value=gpu_us),
                                    counted))
    return pd.concat(parts, ignore_index=True)


def _annotations(trace: Trace) -> pd.DataFrame:
    """User annotations but ProfilerStep#N: item (name), rank, iteration (of their start), value."""
    ev = trace.events
    codes = ev["name"].cat.codes.to_numpy()
    at = np.flatnonzero((ev["cat"] == "user_annotation").to_numpy())
    at = at[~np.isin(codes[at], name_codes(ev, STEP))]
    rank, ts = ev["rank"].to_numpy()[at], ev["ts"].to_numpy()[at]
    names = np.asarray(ev["name"].cat.categories.astype(str), dtype=object)
    return pd.DataFrame({"item": names[codes[at]], "rank": rank,
                         "iteration": iterations(trace, rank, ts), "value": ev["dur"].to_numpy(float)[at]})


def _gpu(trace: Trace, counted: list[int]) -> pd.DataFrame:
    """Per-iteration GPU time by category, by kernel name and by collective kind."""
    from ..ranks.comm_kernels import comm_kernels, has_communication
    from ..gpu.kernels import gpu_with_category
    from ..host.links import gpu_launches

    g, links = gpu_with_category(trace), gpu_launches(trace)
    launched = links["launch_row"].to_numpy() >= 0
    it = np.full(len(links), -1, dtype=np.int64)
    it[launched] = iterations(trace, links["rank"].to_numpy()[launched],
                              links["launch_ts"].to_numpy(float)[launched])
    base = {"rank": links["rank"].to_numpy(), "iteration": it, "value": g["dur"].to_numpy(float)}
    parts = [_per_iteration("category", pd.DataFrame({"item": g["category"].astype(str).to_numpy(), **base}),
                            counted),
             _per_iteration("kernel", pd.DataFrame({"item": g["name"].astype(str).to_numpy(), **base}),
                            counted)]
    if has_communication(trace):
        c = comm_kernels(trace)
        parts.append(_per_iteration("communication", pd.DataFrame(
            {"item": c["kind"].astype(str).to_numpy(), "rank": c["rank"].to_numpy(),
             "iteration": c["iteration"].to_numpy(), "value": c["dur"].to_numpy(float)}), counted))
    return pd.concat(parts, ignore_index=True)


def _counts(analysis, counted: list[int]) -> pd.DataFrame:
    """Counts inside the counted iterations per (kind, item, site) (module docstring)."""
    parts = []
    for kind, points in (("sync", analysis.sync_points), ("host_read", analysis.host_reads)):
        if points is None or points.empty:
            continue
        inside = points[np.isin(points["iteration"].to_numpy(), counted)]
        if len(inside):
            c = inside.groupby(["kind", "site"], sort=True, observed=True).size().reset_index(name="count")
            parts.append(pd.DataFrame({"kind": kind, "item": c["kind"].astype(str).to_numpy(),
                                       "site": c["site"].astype(str).to_numpy(),
                                       "count": c["count"].to_numpy(np.int64)}))
    gpu = analysis.trace.gpu
    if not gpu.empty and counted:
        from ..host.links import gpu_launches
        links = gpu_launches(analysis.trace)
        kernel = (gpu["cat"] == "kernel").to_numpy() & (links["launch_row"].to_numpy() >= 0)
        it = iterations(analysis.trace, links["rank"].to_numpy()[kernel],
                        links["launch_ts"].to_numpy(float)[kernel])
        parts.append(pd.DataFrame({"kind": ["kernels"], "item": ["GPU kernels"], "site": [""],
                                   "count": [int(np.isin(it, counted).sum())]}))
    if not parts:
        return pd.DataFrame({"kind": pd.Series(dtype=object), "item": pd.Series(dtype=object),
                             "site": pd.Series(dtype=object), "count": pd.Series(dtype=np.int64)})
    return pd.concat(parts, ignore_index=True)
