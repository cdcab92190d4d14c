"""Choosing two performance log rows and comparing them field by field, with a verdict each.

`compare_rows` judges iteration time and env-steps/s by their spread: when both rows carry an
interval (3+ iterations each) and the intervals overlap, the verdict is `within noise` (never
better/worse); a row without one (older rows, a run without metrics.jsonl) gives `no spread
recorded`, fewer than 3 iterations `not judged`.

Rows are named, for `select`, by their id: the `#` column `log show` and the markdown print (`7`,
or `id:7`), one numbering everywhere.
"""
from __future__ import annotations

import re
from typing import Any

from .log_file import PerfLogError

SPREAD_FIELDS = ("iteration_ms", "env_steps_per_s")  # fields whose rows carry _low, _high, _n
# (field, better when) for `compare`; None: neither direction is better.
COMPARED = (("iteration_ms", "lower"), ("env_steps_per_s", "higher"), ("gpu_busy_pct", "higher"),
            ("syncs_per_iteration", "lower"), ("host_reads_per_iteration", "lower"), ("top_kernel", None),
            ("top_kernel_pct", None), ("memcpy_htod_ms", "lower"))


def select(rows: list[dict[str, Any]], ref: str) -> dict[str, Any]:
    """A row by its id: the `#` column of `log show` and of the markdown (`7`, or `id:7`)."""
    ref = str(ref).strip()
    m = re.fullmatch(r"(id:)?(\d+)", ref)
    if not m:
        raise PerfLogError(f"{ref!r}: name a row by its id, the # column of `log show` (7 or id:7)")
    n = int(m.group(2))
    for row in rows:
        if row.get("id") == n:
            return row
    ids = ", ".join(str(r.get("id")) for r in rows[::-1])
    raise PerfLogError(f"{ref}: no row with that id (ids: {ids})")


def compare_rows(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """Field by field, B against A: field, a, b, delta (b - a), ratio (b / a; 1 when both are 0,
    None when only a is), verdict (`better`/`worse` by `COMPARED`, `changed` for text, else None)."""
    out = []
    for field, better in COMPARED:
        va, vb = a.get(field), b.get(field)
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (va, vb))
        delta = ratio = None
        verdict = "changed" if isinstance(va, str) and isinstance(vb, str) and va != vb else None
        if numeric:
            delta = vb - va
            ratio = vb / va if va else (1.0 if vb == 0 else None)
            verdict = None
            if better and delta:
                verdict = "better" if (delta < 0) == (better == "lower") else "worse"
            if field in SPREAD_FIELDS:
                verdict = _noise_verdict(field, a, b, verdict)
        out.append({"field": field, "a": va, "b": vb, "delta": delta, "ratio": ratio, "verdict": verdict})
    return out


def _noise_verdict(field: str, a: dict[str, Any], b: dict[str, Any], verdict: str | None) -> str | None:
    """better/worse only when both rows carry intervals that do not overlap (module docstring)."""
    from ..analysis.compare.spread import MIN_ITERATIONS

    spreads = [(r.get(f"{field}_low"), r.get(f"{field}_high"), r.get(f"{field}_n")) for r in (a, b)]
    if any(not isinstance(n, int) or (n >= MIN_ITERATIONS and (lo is None or hi is None))
           for lo, hi, n in spreads):
        return "no spread recorded"
    if any(n < MIN_ITERATIONS for _, _, n in spreads):
        return "not judged"
    (la, ha, _), (lb, hb, _) = spreads
    return "within noise" if la <= hb and lb <= ha else verdict
