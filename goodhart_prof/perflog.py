"""The performance log: one dated row of key figures per analysed trace, and A/B comparison of rows.

`goodhart-prof log add PATH --change TEXT` analyses PATH and adds a row to a markdown table
(PERFLOG.md by default: newest row first, right under the header; the file and header are made
when missing, and a file without our header gets the table appended at its end) and to its
machine-readable twin next to it (PERFLOG.jsonl: one JSON object per row, append-only, oldest
first). Row fields (`FIELDS`):

| field | meaning |
| --- | --- |
| id | 1, 2, 3, ... in the order rows were added (stable; row numbers shift as rows are added) |
| date, created | local date (markdown) and ISO timestamp (JSONL) of the append |
| change | what this run changed (`--change`) |
| trace | PATH as given |
| iteration_ms | median CPU time of one `ProfilerStep#N` over the counted iterations (warm-up excluded; per iteration the largest rank's: `analysis/compare/noise.py`), ms; without counted iterations, the mean over all steps |
| iteration_ms_low, _high, _n | its interval (`analysis/compare/spread.py`) and number of iterations (JSONL only) |
| env_steps_per_s | median env-steps/s over the run's throughput iterations (metrics.jsonl of the run folder PATH is or lies in: untraced, warm-up excluded, `trace/run.py`); without metrics.jsonl, run.json's `env_steps_per_s` (no spread); empty without a run |
| env_steps_per_s_low, _high, _n | the median's interval (`analysis/compare/spread.py`) and the number of iterations (JSONL only; null: no spread recorded) |
| gpu_busy_pct | GPU busy / span over all devices, % |
| syncs_per_iteration | sync points inside `ProfilerStep#N` per step |
| top_kernel, top_kernel_pct | the kernel with the most GPU time and its share of GPU activity time, % |
| memcpy_htod_ms | total duration of GPU memcpys named `Memcpy HtoD*`, ms |

Concurrent writers are safe: an append holds an exclusive `fcntl.flock` on `PERFLOG.md.lock`
while it reads the markdown, writes the new text to a temporary file, appends the JSONL line and
renames the temporary file over the markdown. Readers never see a half-written table. A failed
append leaves both files as they were (the JSONL line is cut back when it or the rename fails; an
unfinished last line left by a crash is cut off by the next append), so the twins hold the same
rows. A log path that is a symlink is followed (`real_log`).

`compare` judges iteration time and env-steps/s by their spread: when both rows carry an interval (3+ iterations each)
and the intervals overlap, the verdict is `within noise` (never better/worse); a row without one
(older rows, a run without metrics.jsonl) gives `no spread recorded`, fewer than 3 iterations
`not judged`.

Rows are named, for `compare`, by their row number in newest-first order (`1` is the newest, as
`log show` numbers them) or by id (`id:7`).
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import re
import time
from pathlib import Path
from typing import Any, Iterator

from .errors import UserError, warn
from .fileio import atomic_path, exclusive_lock, make_parent, write_error
from .trace.run_record import read_run
from .textsafe import printable, quote_path

DEFAULT_LOG = "PERFLOG.md"
HTOD_PREFIX = "Memcpy HtoD"
FIELDS = ("id", "date", "created", "change", "trace", "iteration_ms", "iteration_ms_low", "iteration_ms_high",
          "iteration_ms_n", "env_steps_per_s",
          "env_steps_per_s_low", "env_steps_per_s_high", "env_steps_per_s_n", "gpu_busy_pct", "syncs_per_iteration", "top_kernel", "top_kernel_pct", "memcpy_htod_ms")
# (field, markdown header, format): the markdown table's columns, in order.
COLUMNS = (
    ("id", "#", "{}"), ("date", "Date", "{}"), ("change", "Change", "{}"), ("trace", "Trace", "{}"),
    ("iteration_ms", "Iteration (ms)", "{:,.2f}"), ("env_steps_per_s", "Env-steps/s", "{:,.0f}"),
    ("gpu_busy_pct", "GPU busy %", "{:.1f}"), ("syncs_per_iteration", "Syncs/iter", "{:,.2f}"),
    ("top_kernel", "Top kernel", "{}"), ("top_kernel_pct", "Top kernel share", "{:.1f}%"),
    ("memcpy_htod_ms", "Memcpy HtoD (ms)", "{:,.3f}"),
)
HEADER = "| " + " | ".join(h for _, h, _ in COLUMNS) + " |"
SEPARATOR = "|" + "|".join("---" for _ in COLUMNS) + "|"
TITLE = "## Performance log"
INTRO = ("Added by `goodhart-prof log add`, newest first; the `.jsonl` file next to this one holds "
         "the same rows as JSON.")
KERNEL_WIDTH = 60
SPREAD_FIELDS = ("iteration_ms", "env_steps_per_s")  # fields whose rows carry _low, _high, _n
# (field, better when) for `compare`; None: neither direction is better.
COMPARED = (("iteration_ms", "lower"), ("env_steps_per_s", "higher"), ("gpu_busy_pct", "higher"),
            ("syncs_per_iteration", "lower"), ("top_kernel", None), ("top_kernel_pct", None),
            ("memcpy_htod_ms", "lower"))


class PerfLogError(UserError):
    """A log, a row reference or an input that cannot be used; one line, exit 2."""


def jsonl_path(log: str | os.PathLike) -> Path:
    return real_log(log).with_suffix(".jsonl")


def lock_path(log: str | os.PathLike) -> Path:
    log = real_log(log)
    return log.with_name(log.name + ".lock")


def real_log(log: str | os.PathLike) -> Path:
    """The log file itself: a `--log` that is a symlink is followed, so its lock, its JSONL twin
    and the rename are the real log's (every path to one log shares one lock and one twin)."""
    return Path(os.path.realpath(log))


