#!/usr/bin/env python
"""Is `analyze --json` the same before and after a change? Runs it with two checkouts on each
input and compares the JSON without what the run cost (`trace.load`'s seconds and peak RSS).

    python scripts/json_same.py --base /path/to/old/checkout INPUT... [--base-cache DIR]

Each input runs as `python -m goodhart_prof.cli analyze INPUT --json`, once with the base
checkout first on PYTHONPATH and once with this one; `--base-cache` keeps the base's outputs
(keyed by the input's path) so that a second comparison runs only the new side. Prints one line
per input (same / DIFFERENT: the first differing path) and, last, one JSON object.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
TIMING_KEYS = {"seconds", "peak_rss_bytes"}  # trace.load: what loading cost


def run_json(checkout: Path, path: str) -> object:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    proc = subprocess.run([sys.executable, "-m", "goodhart_prof.cli", "analyze", path, "--json"],
                          capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        return {"exit": proc.returncode, "stderr": proc.stderr.strip().splitlines()[-1:]}
    return strip(json.loads(proc.stdout))


def strip(obj):
    if isinstance(obj, dict):
        return {k: strip(v) for k, v in obj.items() if k not in TIMING_KEYS}
    if isinstance(obj, list):
        return [strip(v) for v in obj]
    return obj


def first_difference(a, b, where: str = "") -> str | None:
    if type(a) is not type(b):
        return f"{where or '.'}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                return f"{where}.{k}: only in {'new' if k in b else 'base'}"
            d = first_difference(a[k], b[k], f"{where}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{where}: {len(a)} vs {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, f"{where}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{where}: {a!r} vs {b!r}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inputs", nargs="+")
    parser.add_argument("--base", type=Path, required=True, help="the checkout to compare against")
    parser.add_argument("--base-cache", type=Path, help="keep the base's outputs here")
    args = parser.parse_args()
    same, different = 0, []
    for path in args.inputs:
        cached = None
        if args.base_cache:
            args.base_cache.mkdir(parents=True, exist_ok=True)
            key = hashlib.sha1(str(Path(path).resolve()).encode()).hexdigest()[:16]
            cached = args.base_cache / f"{key}.json"
        if cached is not None and cached.exists():
            base = strip(json.loads(cached.read_text()))
        else:
            base = run_json(args.base, path)
            if cached is not None:
                cached.write_text(json.dumps(base))
        new = run_json(HERE, path)
        diff = first_difference(base, new)
        print(f"{'same' if diff is None else 'DIFFERENT'}  {path}" + (f"  {diff[:300]}" if diff else ""),
              flush=True)
        if diff is None:
            same += 1
        else:
            different.append(path)
    print(json.dumps({"inputs": len(args.inputs), "same": same, "different": different}))


if __name__ == "__main__":
    main()
