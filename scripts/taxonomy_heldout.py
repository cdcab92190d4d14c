#!/usr/bin/env python
"""The kernel taxonomy scored where its patterns were not written: an `analyze --json` document
made by older code (e.g. on a lent GPU, before anyone looked at the trace) against today's
categories of the same trace, kernel by kernel.

Today's taxonomy is the label: run this on a trace whose kernels were reviewed and fixed after
that document was made, so the document's categories are what the patterns said on a trace they
had never seen. Prints each kernel whose category changed, then the agreement by distinct kernel
name and by kernel time. Usage: python scripts/taxonomy_heldout.py ANALYSIS_JSON TRACE
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from goodhart_prof.analysis.gpu.kernels import kernel_table  # noqa: E402
from goodhart_prof.trace.load import load  # noqa: E402


def main(argv: "list[str] | None" = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("analysis_json", type=Path)
    p.add_argument("trace", type=Path)
    args = p.parse_args(argv)
    old = json.loads(args.analysis_json.read_text())
    then: dict[str, set] = {}
    for k in old["kernels"]:
        then.setdefault(k["name"], set()).add(k["category"])
    now = kernel_table(load(args.trace, progress=False))
    now_of = now.groupby("name", observed=True)["category"].first().astype(str).to_dict()
    time_of = now.groupby("name", observed=True)["total_us"].sum().to_dict()
    names = sorted(set(now_of) & set(then))
    agree = [n for n in names if then[n] == {now_of[n]}]
    for n in names:
        if n not in agree:
            print(f"{'/'.join(sorted(then[n])):>14} -> {now_of[n]:14} {time_of[n] / 1e3:10.3f} ms  {n[:90]}")
    total = sum(time_of[n] for n in names)
    right = sum(time_of[n] for n in agree)
    print(f"{len(agree)} of {len(names)} kernel names ({len(agree) / len(names):.1%}) and "
          f"{right / total:.1%} of their kernel time were in today's category "
          f"({len(set(then) ^ set(now_of))} names in one table only)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
