"""What the report writers share: output-path checks, number and name formatting, rich tables.

One overwrite rule for every file a command writes (`--html`, `diff --html`, `export -o`): an
existing file is kept unless `--force`, a folder is refused, in the style of every error here
(`PATH: problem`).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
from rich.table import Table

from ..errors import UserError


def refuse_overwrite(path: str | Path, force: bool, error: type[UserError] = UserError) -> Path:
    """The output path, refused (one line, exit 2) when it is a folder or exists (unless force).
    Called before the work, so a refusal costs nothing."""
    path = Path(path)
    if path.is_dir():
        raise error(f"{path}: is a folder, not a file")
    if path.exists() and not force:
        raise error(f"{path}: already exists (use --force to replace it)")
    return path


def duration(us: Any, significant: bool = False) -> str:
    """Microseconds in the unit that fits: `1.234 ms` (three decimals, the terminal's tables), or
    with `significant` three significant digits (`1.23 ms`, the HTML page); `-` when missing."""
    if us is None or not isinstance(us, (int, float, np.number)) or not math.isfinite(float(us)):
        return "-"
    us = float(us)
    if significant:
        if us >= 1e6:
            return f"{us / 1e6:,.3g} s" if us < 1e7 else f"{us / 1e6:,.1f} s"
        if us >= 1e3:
            return f"{us / 1e3:,.3g} ms"
        return f"{us:,.3g} us"
    if us >= 1e6:
        return f"{us / 1e6:,.3f} s"
    if us >= 1e3:
        return f"{us / 1e3:,.3f} ms"
    return f"{us:,.1f} us"


def bytes_text(nbytes: Any, signed: bool = False) -> str:
    """Bytes in the binary unit that fits (`1.5 GiB`, `12.0 MiB`, `48 B`); `-` when missing."""
    if nbytes is None or not isinstance(nbytes, (int, float, np.number)) or not math.isfinite(float(nbytes)):
        return "-"
    value = float(nbytes)
    sign = "+" if signed and value > 0 else "-" if value < 0 else ""
    value = abs(value)
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= size:
            return f"{sign}{value / size:,.1f} {unit}"
    return f"{sign}{value:,.0f} B"


def percent(value: Any) -> str:
    return "-" if value is None or value != value else f"{100 * float(value):.1f}%"


def short(text: str, width: int = 90) -> str:
    """The start of a long name, with an ellipsis."""
    text = str(text)
    return text if len(text) <= width else text[: width - 1] + "…"


def short_tail(text: str, width: int) -> str:
    """The end of a long site: its innermost part says the most."""
    return text if len(text) <= width else "…" + text[-(width - 1):]


def make_table(title: str, *columns: str, right: tuple[int, ...] = ()) -> Table:
    """A rich table in the reports' style: first column folds, the others cut with an ellipsis."""
    out = Table(title=title, title_justify="left", title_style="bold", show_edge=False, pad_edge=False)
    for i, col in enumerate(columns):
        out.add_column(col, justify="right" if i in right else "left",
                       overflow="fold" if i == 0 else "ellipsis")
    return out
