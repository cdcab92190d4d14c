"""Reading a performance log back in tests: the markdown table's cells (escapes honoured, the
table checked well-formed), the JSONL twin's rows, a row's figures by hand, and the CLI's
one-line errors."""
from __future__ import annotations

import json
from pathlib import Path

from goodhart_prof.perflog.log_file import COLUMNS, HEADER, SEPARATOR, jsonl_path

N_CELLS = len(COLUMNS)


def cells(line: str) -> list[str]:
    """The cells of a markdown table row, honouring backslash escapes (`\\|` is not a border)."""
    out, cur, i = [], "", 0
    body = line.strip()
    assert body.startswith("|") and body.endswith("|") and not body.endswith("\\|"), line
    body = body[1:-1]
    while i < len(body):
        if body[i] == "\\" and i + 1 < len(body):
            cur += body[i: i + 2]
            i += 2
            continue
        if body[i] == "|":
            out.append(cur.strip())
            cur = ""
        else:
            cur += body[i]
        i += 1
    return out + [cur.strip()]


def table(log: Path) -> list[list[str]]:
    """The log's table rows as cells, after checking the table is well-formed."""
    lines = log.read_text().splitlines()
    assert lines.count(HEADER) == 1
    start = lines.index(HEADER)
    assert lines[start + 1] == SEPARATOR
    rows = []
    for line in lines[start + 2:]:
        if not line.strip():
            break
        rows.append(cells(line))
        assert len(rows[-1]) == N_CELLS, line
    assert all(not line.strip() for line in lines[start + 2 + len(rows):])  # nothing after the table
    return rows


def jsonl(log: Path) -> list[dict]:
    return [json.loads(line) for line in jsonl_path(log).read_text().splitlines()]


def one_line_error(code: int, err: str, *words: str) -> None:
    assert code == 2 and err.startswith("Error: ") and err.strip().count("\n") == 0, err
    for word in words:
        assert word in err


def measured(**figures) -> dict:
    """A row's figures (no id, date or change), as `measure` returns them, with `figures` set."""
    base = {"trace": "t.json", "iteration_ms": 10.0, "env_steps_per_s": 1000.0, "gpu_busy_pct": 50.0,
            "syncs_per_iteration": 4.0, "top_kernel": "k1", "top_kernel_pct": 30.0, "memcpy_htod_ms": 2.0}
    return {**base, **figures}
