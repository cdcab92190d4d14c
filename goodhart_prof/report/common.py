"""What the report writers share: output-path checks, number and name formatting (the tables
themselves: goodhart_prof/tables.py).

One overwrite rule for every file a command writes (`--html`, `diff --html`, `export -o`): an
existing file is kept unless `--force`, a folder is refused, in the style of every error here
(`PATH: problem`).
"""
from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.errors import MarkupError
from rich.markup import escape as escape_markup
from rich.text import Text

from ..errors import UserError
from ..textsafe import printable, quote_path
from ..units import bytes_text, duration
from ..trace.names import kernel_name  # noqa: F401  (re-exported: its home is trace/names.py)


def refuse_overwrite(path: str | Path, force: bool, error: type[UserError] = UserError) -> Path:
    """The output path, refused (one line, exit 2) when it is a folder or exists (unless force).
    Called before the work, so a refusal costs nothing."""
    path = Path(path)
    if path.is_dir():
        raise error(f"{quote_path(path)}: is a folder, not a file")
    if path.exists() and not force:
        raise error(f"{quote_path(path)}: already exists (use --force to replace it)")
    return path


def percent(value: Any) -> str:
    return "-" if value is None or value != value else f"{100 * float(value):.1f}%"


def number(value: Any, digits: int) -> str:
    """A figure with `digits` decimals and thousands separators; `-` when missing (None, NaN)."""
    return "-" if value is None or value != value else f"{value:,.{digits}f}"


def count_text(value: float | None) -> str:
    """A count, or a count per iteration: whole from 10 up or when whole (`1,234`, `3`), else one
    decimal (`2.5`); `-` when missing."""
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 10 or float(value).is_integer() else f"{value:.1f}"



def saving_text(finding: Any) -> str:
    """What fixing a finding would save, as the reports print it: `saves ~1.66 ms/iteration
    (0.14%)`, `saves ~493 ms over the trace (49.9% of its span)` without iterations, or `no
    time estimate: <why>`."""
    us, share = finding.est_saving_us, finding.est_saving_share
    if us is None:
        return f"no time estimate: {finding.saving_note}" if finding.saving_note else "no time estimate"
    ms = us / 1e3
    amount = f"{ms:,.3g}" if ms < 1000 else f"{ms:,.0f}"
    pct = "" if share is None else (f"{100 * share:.2g}%" if share < 0.01 else f"{100 * share:.1f}%")
    if finding.saving_basis == "trace":
        return f"saves ~{amount} ms over the trace" + (f" ({pct} of its span)" if pct else "")
    return f"saves ~{amount} ms/iteration" + (f" ({pct})" if pct else "")


def short(text: str, width: int = 90) -> str:
    """The start of a long name, with an ellipsis."""
    text = str(text)
    return text if len(text) <= width else text[: width - 1] + "…"


def short_tail(text: str, width: int) -> str:
    """The end of a long site: its innermost part says the most."""
    return text if len(text) <= width else "…" + text[-(width - 1):]


def interval_text(low: Any, high: Any, kind: str = "time") -> str:
    """An interval on one line in one unit: `36.7-58.7 ms` (time, three significant digits,
    the unit of the larger end), `6,422-9,912` (a rate or count); "" without one."""
    if not all(isinstance(v, (int, float, np.number)) and math.isfinite(float(v)) for v in (low, high)):
        return ""
    low, high = float(low), float(high)
    if kind != "time":
        return f"{low:,.0f}-{high:,.0f}" if max(abs(low), abs(high)) >= 100 else f"{low:,.2f}-{high:,.2f}"
    scale, unit = (1e6, "s") if high >= 1e6 else (1e3, "ms") if high >= 1e3 else (1.0, "us")
    return f"{_sig(low / scale)}-{_sig(high / scale)} {unit}"


def _sig(value: float) -> str:
    return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"


class SafeConsole(Console):
    """The reports' console: every string it prints or puts in a table cell is made printable
    first (`textsafe.printable`: a kernel named `ESC[2J` shows as `\\x1b[2J`), so no name, site
    or path from a trace acts on the terminal. Text objects built by hand go through
    `tables.safe_text`.
    A string whose markup does not parse (a name like `k[/z]` in a cell) is shown as it is rather
    than raise; the reports pass names inside their own markup through `plain`."""

    def render_str(self, text: str, **kwargs: Any) -> Text:
        text = printable(text)
        try:
            return super().render_str(text, **kwargs)
        except MarkupError:
            return super().render_str(text, **{**kwargs, "markup": False})


