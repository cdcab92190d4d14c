"""What fixing a finding would save: the per-iteration basis, the severity it sets, the order.

Every rule declares its estimate next to itself (`Rule.saving`, a `Saving`: what it counts and
why that is what the fix gives back); its judge computes the figure from the evidence and hands
it to the `Finding` as `est_saving_us`, or None with the reason where the trace cannot say.
Here the runner turns it into a share of the iteration, a severity and an order:

- **basis** (`Basis`): the mean iteration time, over every (rank, iteration) of the trace
  (analysis/iterations.py: `ProfilerStep#N`, or inferred); without iterations, the mean over ranks
  of the rank's span after its setup (analysis/setup.py: from its first kernel launch, else its
  first event, to its last end).
  Estimates are per rank and iteration: a figure summed over the trace is divided by the
  (rank, iteration) pairs it came from (`Basis.per_iteration`), by the ranks without iterations.
- **est_saving_share** = est_saving_us / the basis.
- **severity** from the share (`SEVERITY_SHARES`); a finding with no estimate keeps the severity
  its rule judged from its own evidence (memory, coverage: costs that are not time).
- **order**: largest est_saving_us first, findings without an estimate after them (most severe
  first), rule order among equals.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

import pandas as pd

from ...trace.model import Trace
from ..intervals import first_positions, tuple_codes
from ..setup import setup_bounds
from ..iterations import step_table
from .finding import SEVERITIES, Finding
from .threshold import Threshold
from ...units import ms_text


@dataclass(frozen=True)
class Saving:
    """A rule's estimate: what it counts (per iteration), and why that is the time the fix saves.
    `counts` None: the rule makes no estimate, and `reason` says why."""

    counts: str | None
    reason: str


# Severity from the estimated saving's share of the iteration.
SEVERITY_SHARES = {
    "high": Threshold(0.10, "a tenth of every iteration: a change worth making before any other"),
    "medium": Threshold(0.02, "2% of an iteration is above run-to-run noise and adds up over a run"),
}


def severity_of(share: float) -> str:
    """high at 10% of the iteration, medium at 2%, low below."""
    for severity in ("high", "medium"):
        if share >= SEVERITY_SHARES[severity].value:
            return severity
    return "low"


@dataclass(frozen=True)
class Basis:
    """What a saving is compared with: `kind` `iteration` (mean ProfilerStep#N wall time, over
    ranks and iterations) or `trace` (mean per-rank span, no iterations marked)."""

    kind: str
    mean_us: float
    units: dict[int, int]  # rank -> (rank, iteration) pairs (1 per rank without iterations)

    def per_iteration(self, total_us: float, ranks: Sequence[int] | None = None) -> float:
        """A time summed over the trace (over `ranks`, all by default) per rank and iteration."""
        n = sum(self.units.get(int(r), 1) for r in ranks) if ranks is not None else sum(self.units.values())
        return float(total_us) / max(n, 1)


def basis(trace: Trace) -> Basis:
    steps = step_table(trace)
    if not steps.empty:  # one duration per (rank, iteration): its rows' longest (NaN skipped)
        rank = steps["rank"].to_numpy(np.int64)
        group = tuple_codes(rank, steps["step"].to_numpy(np.int64))
        per = np.full(int(group.max()) + 1, np.nan)
        np.fmax.at(per, group, steps["dur"].to_numpy(float))
        first = first_positions(group)
        per = per[np.argsort(first, kind="stable")]  # in order of appearance, as pandas sums them
        known = ~np.isnan(per)  # the mean as pandas takes it: NaN as 0 in the sum, not counted
        mean = np.where(known, per, 0.0).sum() / known.sum() if known.any() else np.nan
        ranks, units = np.unique(rank[first], return_counts=True)
        return Basis("iteration", float(mean), {int(r): int(n) for r, n in zip(ranks.tolist(), units.tolist())})
    ev = trace.events
    if ev.empty:
        return Basis("trace", float("nan"), {})
    span = ev.groupby("rank", sort=False).agg(first=("ts", "min"), last=("end", "max"))
    # setup (before the first kernel launch: analysis/setup.py) runs once: not in the basis
    b = setup_bounds(trace)
    after = pd.Series(b["end"].to_numpy(float), index=b["rank"].to_numpy()).reindex(span.index)
    first = np.fmax(span["first"].to_numpy(float), after.to_numpy(float))
    return Basis("trace", float((span["last"].to_numpy(float) - first).mean()),
                 {int(r): 1 for r in span.index})


def finish(findings: list["Finding"], b: Basis, order: Sequence[str]) -> list["Finding"]:
    """Each finding's share and severity from its estimate, then the findings in saving order."""
    for f in findings:
        f.saving_basis = b.kind
        if f.est_saving_us is None or not np.isfinite(f.est_saving_us):
            f.est_saving_us, f.est_saving_share = None, None
            continue
        f.est_saving_us = round(float(f.est_saving_us), 3)
        share = f.est_saving_us / b.mean_us if b.mean_us > 0 else float("nan")
        f.est_saving_share = float(f"{share:.4g}") if np.isfinite(share) else None  # 4 digits
        if f.est_saving_share is not None:
            f.severity = severity_of(f.est_saving_share)
    rank = {rule: i for i, rule in enumerate(order)}
    return sorted(findings, key=lambda f: (
        f.est_saving_us is None, -(f.est_saving_us or 0.0),
        SEVERITIES.index(f.severity), rank.get(f.rule, len(rank))))



def overlap(findings: Sequence["Finding"]) -> dict | None:
    """Where the findings' savings add up to more than the basis (the iteration, or the trace span):
    each was measured alone, and they overlap (the same idle or waiting time counts in several
    findings: a straggler's wait, the idle GPU, the launch-bound gaps), so they do not add. Then
    the combined bound: fixing them all saves no more than the basis itself, and about the largest
    alone at least. None where the savings fit inside the basis."""
    est = [f for f in findings if f.est_saving_us is not None and f.est_saving_share]
    total_share = sum(float(f.est_saving_share) for f in est)
    if total_share <= 1.0:
        return None
    total_us = sum(float(f.est_saving_us) for f in est)
    basis_us = max(float(f.est_saving_us) / float(f.est_saving_share) for f in est)
    largest = max(est, key=lambda f: float(f.est_saving_us))
    what = "an iteration" if largest.saving_basis == "iteration" else "the trace span"
    return {
        "sum_us": round(total_us, 3), "sum_share": round(total_share, 4),
        "basis": largest.saving_basis, "basis_us": round(basis_us, 3),
        "bound_us": round(min(total_us, basis_us), 3), "bound_share": 1.0,
        "largest_rule": largest.rule, "largest_us": round(float(largest.est_saving_us), 3),
        "largest_share": float(largest.est_saving_share),
        "note": (f"the estimated savings add up to {total_share:.0%} of {what}: each is measured "
                 "alone and they overlap (the same idle or waiting time counts in several), so "
                 f"they do not add: fixing all of them saves no more than {what} "
                 f"({ms_text(basis_us, '.3g')}); the largest alone ({largest.rule}) saves "
                 f"{float(largest.est_saving_share):.1%}")}
