"""The `goodhart-prof/diff/v1` JSON document of `goodhart-prof diff --json`.

Keys: `schema`; `a`, `b` {`paths`, `ranks`, `devices`}; `summary` [ {`metric`, `a`, `b`, `delta`,
`ratio`, `better`} ]; `headline` {`better`, `worse`} (lists of {`verdict`, `kind`, `item`, `metric`,
`a`, `b`, `delta`, `ratio`, `impact_us`}); `categories`, `kernels`, `sync_points` {`by_kind`, `sites`},
`devices`, `phases`, `communication`, `memory`, `efficiency` (achieved TFLOP/s per op type): the `Comparison` tables as records (columns `q_a`, `q_b`, `q_delta`, `q_ratio`
per quantity, see `goodhart_prof.analysis.compare.comparison`).

Noise (additive to v1): `iterations` {`a`, `b`: {`counted` (iterations compared), `warmup`
(traced iterations left out), `throughput` (untraced iterations of the run giving env-steps/s),
`profiler_cost` (null, or {`n`, `median`, `low`, `high`, `confidence`}: the run's traced / untraced
iteration time, `analysis/compare/noise.py`)}, `line` (the sentence the text report prints)};
`time_statement` (null, or "nothing can be concluded about time: ..." when a side has fewer than
3 counted iterations or the two profiler costs do not overlap: the machine changed speed);
`speed_check` (what the machine-drift check found, always present: "held: ...", "changed: ..." or
"not checked: ..." with why); `spread` [ {`kind`,
`item`, `metric`, `n_a`, `a` (median), `low_a`, `high_a`, `n_b`, `b`, `low_b`, `high_b`, `delta`,
`ratio`, `verdict` (`better`, `worse`, `within noise`, `not judged`), `impact_us`} ] (every time
figure); `counts` [ {`kind` (`sync`, `host_read`, `kernels`), `item`, `site`, `a`, `b`, `delta`,
`ratio`, `verdict`, `impact_us`, `per_iteration`} ]; `within_noise` [ {`kind`, `item`} ]; headline
items also carry `low_a`, `high_a`, `low_b`, `high_b` (a time item's intervals; null for counts)
and `site` (a count's site that changed most). Times in microseconds; B - A and B / A;
undefined values (a ratio over zero, a device missing on one side) are null, never NaN.

Readable (additive to v1): each `summary` row also has `name` (`iteration time`), `unit` (`time`
in us, `share` in [0, 1], `count`, `per_iteration`), `verdict` (`better`, `worse`, `within noise`,
`same` for an exact count, `not judged`) and `why` (`compare_summary`); a `spread` row's verdict
is `only in A` / `only in B` for a figure seen on one side only (never better or worse);
`recording_warning` (null, or the line saying A and B were recorded in different modes or on
different devices) and `recording` {`a`, `b`: {`mode` (run.json's, or null), `stacks` (the trace
holds Python stacks), `device`}}; `host_ops` [ {`name`, `presence`, `calls_*`, `self_us_*`,
`total_us_*` (whole traces), `median_a`, `low_a`, `high_a`, `median_b`, `low_b`, `high_b` (self
time per counted iteration), `verdict`} ] (the top ones with --top).
"""
from __future__ import annotations

from typing import Any

import pandas as pd

from ..json_report import records, spread_json
from ...units import device_key

SCHEMA = "goodhart-prof/diff/v1"


def _all(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return records(frame, list(frame.columns))


def _side(analysis) -> dict[str, Any]:
    t = analysis.trace
    return {"paths": [str(p) for p in t.paths], "ranks": [int(r) for r in t.ranks],
            "devices": [device_key(r, d) for r, d in t.devices]}


def _iterations(n) -> dict[str, Any]:
    return {"counted": [int(i) for i in n.iterations], "warmup": [int(i) for i in n.warmup],
            "throughput": [int(i) for i in n.throughput["iteration"]],
            "profiler_cost": spread_json(n.profiler_cost) if n.profiler_cost is not None else None}


def to_document(c, top: int | None = None) -> dict[str, Any]:
    """The diff as plain JSON types; `top` limits kernels, sync sites, phases and each headline list."""
    def head(frame: pd.DataFrame) -> pd.DataFrame:
        return frame if top is None else frame.head(top)

    return {
        "schema": SCHEMA,
        "recording_warning": c.recording_warning,
        "recording": c.recording,
        "a": _side(c.a),
        "b": _side(c.b),
        "summary": _all(c.summary),
        "headline": {"better": _all(head(c.better)), "worse": _all(head(c.worse))},
        "iterations": {"a": _iterations(c.noise_a), "b": _iterations(c.noise_b), "line": c.iterations_line},
        "time_statement": c.time_statement,
        "speed_check": c.speed_check,
        "spread": _all(c.spread),
        "counts": _all(c.counts),
        "within_noise": [{"kind": str(k), "item": str(i)}
                         for k, i in c.within_noise[["kind", "item"]].itertuples(index=False)],
        "categories": _all(c.categories),
        "kernels": _all(head(c.kernels)),
        "sync_points": {"by_kind": _all(c.sync_kinds), "sites": _all(head(c.sync_sites))},
        "devices": _all(c.devices),
        "phases": _all(head(c.phases)),
        "communication": _all(c.communication),
        "memory": _all(c.memory) if c.memory is not None else [],
        "efficiency": _all(c.efficiency) if c.efficiency is not None else [],
        "host_ops": _all(head(c.host_ops)) if c.host_ops is not None else [],
    }
