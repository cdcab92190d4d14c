"""The verdicts of a comparison: which changes are real (better/worse) and which are noise.

Inputs are the two sides' per-iteration samples (`analysis/compare/noise.py`); definitions in
docs/DESIGN.md "Noise" and the module docstring of `analysis/compare/comparison.py`.

- **Time figures** (`spread_table`: iteration time, iteration GPU time, phases, kernel categories,
  kernels, collectives, env-steps/s): per side the median over the counted iterations and its
  interval (`spread.median_interval`). Verdict `better`/`worse` only when both sides have 3 or
  more values and the intervals do not overlap; `within noise` when they overlap; `not judged`
  when a side has fewer than 3 values. Better: a lower median time, a higher env-steps/s.
- **Machine drift** (`drift_statement`; `speed_check` says what the check found, every time): each run's traced iterations against its untraced ones
  (metrics.jsonl), `noise.profiler_cost`; when the two runs' ratios do not overlap, the machine's
  speed changed under one of them and every time verdict is `not judged`, with that sentence.
- **Counts** (`count_table`: sync points per kind, CPU-only host reads per kind, GPU kernels):
  per iteration (count in the counted iterations / their number) when both sides have counted
  iterations, else the whole traces' totals (kernels then not compared); any difference is
  `better` (fewer) or `worse` (more). `site` is the kind's site whose count changed most.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .noise import ENV_STEPS, Noise
from .spread import MIN_ITERATIONS, overlap

TIME_KINDS = ("throughput", "iteration", "phase", "category", "kernel", "communication")
SPREAD_COLUMNS = ["kind", "item", "metric", "n_a", "a", "low_a", "high_a", "n_b", "b", "low_b",
                  "high_b", "delta", "ratio", "verdict", "impact_us"]
COUNT_COLUMNS = ["kind", "item", "site", "a", "b", "delta", "ratio", "verdict", "impact_us", "per_iteration"]
HEADLINE_COLUMNS = ["verdict", "kind", "item", "metric", "a", "b", "delta", "ratio", "impact_us",
                    "low_a", "high_a", "low_b", "high_b", "site"]


def _ratio(a: float, b: float) -> float:
    if a == 0:
        return 1.0 if b == 0 else float("nan")
    return b / a


def drift_statement(na: Noise, nb: Noise) -> str | None:
    """The sentence that withholds every time verdict when the machine's speed changed between
    or during the runs (their profiler costs, `noise.profiler_cost`, do not overlap); else None."""
    ca, cb = na.profiler_cost, nb.profiler_cost
    if ca is None or cb is None or overlap(ca, cb):
        return None
    return (f"nothing can be concluded about time: the machine's speed changed between or during the runs. "
            f"Their traced iterations took {ca.median:.2f}x ({ca.low:.2f}-{ca.high:.2f}x) the untraced "
            f"ones in A and {cb.median:.2f}x ({cb.low:.2f}-{cb.high:.2f}x) in B, where one profiler "
            "costs the same in both; repeat both runs back to back on a quiet machine (on a shared "
            "CPU, OMP_NUM_THREADS=1); counts are still compared")


def speed_check(na: Noise, nb: Noise) -> str:
    """What the machine-drift check found, said every time: `held` (both runs' profiler costs
    overlap), `changed` (they do not: every time verdict is withheld, `drift_statement`), or `not
    checked` and why (a side without a run record holding enough traced and untraced iterations:
    its time verdicts then rest on the assumption that the machine kept its speed)."""
    ca, cb = na.profiler_cost, nb.profiler_cost
    lacking = [side for side, cost in (("A", ca), ("B", cb)) if cost is None]
    if lacking:
        who = " and ".join(lacking)
        return (f"not checked: {who} {'has' if len(lacking) == 1 else 'have'} no run record with "
                f"{MIN_ITERATIONS}+ traced and {MIN_ITERATIONS}+ untraced iterations (the run's "
                "metrics.jsonl beside the trace), so whether the machine kept its speed between and "
                "during the runs is unknown; the time verdicts assume it did")
    drift = drift_statement(na, nb)
    if drift is not None:
        return "changed: " + drift
    return (f"held: the traced iterations took {ca.median:.2f}x ({ca.low:.2f}-{ca.high:.2f}x) the "
            f"untraced ones in A and {cb.median:.2f}x ({cb.low:.2f}-{cb.high:.2f}x) in B, within each "
            "other's spread")


def spread_table(na: Noise, nb: Noise, withheld: bool = False) -> pd.DataFrame:
    """One row per time figure seen on either side (module docstring), largest median first
    within each kind; `withheld` (a drift statement) makes every verdict `not judged`."""
    rows = []
    n_mean = (na.n + nb.n) / 2
    for kind in TIME_KINDS:
        if kind == "throughput":
            if na.throughput.empty and nb.throughput.empty:
                continue
            items = [ENV_STEPS]
        else:
            seen = pd.concat([na.samples, nb.samples], ignore_index=True)
            seen = seen[seen["kind"] == kind]
            size = seen.groupby("item", sort=False)["value"].median().sort_values(ascending=False, kind="stable")
            items = size.index.tolist()
        for item in items:
            sa, sb = na.spread(kind, item), nb.spread(kind, item)
            delta = sb.median - sa.median
            higher_better = kind == "throughput"
            if withheld or not (sa.judged and sb.judged):
                verdict = "not judged"
            elif sa.low <= sb.high and sb.low <= sa.high:
                verdict = "within noise"
            else:
                verdict = "better" if (delta > 0) == higher_better else "worse"
            impact = abs(delta) * n_mean if kind != "throughput" else _throughput_impact(na, nb, sa, sb)
            rows.append((kind, item, "env_steps_per_s" if higher_better else "time_us",
                         sa.n, sa.median, sa.low, sa.high, sb.n, sb.median, sb.low, sb.high,
                         delta, _ratio(sa.median, sb.median), verdict, impact))
    return pd.DataFrame(rows, columns=SPREAD_COLUMNS).astype(
        {"n_a": np.int64, "n_b": np.int64, **{c: float for c in ("a", "b", "low_a", "high_a", "low_b",
                                                              "high_b", "delta", "ratio", "impact_us")}})


def _throughput_impact(na: Noise, nb: Noise, sa, sb) -> float:
    """The change in time per iteration at the median rates (median env steps per iteration of
    both sides) times the mean number of throughput iterations, in us."""
    steps = pd.concat([na.throughput["env_steps_all"], nb.throughput["env_steps_all"]]).median()
    if not (sa.median > 0 and sb.median > 0 and steps == steps):
        return float("nan")
    return abs(steps / sb.median - steps / sa.median) * 1e6 * (sa.n + sb.n) / 2


def count_table(a, b, na: Noise, nb: Noise) -> pd.DataFrame:
    """One row per counted kind on either side (module docstring); a, b per iteration or totals."""
    per_iteration = na.n > 0 and nb.n > 0
    if per_iteration:
        ca, cb = na.counts, nb.counts
    else:  # no counted iterations on a side: whole-trace totals of sync points and host reads
        ca, cb = _totals(a), _totals(b)
    keys = pd.concat([ca[["kind", "item"]], cb[["kind", "item"]]]).drop_duplicates()
    rows = []
    for kind, item in keys.itertuples(index=False):
        ga = ca[(ca["kind"] == kind) & (ca["item"] == item)]
        gb = cb[(cb["kind"] == kind) & (cb["item"] == item)]
        va, vb = float(ga["count"].sum()), float(gb["count"].sum())
        if per_iteration:
            va, vb = va / na.n, vb / nb.n
        sites = pd.concat([ga.set_index("site")["count"].rename("a") / (na.n if per_iteration else 1),
                           gb.set_index("site")["count"].rename("b") / (nb.n if per_iteration else 1)],
                          axis=1).fillna(0.0)
        change = (sites["b"] - sites["a"]).abs()
        site = str(change.idxmax()) if len(change) and change.max() > 0 and change.idxmax() else None
        delta = vb - va
        verdict = None if delta == 0 else ("better" if delta < 0 else "worse")
        rows.append((kind, item, site, va, vb, delta, _ratio(va, vb), verdict, float("nan"), per_iteration))
    order = {"sync": 0, "host_read": 1, "kernels": 2}
    out = pd.DataFrame(rows, columns=COUNT_COLUMNS)
    return out.assign(_o=out["kind"].map(order)).sort_values(["_o", "item"], kind="stable") \
        .drop(columns="_o").reset_index(drop=True)


def _totals(analysis) -> pd.DataFrame:
    parts = []
    for kind, points in (("sync", analysis.sync_points), ("host_read", analysis.host_reads)):
        if points is not None and len(points):
            c = points.groupby(["kind", "site"], sort=True, observed=True).size().reset_index(name="count")
            parts.append(pd.DataFrame({"kind": kind, "item": c["kind"].astype(str).to_numpy(),
                                       "site": c["site"].astype(str).to_numpy(), "count": c["count"].to_numpy()}))
    if not parts:
        return pd.DataFrame({"kind": pd.Series(dtype=object), "item": pd.Series(dtype=object),
                             "site": pd.Series(dtype=object), "count": pd.Series(dtype=np.int64)})
    return pd.concat(parts, ignore_index=True)


def with_host_time(counts: pd.DataFrame, a, b) -> pd.DataFrame:
    """impact_us of sync and host-read kinds: the change in their host time (whole traces)."""
    out = counts.copy()
    for i, r in out.iterrows():
        if r["kind"] in ("sync", "host_read"):
            pa = a.sync_points if r["kind"] == "sync" else a.host_reads
            pb = b.sync_points if r["kind"] == "sync" else b.host_reads
            wa = float(pa.loc[pa["kind"] == r["item"], "dur"].sum()) if len(pa) else 0.0
            wb = float(pb.loc[pb["kind"] == r["item"], "dur"].sum()) if len(pb) else 0.0
            out.at[i, "impact_us"] = abs(wb - wa)
    return out


def headline(spread: pd.DataFrame, counts: pd.DataFrame) -> pd.DataFrame:
    """Better first, then worse, each by impact (largest first; counts without one last)."""
    t = spread[spread["verdict"].isin(["better", "worse"])].assign(site=None)
    c = counts[counts["verdict"].isin(["better", "worse"])].assign(
        metric=np.where(counts.loc[counts["verdict"].isin(["better", "worse"]), "per_iteration"],
                        "count_per_iteration", "count"),
        low_a=np.nan, high_a=np.nan, low_b=np.nan, high_b=np.nan)
    out = pd.concat([f[HEADLINE_COLUMNS] for f in (t, c) if len(f)] or
                    [pd.DataFrame(columns=HEADLINE_COLUMNS)], ignore_index=True)
    out = out.assign(_rank=(out["verdict"] != "better").astype(int),
                     _impact=-out["impact_us"].astype(float).fillna(-1.0))
    out = out.sort_values(["_rank", "_impact", "kind", "item"], kind="stable")
    return out[HEADLINE_COLUMNS].reset_index(drop=True)


def time_statement(na: Noise, nb: Noise) -> str | None:
    """The sentence a side with too few iterations gets; None when both have enough."""
    few = [f"{s} has {n.n} counted iteration{'s' if n.n != 1 else ''}" for s, n in (("A", na), ("B", nb))
           if n.n < MIN_ITERATIONS]
    if not few:
        return None
    return (f"nothing can be concluded about time: {' and '.join(few)} (at least {MIN_ITERATIONS} "
            "are needed to tell a change from noise); counts are still compared")


def iterations_line(na: Noise, nb: Noise) -> str:
    """`A: 6 iterations (1 warm-up excluded), B: 6 iterations`, plus env-steps/s samples."""
    def side(name: str, n: Noise) -> str:
        text = f"{name}: {n.n} iteration{'s' if n.n != 1 else ''}"
        if n.warmup:
            text += f" ({len(n.warmup)} warm-up excluded)"
        if len(n.throughput):
            text += f", env-steps/s from {len(n.throughput)} untraced iterations"
        return text
    return f"{side('A', na)}; {side('B', nb)}"
