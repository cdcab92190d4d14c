#!/usr/bin/env python
"""The longest event of every trace in tests/data and ../shared/traces against the span of its
file's starts (first `ts` to last; events and Python frames together): the figure behind the
loader's duration bound (`trace/times.py`, docs/reliability.md). Prints one line per distinct
file (by content) and the largest ratio."""
from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from goodhart_prof.trace.load import load  # noqa: E402

SKIP = ("findings_labels.json", "analysis.json", "run.json")


def main() -> int:
    seen: dict[str, Path] = {}
    for base in (ROOT / "tests" / "data", ROOT.parent / "shared" / "traces"):
        for path in sorted(base.rglob("*.json*")):
            if path.name.endswith((".json", ".json.gz")) and path.name not in SKIP:
                seen.setdefault(hashlib.sha1(path.read_bytes()).hexdigest(), path)
    worst = 0.0
    for path in seen.values():
        trace = load(path, progress=False)
        ts = np.concatenate([trace.events["ts"].to_numpy(), trace.frames["ts"]])
        dur = np.concatenate([trace.events["dur"].to_numpy(), trace.frames["dur"]])
        span = ts.max() - ts.min()
        ratio = dur.max() / span if span > 0 else float("nan")
        worst = max(worst, ratio if ratio == ratio else 0.0)
        print(f"{ratio:6.3f}x  starts {ts.min():.3g}..{ts.max():.3g} us  {path.relative_to(ROOT.parent)}")
    print(f"{len(seen)} distinct trace files; longest event at most {worst:.2f}x the span of its file's starts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