# -- measuring -------------------------------------------------------------------------------------
def env_steps_per_s(path: str | os.PathLike) -> float | None:
    """run.json's whole-run `env_steps_per_s` for the run path belongs to; None without one."""
    run = _run(path)
    return run.env_steps_per_s if run is not None else None


def _run(path: str | os.PathLike):
    """The run record of path (None: not part of a run); its skipped metrics.jsonl lines are
    warned for here, once."""
    try:
        run = read_run(path)
    except UserError as exc:
        raise PerfLogError(exc.message) from None
    for warning in run.warnings if run is not None else []:
        warn(warning)
    return run


def throughput(run) -> dict[str, Any]:
    """The row's env-steps/s fields: the median and interval of the run's per-iteration values
    (metrics.jsonl), else run.json's figure without spread, else nothing (no run)."""
    from .analysis.compare.spread import median_interval

    empty = {"env_steps_per_s": None, "env_steps_per_s_low": None, "env_steps_per_s_high": None,
             "env_steps_per_s_n": None}
    if run is None:
        return empty
    samples = run.throughput()
    if samples.empty:
        return {**empty, "env_steps_per_s": run.env_steps_per_s}
    s = median_interval(samples["rate"].to_numpy(float))
    return {"env_steps_per_s": s.median, "env_steps_per_s_low": s.low, "env_steps_per_s_high": s.high,
            "env_steps_per_s_n": s.n}


def memcpy_htod_us(trace) -> float:
    """Total duration of the GPU memcpys whose name starts with `Memcpy HtoD`."""
    gpu = trace.gpu
    copies = gpu[(gpu["cat"] == "gpu_memcpy").to_numpy()]
    if copies.empty:
        return 0.0
    names = copies["name"].astype(str)
    return float(copies["dur"].to_numpy()[names.str.startswith(HTOD_PREFIX).to_numpy()].sum())


def iteration_time(analysis, run) -> dict[str, Any]:
    """The iteration time fields: median and interval over the counted iterations (ms)."""
    from .analysis.compare.summary import mean_iteration_us
    from .analysis.compare.noise import ITERATION_TIME, noise

    n = noise(analysis, run)
    if not n.n:
        return {"iteration_ms": mean_iteration_us(analysis.phases) / 1e3, "iteration_ms_low": None,
                "iteration_ms_high": None, "iteration_ms_n": None}
    s = n.spread("iteration", ITERATION_TIME)
    return {"iteration_ms": s.median / 1e3, "iteration_ms_low": s.low / 1e3, "iteration_ms_high": s.high / 1e3,
            "iteration_ms_n": s.n}


def measure(analysis, path: str | os.PathLike) -> dict[str, Any]:
    """The figures of one row (no id, date or change) from an analysis of the trace at path."""
    return _measured(analysis, path, _run(path))


