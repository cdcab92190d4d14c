"""Sites of a trace without Python stacks, borrowed from its attribution trace: the iteration after a
lite window, recorded with stacks (capture/hooks.py; trace/attribution.py loads it as
`trace.attribution`).

Without stacks an event's site is its op chain (`ppo_update > aten::item`). The attribution
iteration runs the same code, so the same chains occur in it, each at a user-code site. Each event
of the trace takes the site of the event with its name and chain in the attribution iteration, on
its rank:

- one site for that chain there: that site;
- several (one chain called from several lines): the k-th event of the chain in its iteration
  takes the k-th one's site when both iterations hold the chain equally often (a loop body runs
  the same code in the same order), else the chain stays, followed by the lines it comes from
  (`ppo_update > aten::item (one of: a.py:3 f; a.py:9 f)`): no line is printed that is not
  established;
- a chain the attribution iteration does not hold keeps the chain.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Callable

import numpy as np
import pandas as pd

from ...trace.model import Trace, in_categories
from ..iterations import iterations

_POINT_CATS = ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "python_function")


def borrowed_sites(trace: Trace, points: pd.DataFrame, chains: list[str], sites: Callable) -> list[str]:
    """The sites of `points` (as sites.sites takes them), whose op chains are `chains`; `sites` is
    sites.sites, which calls this (passed in: the two modules import one way)."""
    companion = trace.attribution
    theirs = _same_named_events(companion, points)
    if theirs.empty:
        return list(chains)
    their_chains = sites(companion, theirs, stacks=False)
    their_sites = sites(companion, theirs)
    found: dict[tuple[int, str], list[str]] = defaultdict(list)  # (rank, chain) -> sites in order
    for rank, chain, site in zip(theirs["rank"].tolist(), their_chains, their_sites):
        found[(int(rank), chain)].append(site)
    its = iterations(trace, points["rank"].to_numpy(), points["ts"].to_numpy())
    order = np.lexsort((points["ts"].to_numpy(), its, points["rank"].to_numpy()))
    seen: dict[tuple[int, int, str], int] = defaultdict(int)
    totals: dict[tuple[int, int, str], int] = defaultdict(int)
    ranks = points["rank"].to_numpy()
    for p in range(len(points)):
        totals[(int(ranks[p]), int(its[p]), chains[p])] += 1
    out = list(chains)
    for p in order.tolist():
        if chains[p].endswith(" (no host call)"):
            continue
        key = (int(ranks[p]), chains[p])
        k = seen[(key[0], int(its[p]), chains[p])]
        seen[(key[0], int(its[p]), chains[p])] = k + 1
        options = found.get(key)
        if not options:
            continue
        distinct = list(dict.fromkeys(options))
        if len(distinct) == 1:
            out[p] = distinct[0]
        elif totals[(key[0], int(its[p]), chains[p])] == len(options):
            out[p] = options[k]
        else:
            out[p] = f"{chains[p]} (one of: {'; '.join(sorted(distinct))})"
    return out


def _same_named_events(companion: Trace, points: pd.DataFrame) -> pd.DataFrame:
    """The attribution trace's host events named as the points are, inside its traced iterations,
    as points (hosted; runtime and driver calls marked `call`, as the trace's own are)."""
    ev = companion.events
    names = set(points["name"].astype(str))
    named = ev["name"].isin(names).to_numpy() & in_categories(ev["cat"], _POINT_CATS)
    rows = np.flatnonzero(named)
    if not len(rows):
        return pd.DataFrame(columns=["rank", "pid", "tid", "ts", "end", "row", "name", "hosted", "call"])
    sub = ev.iloc[rows]
    inside = iterations(companion, sub["rank"].to_numpy(), sub["ts"].to_numpy()) >= 0
    sub = sub[inside]
    cat = sub["cat"].astype(str)
    return pd.DataFrame({"rank": sub["rank"].to_numpy(), "pid": sub["pid"].to_numpy(),
                         "tid": sub["tid"].to_numpy(), "ts": sub["ts"].to_numpy(),
                         "end": sub["end"].to_numpy(), "row": sub.index.to_numpy(np.int64),
                         "name": sub["name"].astype(str).to_numpy(), "hosted": True,
                         "call": cat.isin(("cuda_runtime", "cuda_driver")).to_numpy()}
                        ).sort_values(["rank", "ts"], kind="stable").reset_index(drop=True)


def sites_from(trace: Trace) -> dict | None:
    """Where the trace's sites come from when they are borrowed: the attribution trace's files and
    its iterations (`ProfilerStep#N`), and the iterations the timings are from; None when the
    trace has stacks of its own or no attribution trace."""
    companion = trace.attribution
    if companion is None or len(trace.frames):
        return None
    from ..iterations import step_table

    def steps(t: Trace) -> list[int]:
        table = step_table(t)
        return sorted({int(s) for s in table["step"].tolist()}) if not table.empty else []

    return {"iterations": steps(companion), "timed_iterations": steps(trace),
            "paths": [str(p) for p in companion.paths]}
