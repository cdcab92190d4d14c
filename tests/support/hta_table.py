"""HTA's critical path of a hand-made trace, as tests/data/ours/critical/event_waits.py writes it
(`--hta`): one fact a line, tab-separated, `#` lines aside."""
from __future__ import annotations

from pathlib import Path


def read_hta(path: Path) -> dict:
    """{case: {"length_us": int, "path_events": [[name, ts]], "gpu_edges": [[type, [name, ts,
    side], [name, ts, side], weight]]}} (`gpu_edges` only where the file lists them)."""
    out: dict = {}
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            continue
        kind, case, *f = line.split("\t")
        got = out.setdefault(case, {"length_us": None, "path_events": [], "gpu_edges": []})
        if kind == "length":
            got["length_us"] = int(f[0])
        elif kind == "path":
            got["path_events"].append([f[0], int(f[1])])
        else:
            got["gpu_edges"].append([f[0], [f[1], int(f[2]), f[3]], [f[4], int(f[5]), f[6]], int(f[7])])
    return out
