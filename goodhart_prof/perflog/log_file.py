"""The performance log's two files: the markdown table and its JSONL twin, their paths and lock,
appending a row to both, and reading the rows back.

Concurrent writers are safe: an append holds an exclusive `fcntl.flock` on the JSONL twin
(appended in place, never renamed, so no lock file is left beside the log) while it reads the
markdown, writes the new text to a temporary file, appends the JSONL line and renames the
temporary file over the markdown. Readers never see a half-written table. A failed
append leaves both files as they were (the JSONL line is cut back when it or the rename fails; an
unfinished last line left by a crash is cut off by the next append), so the twins hold the same
rows. A log path that is a symlink is followed (`real_log`).
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import time
from pathlib import Path
from typing import Any, Iterator

from ..errors import UserError
from ..fileio import atomic_path, exclusive_lock, make_parent, write_error
from ..textsafe import printable, quote_path

DEFAULT_LOG = "PERFLOG.md"
FIELDS = ("id", "date", "created", "change", "trace", "iteration_ms", "iteration_ms_low", "iteration_ms_high",
          "iteration_ms_n", "env_steps_per_s",
          "env_steps_per_s_low", "env_steps_per_s_high", "env_steps_per_s_n", "gpu_busy_pct", "syncs_per_iteration", "host_reads_per_iteration", "top_kernel", "top_kernel_pct",
          "memcpy_htod_ms")
# (field, markdown header, format): the markdown table's columns, in order.
COLUMNS = (
    ("id", "#", "{}"), ("date", "Date", "{}"), ("change", "Change", "{}"), ("trace", "Trace", "{}"),
    ("iteration_ms", "Iteration (ms)", "{:,.2f}"), ("env_steps_per_s", "Env-steps/s", "{:,.0f}"),
    ("gpu_busy_pct", "GPU busy %", "{:.1f}"), ("syncs_per_iteration", "Syncs/iter", "{:,.2f}"),
    ("host_reads_per_iteration", "Host reads/iter", "{:,.2f}"), ("top_kernel", "Top kernel", "{}"), ("top_kernel_pct", "Top kernel share", "{:.1f}%"),
    ("memcpy_htod_ms", "Memcpy HtoD (ms)", "{:,.3f}"),
)
HEADER = "| " + " | ".join(h for _, h, _ in COLUMNS) + " |"
SEPARATOR = "|" + "|".join("---" for _ in COLUMNS) + "|"
# The table as logs written before `Host reads/iter` hold it: a row added to such a log upgrades
# the table in place (the new column empty in its old rows).
ADDED = "host_reads_per_iteration"
OLD_HEADER = "| " + " | ".join(h for f, h, _ in COLUMNS if f != ADDED) + " |"
OLD_SEPARATOR = "|" + "|".join("---" for f, _, _ in COLUMNS if f != ADDED) + "|"
TITLE = "## Performance log"
INTRO = ("Added by `goodhart-prof log add`, newest first; the `.jsonl` file next to this one holds "
         "the same rows as JSON.")
KERNEL_WIDTH = 60


class PerfLogError(UserError):
    """A log, a row reference or an input that cannot be used; one line, exit 2."""


def jsonl_path(log: str | os.PathLike) -> Path:
    return real_log(log).with_suffix(".jsonl")


def real_log(log: str | os.PathLike) -> Path:
    """The log file itself: a `--log` that is a symlink is followed, so its lock, its JSONL twin
    and the rename are the real log's (every path to one log shares one lock and one twin)."""
    return Path(os.path.realpath(log))


