"""Coverage rules: what the trace cannot show, and how to record it so it can.

`no_python_stacks`: the trace has no Python frames (no `python_function` events of the user's
code: `Trace.frames` is empty, as in a `lite` run or a profile without with_stack=True), yet the
report names places in the code: sync-point or host-read sites, idle causes, or the sites in
other findings. Each is then only a chain of annotations and ops (`rollout > env_step >
aten::item`); with stacks the same site is a source line (`train.py:88 log_metrics`). It saves
no time by itself, so it has no estimate and sorts after the findings that do. Silent when the
trace's sites are borrowed from its attribution trace (analysis/host/borrowed_sites.py), as a lite
run's are.
"""
from __future__ import annotations

from ..recorder import ADVICE, recorded_by
from .base import Context, Need, Rule, Threshold
from .finding import Finding
from .savings import Saving

_UNNAMED = ("(other)", "(host idle / not traced)")


def _no_python_stacks(ctx: Context) -> Finding | None:
    if len(ctx.trace.frames) > 0 or ctx.trace.attribution is not None:
        return None  # stacks of its own, or its sites borrowed from its attribution trace
    points = ctx.points
    sites = (points["site"].astype(str).value_counts() if not points.empty
             else points.get("site", []))
    causes = sorted({c["cause"] for b in ctx.analysis.burstiness for c in b.idle_causes
                     if c["cause"] not in _UNNAMED})
    rules = [f.rule for f in ctx.found if f.evidence.get("sites") or f.evidence.get("idle_causes")]
    named = len(sites) + len(causes)
    if named < NO_PYTHON_STACKS.limit("named_places"):
        return None
    how = recorded_by(ctx.trace)
    return Finding(
        "no_python_stacks", "low",
        f"no Python stacks in the trace: {named} sites and idle causes are named by annotation "
        "and op chains, not source lines",
        {"sync_sites": int(len(sites)), "idle_causes": int(len(causes)),
         **({"findings_with_sites": rules} if rules else {}),  # an empty list says nothing
         "examples": [str(s) for s in list(sites.index[:3])] + causes[:max(0, 3 - len(sites))],
         "recorded_by": _RECORDED_BY[how]},
        _fix(how, ADVICE[how]), **NO_PYTHON_STACKS.unestimated())


_RECORDED_BY = {"run": "goodhart-prof run (lite mode)", "hooks": "goodhart-prof hooks (lite mode)",
                "other": "a profiler without with_stack"}


def _fix(how: str, advice: str) -> str:
    if how != "other":
        return (f"Record again with {advice}: Python stacks (with shapes and memory) make every "
                "site the function that made it, and its file:line where the source can be read "
                "beside the trace or in the current directory.")
    return (f"Profile with {advice}, so each site names the user's function, and its file:line "
            "where the source can be read beside the trace or in the current directory; stacks "
            "cost a few microseconds per op, so trace a few iterations.")


NO_PYTHON_STACKS = Rule(
    "no_python_stacks", "coverage", _no_python_stacks, needs=(Need.HOST_OPS,),
    thresholds={
        "named_places": Threshold(1, "one site or idle cause the report names by an op chain is "
                                     "already a place the reader must find in the code by hand")},
    saving=Saving(None, "it saves no time itself: recorded with stacks, the other findings name "
                        "the source lines to change"))

RULES = (NO_PYTHON_STACKS,)
