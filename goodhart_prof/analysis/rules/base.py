"""What a rule is: an id, a family, what it needs from the trace, its thresholds with their
reasons, and a judge that turns the analyses into at most one `Finding` with its evidence.

The runner (rules/__init__.py) judges a rule only when the trace has everything it `needs`, and
otherwise records why it stayed silent (`NotJudged`). Evidence a rule derives from the analyses
(iterations traced, who caused each sync point) is computed once per run, in the `Context`.
"""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, Mapping

import numpy as np
import pandas as pd

from ..host.syncs import device_ranks
from ..intervals import dense_codes
from ..recorder import record_full_advice
from ..setup import drop_setup
from ..tree import host_tree
from .finding import Finding, NotJudged
from .origin import sync_origin
from .savings import Basis, Saving, basis
from .threshold import Threshold

if TYPE_CHECKING:
    from ..result import Analysis

# Autograd's backward ops (also what eager_update counts as the backward pass).
BACKWARD = re.compile(r"autograd::engine|Backward", re.I)


class Need(enum.Enum):
    """What a rule needs from the trace; each with the test and the sentence for its absence."""

    HOST_OPS = "host ops"
    GPU = "GPU activity"
    BACKWARD = "a backward pass"
    ITERATIONS = "iterations"
    COMMUNICATION = "communication"
    RANKS = "ranks side by side"
    MEMORY = "memory events"

    def present(self, ctx: "Context") -> bool:
        a = ctx.analysis
        if self is Need.COMMUNICATION:
            return a.communication is not None and not a.communication.overlap.empty
        if self is Need.RANKS:
            return a.ranks is not None and a.ranks.judged
        if self is Need.GPU:
            return not ctx.trace.gpu.empty
        if self is Need.MEMORY:
            return len(ctx.trace.memory) > 0
        if self is Need.ITERATIONS:
            ph = ctx.analysis.phases
            return ph is not None and not ph.empty and bool((ph["kind"] == "iteration").any())
        host = ctx.host_name_codes
        if self is Need.HOST_OPS:
            return len(host) > 0
        # Training: autograd's backward ops on the host (GPU kernel names do not count: a
        # forward kernel can be named `...Backward...` by a library, and an inference trace has
        # no autograd engine).
        texts = host_tree(ctx.trace).texts  # the host names (each one's text, made once per tree)
        return any(BACKWARD.search(texts[c]) for c in host.tolist())

    def why(self, ctx: "Context") -> str:
        """Why the trace lacks it: `absent`, or for RANKS what the rank tables said."""
        ranks = ctx.analysis.ranks
        if self is Need.RANKS and ranks is not None and ranks.reason:
            return ranks.reason
        return self.absent.format(advice=record_full_advice(ctx.trace))

    @property
    def absent(self) -> str:
        return {Need.HOST_OPS: "the trace has no host ops or annotations (a GPU-only trace)",
                Need.GPU: "the trace has no GPU activity (a CPU-only trace)",
                Need.BACKWARD: "the trace has no backward pass (no autograd ops on the host: not "
                               "training), and the rule's advice is about training",
                Need.ITERATIONS: "no iterations: no ProfilerStep#N, and no Optimizer.step#, "
                                 "DataLoader.__next__, ## name ## or backward pass repeats, so rates "
                                 "per iteration cannot be judged",
                Need.COMMUNICATION: "the trace has no communication kernels (NCCL/RCCL)",
                Need.RANKS: "no collective could be matched across two or more ranks",
                Need.MEMORY: "the trace has no memory events (record with {advice})",
                }[self]


@dataclass(frozen=True)
class Rule:
    id: str
    family: str
    # A judge that can look but cannot decide (too few iterations, no totals recorded) returns
    # a NotJudged saying why; None means it judged and found nothing.
    judge: Callable[["Context"], "Finding | NotJudged | None"] = field(repr=False)
    needs: tuple[Need, ...] = ()
    thresholds: Mapping[str, Threshold] = field(default_factory=dict)
    # What fixing it saves per iteration, and why (rules/savings.py); counts None: no estimate.
    saving: Saving = Saving(None, "not estimated")

    def limit(self, name: str) -> float:
        return self.thresholds[name].value

    def unestimated(self) -> dict[str, Any]:
        """Finding keywords of a rule that makes no estimate: None, with its declared reason."""
        return {"est_saving_us": None, "saving_note": self.saving.reason}

    def estimated(self, us: float | None, why_none: str = "") -> dict[str, Any]:
        """Finding keywords for an estimate: the figure with what it counts, or None with why."""
        if us is None:
            return {"est_saving_us": None, "saving_note": why_none or self.saving.reason}
        return {"est_saving_us": float(us), "saving_note": str(self.saving.counts)}