def _measured(analysis, path: str | os.PathLike, run) -> dict[str, Any]:
    """`measure`, with the run record (or None) of the run path belongs to already read."""
    from .analysis.compare.summary import syncs_per_iteration

    busy, span = float(analysis.gpu["busy_us"].sum()), float(analysis.gpu["span_us"].sum())
    top = analysis.kernels.iloc[0] if len(analysis.kernels) else None
    return _finite({
        "trace": str(path),
        **iteration_time(analysis, run),
        **throughput(run),
        "gpu_busy_pct": 100 * busy / span if span > 0 else None,
        "syncs_per_iteration": syncs_per_iteration(analysis.phases),
        "top_kernel": str(top["name"]) if top is not None else None,
        "top_kernel_pct": float(top["pct"]) if top is not None else None,
        "memcpy_htod_ms": memcpy_htod_us(analysis.trace) / 1e3,
    })


def _finite(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}


def add(path: str | os.PathLike, change: str, log: str | os.PathLike = DEFAULT_LOG) -> dict[str, Any]:
    """Analyse the trace at path (a trace file, a folder of rank traces, or a run folder with its
    run.json and metrics.jsonl) and append its row to the log; returns the row as written."""
    from .analysis import analyze
    from .trace.load import load

    run = _run(path)  # a broken run.json fails before the analysis, not after it
    analysis = analyze(load(path))
    return append(_measured(analysis, path, run), change, log)


# -- writing ---------------------------------------------------------------------------------------
@contextlib.contextmanager
def locked(log: str | os.PathLike) -> Iterator[None]:
    """Hold the log's exclusive lock (a `.lock` file beside it, kept: deleting it would race)."""
    lock = lock_path(log)
    try:
        make_parent(lock)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
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
        used = [r["id"] for r in rows if isinstance(r.get("id"), int)] + _markdown_ids(text)
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
    """The markdown with line as the table's first row (the table is made when missing)."""
    lines = text.splitlines()
    for i in range(len(lines) - 1):
        if lines[i].strip() == HEADER and lines[i + 1].strip() == SEPARATOR:
            return "\n".join(lines[: i + 2] + [line] + lines[i + 2:]) + "\n"
    table = [HEADER, SEPARATOR, line]
    if not text.strip():
        return "\n".join(["# Performance log", "", INTRO, ""] + table) + "\n"
    return text.rstrip("\n") + "\n\n" + "\n".join([TITLE, "", INTRO, ""] + table) + "\n"


def _markdown_ids(text: str) -> list[int]:
    """Ids in the first column of our table's rows (they count even if the JSONL was lost)."""
    ids, inside = [], False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped == SEPARATOR:
            inside = True
        elif inside and stripped.startswith("|"):
            m = re.match(r"\|\s*(\d+)\s*\|", stripped)
            if m:
                ids.append(int(m.group(1)))
        else:
            inside = False
    return ids


# -- reading and comparing -------------------------------------------------------------------------
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


def select(rows: list[dict[str, Any]], ref: str) -> dict[str, Any]:
    """A row by 1-based row number in newest-first order (`3`) or by id (`id:7`)."""
    ref = str(ref).strip()
    m = re.fullmatch(r"(id:)?(\d+)", ref)
    if not m:
        raise PerfLogError(f"{ref!r}: name a row by its number (1 = newest) or its id (id:7)")
    n = int(m.group(2))
    if m.group(1):
        for row in rows:
            if row.get("id") == n:
                return row
        ids = ", ".join(str(r.get("id")) for r in rows[::-1])
        raise PerfLogError(f"id:{n}: no row with that id (ids: {ids})")
    if not 1 <= n <= len(rows):
        raise PerfLogError(f"{ref}: no such row (the log has {len(rows)} row(s), 1 = newest)")
    return rows[n - 1]


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
    from .analysis.compare.spread import MIN_ITERATIONS

    spreads = [(r.get(f"{field}_low"), r.get(f"{field}_high"), r.get(f"{field}_n")) for r in (a, b)]
    if any(not isinstance(n, int) or (n >= MIN_ITERATIONS and (lo is None or hi is None))
           for lo, hi, n in spreads):
        return "no spread recorded"
    if any(n < MIN_ITERATIONS for _, _, n in spreads):
        return "not judged"
    (la, ha, _), (lb, hb, _) = spreads
    return "within noise" if la <= hb and lb <= ha else verdict


