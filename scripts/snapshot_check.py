#!/usr/bin/env python
"""Behaviour check for refactors: `analyze --json` (and the text report) identical before and after.

Analyses every trace input it finds (each file in ../shared/traces and tests/data, each folder of
per-rank traces as one input, plus any paths given) with the code of this working tree, and with
the code of a git revision (`--base REV`, checked out in a temporary worktree and run there in a
process of its own), then compares the two outputs input by input: the `goodhart-prof/analysis/v1`
JSON document (paths made relative) and the text report at 140 columns.

    python scripts/snapshot_check.py --base HEAD                 # this tree vs the last commit
    python scripts/snapshot_check.py --base main --extra /tmp/zoo_runs
    python scripts/snapshot_check.py --write /tmp/snap.json      # just record this tree's outputs

Exit 0 when every input gives identical output, 1 otherwise (the first differing keys are printed).
Our own trainer's traces exercise the zoo rules: record some once (`goodhart-prof run --inject ...
--output-dir /tmp/zoo_runs/NAME`, or `scripts/bench_zoo.py --keep /tmp/zoo_runs`) and pass the
folder with --extra; every run folder below it (one holding run.json) is an input, read as
`analyze` reads a run folder (its rank traces: a one-rank run writes no merged_trace.json).
"""
from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from gitrev import worktree_at

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "traces"
TRACE_SUFFIXES = (".json", ".json.gz")


def trace_inputs(extra: list[Path]) -> list[Path]:
    """Trace files and per-rank folders under shared/traces and tests/data, plus `extra`."""
    found: list[Path] = []
    for base in (SHARED, ROOT / "tests" / "data"):
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*")):
            if path.is_file() and path.name.endswith(TRACE_SUFFIXES) and "labels" not in path.name:
                found.append(path)
            elif path.is_dir() and sum(p.name.endswith(TRACE_SUFFIXES) for p in path.iterdir()) > 1:
                found.append(path)  # a folder of per-rank traces, analysed as one job
    for path in extra:
        if path.is_dir():
            found.extend(sorted(run_json.parent for run_json in path.rglob("run.json")))
        else:
            found.append(path)
    return found


def snapshot(path: Path) -> dict:
    """JSON document and text report of one input, or the error it raised."""
    from rich.console import Console

    from goodhart_prof.analysis import analyze
    from goodhart_prof.report.json_report import to_document
    from goodhart_prof.report.text.report import render
    from goodhart_prof.trace.load import load
    try:
        result = analyze(load(path, progress=False))
    except Exception as exc:  # a refactor must not change which inputs fail, nor how
        return {"error": f"{type(exc).__name__}: {exc}"}
    doc = to_document(result)
    doc["trace"]["paths"] = [os.path.relpath(p, path if path.is_dir() else path.parent)
                             for p in doc["trace"]["paths"]]
    doc["trace"].pop("load", None)  # the load's wall time and peak RSS change from run to run
    doc.pop("timing", None)  # so do the stages' times
    out = io.StringIO()
    render(result, Console(file=out, width=140, color_system=None), 20)
    return {"json": json.loads(json.dumps(doc)), "text": out.getvalue()}


def record(inputs: list[Path]) -> dict[str, dict]:
    return {str(p): snapshot(p) for p in inputs}


def record_at(rev: str, inputs: list[Path]) -> dict[str, dict]:
    """The outputs of the code at `rev`: a temporary worktree, this script run there."""
    with worktree_at(rev) as tree, tempfile.TemporaryDirectory(prefix="snapshot-") as tmp:
        out = Path(tmp) / "base.json"
        env = dict(os.environ, PYTHONPATH=str(tree))
        args = [sys.executable, str(Path(__file__).resolve()), "--write", str(out),
                "--code", str(tree), "--inputs", *map(str, inputs)]
        subprocess.run(args, check=True, env=env, cwd=tree)
        return json.loads(out.read_text())


def first_differences(a, b, where: str = "", limit: int = 5) -> list[str]:
    """Paths (key/index chains) where two JSON values differ, at most `limit`."""
    if type(a) is not type(b):
        return [f"{where or '/'}: {a!r:.80} != {b!r:.80}"]
    if isinstance(a, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{where}/{k}: only in {'base' if k in a else 'this tree'}")
            else:
                out.extend(first_differences(a[k], b[k], f"{where}/{k}", limit))
            if len(out) >= limit:
                break
        return out[:limit]
    if isinstance(a, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} items != {len(b)}"]
        out = []
        for i, (x, y) in enumerate(zip(a, b)):
            out.extend(first_differences(x, y, f"{where}[{i}]", limit))
            if len(out) >= limit:
                break
        return out[:limit]
    return [] if a == b else [f"{where or '/'}: {a!r:.80} != {b!r:.80}"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", default=None, help="git revision to compare this working tree with")
    p.add_argument("--extra", type=Path, action="append", default=[],
                   help="more inputs: a trace file, or a folder searched for run folders (run.json)")
    p.add_argument("--write", type=Path, default=None, help="write this tree's outputs here (JSON)")
    p.add_argument("--inputs", nargs="*", default=None, help=argparse.SUPPRESS)
    p.add_argument("--code", default=None, help=argparse.SUPPRESS)  # the tree a --base child runs
    args = p.parse_args(argv)
    if args.code:
        sys.path.insert(0, args.code)
    inputs = [Path(x) for x in args.inputs] if args.inputs is not None else trace_inputs(args.extra)
    mine = record(inputs)
    if args.write:
        args.write.write_text(json.dumps(mine))
    if args.base is None:
        print(f"recorded {len(mine)} inputs")
        return 0
    base = record_at(args.base, inputs)
    bad = 0
    for key in mine:
        diffs = first_differences(base.get(key), mine[key])
        name = os.path.relpath(key, ROOT.parent)
        if diffs:
            bad += 1
            print(f"DIFFERS  {name}")
            for d in diffs:
                print(f"    {d}")
        else:
            state = "error, same" if "error" in mine[key] else "identical"
            print(f"{state:12}{name}")
    print(f"{len(mine) - bad} of {len(mine)} inputs identical to {args.base}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