def plain(text: Any) -> str:
    """A name or path to put inside rich markup: printable, its brackets escaped (shown, not
    read as tags)."""
    return escape_markup(printable(text))


_NAME_KEYS = {"site", "cause", "op", "name", "kernel", "frame"}
_PERCENT_WORDS = ("share", "utilization", "ratio", "fraction", "overlap")
_LIST_ITEMS = 3


def _label(key: str) -> str:
    key = str(key)
    if key == "device":
        return "GPU"
    return re.sub(r"_us(?=_|$)", "", key).replace("_", " ").strip()


def evidence_value(key: str, value: Any) -> str:
    """One figure of a finding's evidence in its unit: `_us` keys as durations, shares and
    utilizations in [0, 1] as percentages, byte counts in binary units, kernel names short."""
    key = str(key)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float, np.number)) and not isinstance(value, bool):
        if re.search(r"_us(?:_|$)", key):
            return duration(value)
        if "bytes" in key:
            return bytes_text(value)
        # whole words of the key: "iteration" holds "ratio" and is no ratio
        if any(w in key.split("_") for w in _PERCENT_WORDS) and 0 <= float(value) <= 1:
            return percent(value)
        value = float(value)
        return f"{value:,.0f}" if value.is_integer() else f"{value:,.3g}"
    if key in ("kernel", "name"):
        return kernel_name(value, 80)
    if isinstance(value, dict):
        return ", ".join(_figure(k, v) for k, v in value.items() if v is not None)
    if isinstance(value, (list, tuple)):
        return ", ".join(evidence_value(key, v) for v in value)
    return str(value)


def _figure(key: str, value: Any) -> str:
    """`label value`, or the value alone for a name; a nested dict as `label (figures)`."""
    if isinstance(value, dict):
        return f"{_label(key)} ({evidence_value(key, value)})"
    if key in _NAME_KEYS:
        return evidence_value(key, value)
    if key == "count" and isinstance(value, (int, np.integer)):
        return f"{value:,}x"
    return f"{_label(key)} {evidence_value(key, value)}"


def evidence_lines(evidence: dict, long_text: int = 60) -> list[str]:
    """A finding's evidence as a few lines of labelled figures (`rank 7 · GPU 7 · utilization
    24.3%`): scalars on the first line; each nested dict, long text and list of dicts (sites,
    causes: one indented line per item, the first few) on lines of their own. The raw dict is
    the JSON report's."""
    head, rest = [], []
    for key, value in evidence.items():
        if value is None or value == [] or value == {}:
            continue
        if isinstance(value, (list, tuple)) and all(isinstance(v, dict) for v in value):
            rest.append(f"{_label(key)}:" if key != "sites" else "at:")
            for item in value[:_LIST_ITEMS]:
                rest.append("  " + " · ".join(_figure(k, v) for k, v in item.items() if v is not None))
            if len(value) > _LIST_ITEMS:
                rest.append(f"  (+{len(value) - _LIST_ITEMS} more)")
        elif isinstance(value, dict):
            rest.append(f"{_label(key)}: " + " · ".join(_figure(k, v) for k, v in value.items()
                                                        if v is not None))
        elif isinstance(value, str) and key not in ("kernel", "name") and len(value) > long_text:
            rest.append(f"{_label(key)}: {value}")
        else:
            head.append(_figure(key, value) if key not in _NAME_KEYS else
                        f"{_label(key)} {evidence_value(key, value)}")
    return ([" · ".join(head)] if head else []) + rest


# A table with a row per device, rank or thread stays readable: past this many rows the report
# shows the ROW_LIMIT that matter most (most idle time, slowest step) and says how many more.
ROW_LIMIT = 20


def capped(scores: "list[float] | np.ndarray", limit: int = ROW_LIMIT) -> np.ndarray:
    """Positions of the rows to show, in their own order: all of them up to `limit`, else the
    `limit` with the largest scores (ties: the earlier row)."""
    scores = np.nan_to_num(np.asarray(scores, dtype=float), nan=-np.inf)
    if len(scores) <= limit:
        return np.arange(len(scores))
    return np.sort(np.argsort(-scores, kind="stable")[:limit])


def more_rows(total: int, shown: int, what: str, by: str) -> str:
    """The line under a capped table: `... and 19,980 more devices (the 20 with the most idle time
    are shown; --json lists all)`; empty when nothing was left out."""
    if total <= shown:
        return ""
    return f"... and {total - shown:,} more {what} (the {shown} with the {by} are shown; --json lists all)"