class Context:
    """One run of the rules over one analysis: the analysis, and evidence several rules share,
    each derived once (on first use) for this run only."""

    def __init__(self, analysis: "Analysis"):
        self.analysis = analysis
        self.trace = analysis.trace
        self.found: list[Finding] = []  # the findings of the rules judged so far (the runner's)

    @cached_property
    def iterations(self) -> int:
        """Iterations (analysis/iterations.py: marked or inferred), at least 1 so rates stay finite."""
        ph = self.analysis.phases
        if ph is None or ph.empty or "kind" not in ph:
            return 1
        steps = ph[ph["kind"] == "iteration"]
        return max(1, int(steps["iteration"].nunique())) if not steps.empty else 1

    @cached_property
    def basis(self) -> Basis:
        """The mean iteration (or trace span) savings are shares of, and per-iteration division."""
        return basis(self.trace)

    def per_iteration(self, total_us: float, ranks=None) -> float:
        """A time summed over the trace (over `ranks`, default all) per rank and iteration."""
        return self.basis.per_iteration(total_us, ranks)

    @cached_property
    def sync_origin(self) -> pd.DataFrame:
        """The sync points with who caused them (rules/origin.py)."""
        return sync_origin(self.trace, self.points, self.device_ranks)

    @cached_property
    def host_name_codes(self) -> np.ndarray:
        """Codes of the names of cpu ops and user annotations: the host call tree's nodes."""
        return dense_codes(host_tree(self.trace).name)[0]  # np.unique's, by counting

    @cached_property
    def device_ranks(self) -> set:
        """Ranks with GPU activity or CUDA/HIP runtime calls."""
        return device_ranks(self.trace)

    @cached_property
    def points(self) -> pd.DataFrame:
        """Sync points and host reads (CPU-only ranks) together, by rank and time, without those
        in setup (analysis/setup.py: they run once, not per iteration): the sync rules judge the
        code's read-backs wherever it runs, and word them by where they ran."""
        a = self.analysis
        reads = a.host_reads
        if reads is None or reads.empty:
            return drop_setup(self.trace, a.sync_points)
        both = pd.concat([a.sync_points, reads], ignore_index=True)
        return drop_setup(self.trace, both.sort_values(["rank", "ts"], kind="stable").reset_index(drop=True))

    @cached_property
    def kernel_total(self) -> float:
        cats = self.analysis.categories
        return float(cats["total_us"].sum()) if not cats.empty else 0.0

    def of_kind(self, kind: str) -> pd.DataFrame:
        sp = self.points
        return sp[sp["kind"] == kind] if not sp.empty else sp


def on_host_only(ctx: "Context", points: pd.DataFrame) -> bool:
    """Whether every one of these points is a host read on a CPU-only rank."""
    return len(points) > 0 and not points["rank"].isin(ctx.device_ranks).any()


# Logging code by name: `logging`, `logger`, `log_metrics`, `_log`, metrics, prints, experiment
# trackers; not `logits` or `logsumexp`.
_LOGGING = re.compile(r"logg|(?<![a-z])log(?![a-z])|log_|metric|print|wandb|tensorboard|summar|"
                      r"monitor", re.I)


def is_logging_site(site: str) -> bool:
    """Whether a site (a user frame or a chain of annotations) is logging code."""
    return bool(_LOGGING.search(str(site)))


def top_sites(points: pd.DataFrame, n: int = 3) -> list[dict[str, Any]]:
    """The n sites with the most points (then the most host time), for a finding's evidence."""
    if points.empty:
        return []
    grouped = points.groupby("site", observed=True).agg(count=("kind", "size"), total_us=("dur", "sum"))
    grouped = grouped.sort_values(["count", "total_us"], ascending=False).head(n)
    return [{"site": s, "count": int(r["count"]), "total_us": round(float(r["total_us"]), 3)}
            for s, r in grouped.iterrows()]

