#!/usr/bin/env python
"""A/B timing of load and analysis: this working tree against a git revision, on one trace.

    python scripts/ab_analyze.py --base 736cb67 ../shared/traces/hta/v100_ddp_rank1.json.gz
    python scripts/ab_analyze.py --base 736cb67 --this ac173ae TRACE    # two revisions

Each round runs one fresh process per side (alternating this tree and the base, so a busy spell
hits both), and each process loads and analyses the trace `--runs` times, keeping its best load
and best analysis time. Prints every round, then the best of all rounds per side and their ratio.
The last line is one JSON object. Timings on a shared machine move by 10% or more between
rounds: compare the sides within one run of this script, never across runs.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

from gitrev import ROOT, worktree_at

CHILD = """
import gc, json, sys, time
from goodhart_prof.analysis import analyze
from goodhart_prof.trace.load import load
best_load = best_analysis = float("inf")
for _ in range(int(sys.argv[2])):
    gc.collect()
    t0 = time.perf_counter(); trace = load(sys.argv[1], progress=False); t1 = time.perf_counter()
    analyze(trace); t2 = time.perf_counter()
    best_load, best_analysis = min(best_load, t1 - t0), min(best_analysis, t2 - t1)
print(json.dumps([best_load, best_analysis]))
"""


def build_native(tree: Path) -> None:
    """The native decoder built inside a worktree (git checks out no build output: without it the
    revision would load by the msgspec path alone, and its load time would not compare)."""
    subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=tree,
                   capture_output=True, check=True)


def measure(code: Path, trace: Path, runs: int) -> tuple[float, float]:
    env = dict(os.environ, PYTHONPATH=str(code))
    done = subprocess.run([sys.executable, "-c", CHILD, str(trace), str(runs)], env=env, cwd=code,
                          capture_output=True, text=True, check=True)
    load_s, analysis_s = json.loads(done.stdout.strip().splitlines()[-1])
    return load_s, analysis_s


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace", type=Path)
    p.add_argument("--base", required=True, help="git revision to compare this working tree with")
    p.add_argument("--this", default=None, help="a git revision instead of this working tree")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--runs", type=int, default=3, help="load + analyze runs per process")
    args = p.parse_args(argv)
    trace = args.trace.resolve()
    best = {"base": [float("inf")] * 2, "this": [float("inf")] * 2}
    with contextlib.ExitStack() as stack:
        base = stack.enter_context(worktree_at(args.base))
        this = stack.enter_context(worktree_at(args.this)) if args.this else ROOT
        for tree in {base, this} - {ROOT}:
            build_native(tree)
        for r in range(args.rounds):
            for side, code in (("base", base), ("this", this)):
                load_s, analysis_s = measure(code, trace, args.runs)
                best[side] = [min(best[side][0], load_s), min(best[side][1], analysis_s)]
                print(f"round {r + 1} {side:4}  load {load_s:.3f} s  analysis {analysis_s:.3f} s")
    for side in ("base", "this"):
        print(f"best {side:4}  load {best[side][0]:.3f} s  analysis {best[side][1]:.3f} s  "
              f"total {sum(best[side]):.3f} s")
    ratio = sum(best["this"]) / sum(best["base"])
    print(f"this / base (load + analysis): {ratio:.3f}")
    print(json.dumps({"trace": str(args.trace), "base": args.base, "this": args.this or "working tree",
                      "base_load_s": round(best["base"][0], 4), "base_analysis_s": round(best["base"][1], 4),
                      "this_load_s": round(best["this"][0], 4), "this_analysis_s": round(best["this"][1], 4),
                      "ratio": round(ratio, 4)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
