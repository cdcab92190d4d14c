"""Findings: rules that turn the analyses into advice, each fired only on evidence in the trace.

Rules are declared units (rules/base.py `Rule`): id, family, what they need, thresholds with
reasons, a judge. They live by family: syncs, copies, precision, compilation (fusion and torch.compile), utilization,
dominance, hostthreads (slow tiny ops on CPU threads), ranks (stragglers and exposed
communication), memory, coverage (what the trace
cannot name). `run` judges each rule whose needs the trace meets, records why the others stayed
silent, and orders the findings by what fixing them would save (rules/savings.py).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from . import (compilation, copies, coverage, dominance, dynamo, hostthreads, memory, precision, ranks,
               syncs, utilization)
from .base import Context, Need, Rule, Threshold
from .finding import Finding, NotJudged
from .savings import SEVERITY_SHARES, Saving, finish

if TYPE_CHECKING:
    from ..result import Analysis

# The order findings of equal saving (and of no saving, within a severity) are listed in.
RULES: tuple[Rule, ...] = (*syncs.RULES, *copies.RULES, compilation.UNFUSED_ADAM, *precision.RULES,
                           *utilization.RULES, compilation.EAGER_UPDATE, *dynamo.RULES,
                           *dominance.RULES, *hostthreads.RULES, *ranks.RULES, *memory.RULES, *coverage.RULES)
# The anti-pattern zoo (trainer/antipatterns.py): each planted pattern's name is the id of the
# rule that must detect it; scripts/bench_zoo.py checks recall and precision of exactly these.
ZOO_RULES = ("item_logging", "cpu_alloc", "nan_checks", "sync_grad_clip", "branchy_value_head",
             "pageable_htod", "unfused_adam", "no_amp", "eager_update", "memory_growth", "graph_break",
             "tiny_batch")
BY_ID = {rule.id: rule for rule in RULES}


def _why(need: Need, ctx: Context) -> str:
    """Need.why, except that a trace whose GPU activity was not recorded is not called CPU-only."""
    from ..gpu.device_time import unrecorded_gpu
    if need is Need.GPU and unrecorded_gpu(ctx.trace):
        return ("the trace has no GPU activity recorded (launch calls or listed GPUs but no kernel "
                "events: the profiler's CUDA activity was off), not a CPU-only run")
    return need.why(ctx)


def run(analysis: "Analysis") -> tuple[list[Finding], list[NotJudged]]:
    """The findings (largest estimated saving first, those without one after them: most severe
    first, then rule order) and the rules not judged, with why. The coverage rule runs last and
    reads what the others found (`Context.found`)."""
    ctx = Context(analysis)
    found: list[Finding] = []
    silent: list[NotJudged] = []
    present: dict[Need, bool] = {}
    for rule in RULES:
        for n in rule.needs:  # each need tested once (a trace's backward pass: a search of its names)
            if n not in present:
                present[n] = n.present(ctx)
        missing = [n for n in rule.needs if not present[n]]
        if missing:
            silent.append(NotJudged(rule.id, _why(missing[0], ctx)))
            continue
        ctx.found = found
        finding = rule.judge(ctx)
        if isinstance(finding, NotJudged):
            silent.append(finding)
        elif finding is not None:
            found.append(finding)
    return finish(found, ctx.basis, [r.id for r in RULES]), silent


__all__ = ["RULES", "ZOO_RULES", "BY_ID", "Finding", "NotJudged", "Rule", "Threshold", "Need", "Saving",
           "SEVERITY_SHARES", "run"]
