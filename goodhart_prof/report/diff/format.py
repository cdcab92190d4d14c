"""How `goodhart-prof diff` writes its figures (the terminal tables; the page uses the same words):
values in their units, signed changes, intervals, the readable kind of each item."""
from __future__ import annotations

from typing import Any

from ..common import interval_text, kernel_name, percent
from ...units import duration

# the spread, count and headline tables' `kind`, as the reports say it
KIND_NAMES = {"throughput": "throughput", "iteration": "iteration", "phase": "phase",
              "category": "kernel category", "kernel": "kernel", "communication": "collective",
              "sync": "sync points", "host_read": "host reads (CPU-only)", "kernels": "GPU kernels",
              "host_op": "host op"}


def num(value: Any) -> bool:
    return value is not None and isinstance(value, (int, float)) and value == value


def signed_us(value: Any, sig: bool = False) -> str:
    if not num(value):
        return "-"
    return ("+" if value > 0 else "-" if value < 0 else "") + duration(abs(value), significant=sig)


def ratio_text(value: Any, a: Any = None) -> str:
    if num(value):
        return f"{value:.2f}x"
    return "new" if a == 0 else "-"


def count(value: Any) -> str:
    return f"{value:,.0f}" if num(value) else "-"


def signed_count(value: Any) -> str:
    return f"{value:+,.0f}" if num(value) else "-"


def value_text(metric: str, value: Any, sig: bool = False) -> str:
    """A spread/count/headline figure: `time_us` a duration, `env_steps_per_s` a rate, counts
    (`sig`: durations to three significant digits, as the HTML page writes them)."""
    if not num(value):
        return "-"
    if metric == "time_us":
        return duration(value, significant=sig)
    if metric == "env_steps_per_s":
        return f"{value:,.0f} steps/s"
    if metric == "count_per_iteration":
        return f"{value:,.2f}/it" if abs(value) < 100 else f"{value:,.0f}/it"
    return count(value)


def signed_text(metric: str, value: Any, sig: bool = False) -> str:
    if not num(value):
        return "-"
    if metric == "time_us":
        return signed_us(value, sig)
    return ("+" if value > 0 else "") + value_text(metric, value)


def interval(metric: str, low: Any, high: Any) -> str:
    """`36.7-58.7 ms`, `6,422-9,912 steps/s`; "" without an interval."""
    if metric == "time_us":
        return interval_text(low, high)
    text = interval_text(low, high, "rate")
    return f"{text} steps/s" if text and metric == "env_steps_per_s" else text


def summary_text(unit: str, value: Any, signed: bool = False, sig: bool = False) -> str:
    """A summary row's value in its unit (compare_summary.SUMMARY_METRICS)."""
    if not num(value):
        return "-"
    if unit == "time":
        return signed_us(value, sig) if signed else duration(value, significant=sig)
    if unit == "share":
        return f"{100 * value:+.1f} pt" if signed else percent(value)
    if unit == "per_iteration":
        return f"{value:+,.2f}/it" if signed else f"{value:,.2f}/it"
    return signed_count(value) if signed else count(value)


def verdicts(c, kind: str) -> dict[str, str]:
    """item -> verdict of the comparison's spread rows of one kind (`phase`, `kernel`, ...)."""
    s = c.spread
    if s is None or s.empty:
        return {}
    rows = s[s["kind"] == kind]
    return dict(zip(rows["item"].astype(str), rows["verdict"].astype(str)))


def kernel_labels(names: list[str]) -> list[str]:
    """Each kernel's short name (trace.names.kernel_name), or its full name where two different
    kernels would share a short one (two instantiations of one template)."""
    short = [kernel_name(n) for n in names]
    owners: dict[str, set[str]] = {}
    for s, n in zip(short, names):
        owners.setdefault(s, set()).add(n)
    return [n if len(owners[s]) > 1 else s for s, n in zip(short, names)]


def item_names(frame) -> list[str]:
    """Each headline/count row's name: a kernel by its short name (full where two would share
    one), a count with the site that changed most."""
    kernel = (frame["kind"] == "kernel").to_numpy()
    items = frame["item"].astype(str).tolist()
    labels = iter(kernel_labels([i for i, k in zip(items, kernel) if k]))
    sites = frame["site"].tolist() if "site" in frame.columns else [None] * len(frame)
    return [(next(labels) if k else i) + (f" at {s}" if isinstance(s, str) and s else "")
            for i, k, s in zip(items, kernel, sites)]
