"""The PARAM DLRM 8-rank fixture (tests/data/param/dlrm_8rank) counted from its raw rank files, as
the tests check the communication figures against it."""
from __future__ import annotations

import gzip
import json

from tests.support.paths import DATA

DLRM = "param/dlrm_8rank"


def raw_rank(rank: int) -> tuple[dict, float]:
    """Per NCCL kernel kind (count, summed us), and the ProfilerStep's duration, of one rank file."""
    with gzip.open(DATA / DLRM / f"worker{rank}_step_12.pt.trace.json.gz", "rt") as fh:
        events = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]
    kinds: dict = {}
    for e in events:
        if e.get("cat") == "kernel" and e["name"].startswith("ncclKernel_"):
            kind = "all_to_all" if "SendRecv" in e["name"] else "all_reduce"
            n, us = kinds.get(kind, (0, 0.0))
            kinds[kind] = (n + 1, us + e["dur"])
    (step,) = [e["dur"] for e in events if e["name"].startswith("ProfilerStep#")]
    return kinds, step