# -- writing ---------------------------------------------------------------------------------------
@contextlib.contextmanager
def locked(log: str | os.PathLike) -> Iterator[None]:
    """Hold the log's exclusive lock: an flock on its JSONL twin, the one of the two files that is
    appended in place and never replaced, so the lock leaves no file of its own behind."""
    twin = jsonl_path(log)
    try:
        make_parent(twin)
        fd = os.open(twin, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        raise write_error(log, exc) from None
    try:
        exclusive_lock(fd, wait=True)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def append(measured: dict[str, Any], change: str, log: str | os.PathLike = DEFAULT_LOG) -> dict[str, Any]:
    """Add one row to the markdown log and its JSONL twin, atomically, under the lock: a failed
    append (disk full, read-only folder) leaves both files as they were."""
    shown, log = log, real_log(log)
    change = " ".join(str(change).split())
    if not change:
        raise PerfLogError("--change: say what this run changed (it cannot be empty)")
    with locked(shown):
        text = log.read_text(encoding="utf-8") if log.exists() else ""
        rows = read_rows(log)
        used = [r["id"] for r in rows if isinstance(r.get("id"), int)] + markdown_ids(text)
        now = time.localtime()
        row = {"id": max(used, default=0) + 1, "date": time.strftime("%Y-%m-%d", now),
               "created": time.strftime("%Y-%m-%dT%H:%M:%S%z", now), "change": change, **measured}
        row = {k: row.get(k) for k in FIELDS}
        line = (json.dumps(row, allow_nan=False) + "\n").encode("utf-8")
        twin, old_size = jsonl_path(log), None
        try:
            with atomic_path(log, ".md") as tmp:
                tmp.write_text(insert_row(text, markdown_row(row)), encoding="utf-8")
                # The JSONL line goes in before the rename, and is taken back if the rename fails.
                old_size = append_line(twin, line)
        except OSError as exc:
            if old_size is not None:
                with contextlib.suppress(OSError):  # else the next append cuts the line off
                    os.truncate(twin, old_size)
            raise write_error(shown, exc) from None
    return row


def append_line(path: Path, line: bytes) -> int:
    """Append `line` to the JSONL file, fsynced, and return the file's size before it; a failed
    write cuts the file back to that size (if even that fails, the torn line is cut off by the
    next append). An unfinished last line (a crash) is cut off first."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        size = _repair_torn_tail(fd)
        try:
            _write_all(fd, line, size)
            os.fsync(fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            raise
        return size
    finally:
        os.close(fd)


def _repair_torn_tail(fd: int) -> int:
    """Where the next line goes: after the last newline. An unfinished last line (a failed or
    killed append: never in the markdown, whose rename comes after it) is cut off; a whole row
    that only lacks its newline (an edit by hand) gets one."""
    size = os.fstat(fd).st_size
    end = size
    while end > 0:
        step = min(end, 1 << 16)
        at = os.pread(fd, step, end - step).rfind(b"\n")
        if at >= 0:
            end = end - step + at + 1
            break
        end -= step
    if end == size:
        return size
    try:
        whole = isinstance(json.loads(os.pread(fd, size - end, end)), dict)
    except ValueError:
        whole = False
    if whole:
        _write_all(fd, b"\n", size)
        return size + 1
    os.ftruncate(fd, end)
    return end


def _write_all(fd: int, data: bytes, offset: int) -> None:
    """pwrite until all of data is written (a short write is continued; an error raises)."""
    done = 0
    while done < len(data):
        done += os.pwrite(fd, data[done:], offset + done)


# -- the markdown table ----------------------------------------------------------------------------
def _cell(value: Any, fmt: str) -> str:
    if value is None:
        return ""
    text = fmt.format(value)  # one line, markdown's specials escaped, no control characters
    return printable(" ".join(text.split()).replace("\\", "\\\\").replace("|", "\\|"))


def markdown_row(row: dict[str, Any]) -> str:
    values = dict(row)
    kernel = values.get("top_kernel")
    if kernel and len(kernel) > KERNEL_WIDTH:
        values["top_kernel"] = kernel[: KERNEL_WIDTH - 1] + "…"
    return "| " + " | ".join(_cell(values.get(f), fmt) for f, _, fmt in COLUMNS) + " |"


def insert_row(text: str, line: str) -> str:
    """The markdown with line as the table's first row (the table is made when missing, and a
    table of the earlier layout upgraded)."""
    lines = upgraded(text.splitlines())
    for i in range(len(lines) - 1):
        if lines[i].strip() == HEADER and lines[i + 1].strip() == SEPARATOR:
            return "\n".join(lines[: i + 2] + [line] + lines[i + 2:]) + "\n"
    table = [HEADER, SEPARATOR, line]
    if not text.strip():
        return "\n".join(["# Performance log", "", INTRO, ""] + table) + "\n"
    return text.rstrip("\n") + "\n\n" + "\n".join([TITLE, "", INTRO, ""] + table) + "\n"


def upgraded(lines: list[str]) -> list[str]:
    """The lines with a table of the earlier layout (no `Host reads/iter`) in the current one: its
    header and separator replaced, an empty cell put in each of its rows where the column goes."""
    at = [f for f, _, _ in COLUMNS].index(ADDED)
    out, inside = [], False
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped == OLD_HEADER and i + 1 < len(lines) and lines[i + 1].strip() == OLD_SEPARATOR:
            out.append(HEADER)
            continue
        if stripped == OLD_SEPARATOR and out and out[-1] == HEADER:
            out.append(SEPARATOR)
            inside = True
            continue
        if inside and stripped.startswith("|"):
            cells = row_cells(stripped)
            line = "|" + "|".join(cells[:at] + [" "] + cells[at:]) + "|"
        else:
            inside = False
        out.append(line)
    return out


def row_cells(row: str) -> list[str]:
    """The cells of a markdown row as `_cell` wrote them (`\\|` a pipe and `\\\\` a backslash
    inside a cell), their text kept as written, outer pipes dropped."""
    cells, cell, escaped = [], [], False
    for ch in row.strip()[1:]:
        if escaped:
            cell.append(ch)
            escaped = False
        elif ch == "\\":
            cell.append(ch)
            escaped = True
        elif ch == "|":
            cells.append("".join(cell))
            cell = []
        else:
            cell.append(ch)
    return cells


def markdown_ids(text: str) -> list[int]:
    """Ids in the first column of our table's rows (they count even if the JSONL was lost)."""
    ids, inside = [], False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped in (SEPARATOR, OLD_SEPARATOR):
            inside = True
        elif inside and stripped.startswith("|"):
            m = re.match(r"\|\s*(\d+)\s*\|", stripped)
            if m:
                ids.append(int(m.group(1)))
        else:
            inside = False
    return ids


# -- reading ---------------------------------------------------------------------------------------
def read_rows(log: str | os.PathLike) -> list[dict[str, Any]]:
    """The JSONL twin's rows, newest first ([] when there is none). Unreadable lines (a torn
    write after a crash) are skipped."""
    path = jsonl_path(log)
    if not path.exists():
        return []
    rows = []
    for line in path.read_bytes().splitlines():
        try:
            row = json.loads(line.decode("utf-8"))
        except (ValueError, RecursionError):  # not UTF-8 (a write torn inside a character), not JSON
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows[::-1]


def require_rows(log: str | os.PathLike) -> list[dict[str, Any]]:
    rows = read_rows(log)
    if not rows:
        raise PerfLogError(f"{quote_path(jsonl_path(log))}: no performance log rows yet (add one with "
                           "`goodhart-prof log add PATH --change TEXT`)")
    return rows