def require_rows(log: str | os.PathLike) -> list[dict[str, Any]]:
    rows = read_rows(log)
    if not rows:
        raise PerfLogError(f"{quote_path(jsonl_path(log))}: no performance log rows yet (add one with "
                           "`goodhart-prof log add PATH --change TEXT`)")
    return rows


# -- showing ---------------------------------------------------------------------------------------
def _shown(value: Any, fmt: str) -> str:
    return "" if value is None else fmt.format(value)


def describe(row: dict[str, Any]) -> str:
    """One line for a row: its id and figures, formatted as in the table."""
    fmt = {f: (h, fm) for f, h, fm in COLUMNS}
    figures = ", ".join(f"{fmt[f][0]} {_shown(row.get(f), fmt[f][1])}" for f in
                        ("iteration_ms", "env_steps_per_s", "gpu_busy_pct", "syncs_per_iteration",
                         "memcpy_htod_ms") if row.get(f) is not None)
    return f"id {row.get('id')} ({row.get('date')}): {figures}"


def render_rows(rows: list[dict[str, Any]], console) -> None:
    from rich.table import Table

    table = Table(title="Performance log (newest first)", title_justify="left", title_style="bold",
                  show_edge=False, pad_edge=False)
    table.add_column("row", justify="right")
    for field, header, _ in COLUMNS:
        right = field == "id" or field.endswith(("_ms", "_s", "_pct", "_iteration"))
        table.add_column(header, justify="right" if right else "left",
                         overflow="fold" if field in ("change", "trace", "top_kernel") else "ellipsis")
    for n, row in enumerate(rows, 1):
        values = dict(row)
        kernel = values.get("top_kernel")
        if kernel and len(kernel) > KERNEL_WIDTH:
            values["top_kernel"] = kernel[: KERNEL_WIDTH - 1] + "…"
        table.add_row(str(n), *(_plain(_shown(values.get(f), fmt)) for f, _, fmt in COLUMNS))
    console.print(table)


def render_comparison(a: dict[str, Any], b: dict[str, Any], fields: list[dict[str, Any]],
                      console) -> None:
    from rich.table import Table

    for side, row in (("A", a), ("B", b)):
        console.print(f"[bold]{side}[/bold]: " + _plain(f"id {row.get('id')} {row.get('date')} "
                                                        f"{row.get('change')!s} ({row.get('trace')})"),
                      highlight=False)
    fmt = {f: fm for f, _, fm in COLUMNS}
    table = Table(show_edge=False, pad_edge=False)
    for col, right in (("field", False), ("A", True), ("B", True), ("delta (B - A)", True),
                       ("ratio (B / A)", True), ("", False)):
        table.add_column(col, justify="right" if right else "left")
    for r in fields:
        f = fmt[r["field"]]
        delta = "" if r["delta"] is None else ("+" if r["delta"] > 0 else "") + f.format(r["delta"])
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.3f}x"
        style = {"better": "green", "worse": "red"}.get(r["verdict"], "")
        verdict = f"[{style}]{r['verdict']}[/{style}]" if style else (r["verdict"] or "")
        table.add_row(r["field"], _plain(_short(_shown(r["a"], f))) + _spread_text(a, r["field"], f),
                      _plain(_short(_shown(r["b"], f))) + _spread_text(b, r["field"], f), delta, ratio,
                      verdict)
    console.print(table)


def _spread_text(row: dict[str, Any], field: str, fmt: str) -> str:
    """` (low-high, n N)` for a field with a recorded interval, else nothing."""
    low, high, n = (row.get(f"{field}_{k}") for k in ("low", "high", "n"))
    if field not in SPREAD_FIELDS or low is None or high is None:
        return ""
    return f" ({fmt.format(low)}-{fmt.format(high)}, n {n})"


def _plain(text: str) -> str:
    """A value for the terminal (a kernel name, a --change text, a path): control characters
    escaped (textsafe.printable), brackets shown rather than read as rich markup."""
    from rich.markup import escape
    return escape(printable(text))


def _short(text: str, width: int = KERNEL_WIDTH) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


__all__ = ["DEFAULT_LOG", "FIELDS", "HEADER", "add", "append", "measure", "read_rows", "select",
           "compare_rows", "require_rows", "describe", "render_rows", "render_comparison", "jsonl_path",
           "lock_path", "env_steps_per_s", "memcpy_htod_us", "PerfLogError"]
