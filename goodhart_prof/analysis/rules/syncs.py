"""Sync rules: per-iteration host read-backs, by what caused them.

All four have one shape: count the user's sync points of a kind (rules/origin.py), divide by the
traced iterations, fire at a rate. Sync points on a background thread (a thread that launches no
GPU work, analysis/host/syncs.py) are never counted: they hold up no launch (origin.foreground). What they save is the host's time in those calls (`SYNC_SAVING`).

When the top site is inside torch's own Python code (analysis/host/sites.py: `torch: torch/... (called
at LINE)`), the read is torch's, made on behalf of the user's call: the finding names the torch
function and the user's line, and gives the fix that applies there (torch.distributions: its
argument validation, `validate_args=False`; torch.nn.utils.clip_grad_norm_'s non-finite check:
`error_if_nonfinite=False`), not the rule's advice for the user's own code.
"""
from __future__ import annotations

from typing import Any, Callable

import pandas as pd

from ..host.sites import torch_package
from .base import Context, Need, Rule, Threshold, is_logging_site, on_host_only, top_sites
from .finding import Finding
from .origin import READBACK_KINDS, foreground, user_points
from .savings import Saving

SYNC_SAVING = Saving(
    "the host's time in these calls per iteration (their wait included)",
    "the host sits in each read-back until the device has caught up; without it the host queues "
    "the next work while the device runs, so that time leaves the iteration (on a CPU-only trace "
    "the calls wait for nothing and only their own cost goes)")


def _rate_finding(ctx: Context, rule: Rule, kinds: tuple[str, ...],
                  points: Callable[[Context], pd.DataFrame], title: str,
                  fix: str | Callable[[pd.DataFrame], str],
                  extra: Callable[[pd.DataFrame], dict[str, Any]] = lambda p: {}) -> Finding | None:
    """The shared shape. `title` formats `per_it` and `site` (the top site); `fix` may depend on
    the points found. Its saving: the host's time in them (SYNC_SAVING); severity follows from it.
    On a CPU-only trace the reads wait for nothing yet, and the title says they would on a GPU.
    Before splitting sync points by origin (which builds the host op structure), check that
    even all points of these kinds would reach the rate."""
    rate = rule.limit("per_iteration")
    sp = foreground(ctx.points)
    count = int(sp["kind"].isin(kinds).sum()) if not sp.empty else 0
    if count / ctx.iterations < rate:
        return None
    found = points(ctx)
    per_it = len(found) / ctx.iterations
    if per_it < rate:
        return None
    sites = top_sites(found)
    text = title.format(per_it=per_it, site=sites[0]["site"] if sites else "?")
    advice = fix(found) if callable(fix) else fix
    owner = _owner(sites[0]["site"]) if sites else None
    if owner is not None:
        text, advice = _torch_own(owner, sites[0]["site"], per_it)
    if on_host_only(ctx, found):
        text += " (a CPU-only trace: each would wait for the GPU there)"
    wait = float(found["dur"].sum())
    return Finding(
        rule.id, "medium", text,
        {"count": int(len(found)), "per_iteration": round(per_it, 2),
         "wait_us": round(wait, 3), **extra(found), "sites": sites,
         **({"torch_own": owner} if owner is not None else {})},
        advice,
        **rule.estimated(ctx.per_iteration(wait, found["rank"].unique())))


def _owner(site: str) -> str | None:
    """The torch package (or function, where one file is one function the user calls) whose own
    Python code made a read: `torch.distributions`, `torch.nn.utils.clip_grad_norm_`; None for a
    site in the user's code."""
    package = torch_package(site)
    if package is not None and "torch/nn/utils/clip_grad.py:" in site:
        return "torch.nn.utils.clip_grad_norm_"
    return package


def _torch_own(package: str, site: str, per_it: float) -> tuple[str, str]:
    """Title and fix of reads made inside torch's own code (`package`: e.g. torch.distributions)."""
    inner = site.removeprefix("torch: ")
    fn, _, rest = inner.partition(" > ")
    # the user's call as the site words it: `called at file.py:N fn`, or where no line is
    # known `called in function f (...)`
    said = rest.partition(" (called ")[2]
    call = f"called {said[:-1]}" if said.endswith(")") else "called at ?"
    if package == "torch.nn.utils.clip_grad_norm_":
        return (f"torch.nn.utils.clip_grad_norm_ checks the gradient norm for NaN/inf with a Python "
                f"branch that reads it back to the host {per_it:.1f} times per iteration "
                f"(error_if_nonfinite=True; {call})",
                "This read is clip_grad_norm_'s own non-finite check, made because of "
                "error_if_nonfinite=True: drop it (the default, False, clips without reading "
                "anything back); to catch divergence, keep the returned norm and test "
                "torch.isfinite(norm) once per logging interval, with the other metrics.")
    if package == "torch.distributions":
        return (f"torch.distributions validates its arguments with data-dependent checks that read "
                f"tensors back to the host {per_it:.1f} times per iteration (most in {fn}, {call})",
                "These reads are torch.distributions' argument validation, not a branch in your "
                "code: build the distribution with validate_args=False (e.g. "
                "Categorical(logits=logits, validate_args=False)), or call "
                "torch.distributions.Distribution.set_default_validate_args(False) once at startup "
                "(python -O also turns it off). Rewriting a branch in your own code would not "
                "remove them.")
    return (f"{package} reads tensors back to the host {per_it:.1f} times per iteration on behalf "
            f"of your call (most in {fn}, {call})",
            f"This is torch's own read, made inside {fn} on behalf of your call ({call}): look for "
            "an option of that call that avoids it, or call it less often; changing the branches "
            "in your own code will not remove it.")


def _item_logging(ctx: Context) -> Finding | None:
    return _rate_finding(
        ctx, ITEM_LOGGING, ("item",), lambda c: user_points(c.sync_origin, "item"),
        ".item() reads a tensor back to the host {per_it:.1f} times per iteration (most at {site})",
        _item_fix)


def _item_fix(found: pd.DataFrame) -> str:
    """Logging advice only where the reads are logging code; a value the host needs (a size, a
    branch, split sizes of an all-to-all) cannot simply stay on the device."""
    top = found["site"].value_counts()
    if len(top) and is_logging_site(top.index[0]):
        return ("Keep metrics on the device (stack them into one tensor), copy to the host once "
                "per iteration with non_blocking=True, and convert in a logging thread.")
    return ("Each read makes the host wait for the GPU. If the host needs the value (a size, a "
            "branch, split sizes), compute it earlier or make it static so the wait overlaps work "
            "(pipelining, fixed shapes); if it is only recorded, keep it on the device and read it "
            "once per iteration.")


ITEM_LOGGING = Rule(
    "item_logging", "syncs", _item_logging, needs=(Need.HOST_OPS, Need.ITERATIONS),
    thresholds={
        "per_iteration": Threshold(2.0, "once per iteration is metrics moved once; 2+ per traced "
                                        "iteration is a per-step read-back, the pattern that cost "
                                        "the grid-world trainer half its speed")},
    saving=SYNC_SAVING)


def _sync_grad_clip(ctx: Context) -> Finding | None:
    def clip(c: Context) -> pd.DataFrame:
        so = c.sync_origin
        return so[so["grad_clip"].to_numpy()]
    return _rate_finding(
        ctx, SYNC_GRAD_CLIP, READBACK_KINDS, clip,
        "gradient clipping reads the norm back to the host {per_it:.1f} times per iteration (most at {site})",
        "Clip without reading the norm: torch.nn.utils.clip_grad_norm_(params, max_norm, "
        "foreach=True) scales by a clamped device-side coefficient; log the returned norm with "
        "the other metrics, once per iteration.",
        lambda p: {"by_kind": {str(k): int(v) for k, v in p["kind"].value_counts().items()}})


SYNC_GRAD_CLIP = Rule(
    "sync_grad_clip", "syncs", _sync_grad_clip, needs=(Need.HOST_OPS, Need.ITERATIONS, Need.BACKWARD),
    thresholds={
        "per_iteration": Threshold(1.0, "clipping that reads the norm back syncs once per optimizer "
                                        "step, so one per iteration already fires: torch's "
                                        "clip_grad_norm_ reads nothing back, ever")},
    saving=SYNC_SAVING)


def _nan_checks(ctx: Context) -> Finding | None:
    def nonzero(c: Context) -> pd.DataFrame:
        so = c.sync_origin
        return so[(so["kind"] == "nonzero").to_numpy() & ~so["internal"].to_numpy()]
    names = ctx.trace.events["name"].cat.categories
    return _rate_finding(
        ctx, NAN_CHECKS, ("nonzero",), nonzero,
        "nonzero (boolean masks, torch.where(cond), isnan().any() checks) syncs {per_it:.1f} "
        "times per iteration (most at {site})",
        "Put NaN/shape validation behind a debug flag; use torch.where(cond, a, b) or "
        "masked arithmetic instead of boolean indexing in the hot path.",
        lambda p: {"isnan_in_trace": bool("aten::isnan" in names)})


NAN_CHECKS = Rule(
    "nan_checks", "syncs", _nan_checks, needs=(Need.HOST_OPS, Need.ITERATIONS),
    thresholds={
        "per_iteration": Threshold(1.0, "any nonzero in a traced iteration is a full host sync with "
                                        "a data-dependent shape; NaN/mask validation in the forward "
                                        "pass is the usual source (boolean-mask indexing calls "
                                        "nonzero inside aten::index: the user's indexing, so it "
                                        "counts)")},
    saving=SYNC_SAVING)


def _branchy_value_head(ctx: Context) -> Finding | None:
    return _rate_finding(
        ctx, BRANCHY_VALUE_HEAD, ("is_nonzero",), lambda c: user_points(c.sync_origin, "is_nonzero"),
        "Python branches on tensor values (`if tensor:`) sync {per_it:.1f} times per iteration (most at {site})",
        "Replace the branch with torch.where (compute both outcomes, keep one), or decide it once "
        "outside the per-step path, so the hot path is straight-line code.")


BRANCHY_VALUE_HEAD = Rule(
    "branchy_value_head", "syncs", _branchy_value_head,
    needs=(Need.HOST_OPS, Need.ITERATIONS, Need.BACKWARD),
    thresholds={
        "per_iteration": Threshold(1.0, "one `if tensor:` per training iteration already breaks "
                                        "compiled graphs of the update and syncs; no rate makes it "
                                        "cheap (judged on training traces: the pattern is a "
                                        "branch in the update)")},
    saving=SYNC_SAVING)

RULES = (ITEM_LOGGING, SYNC_GRAD_CLIP, NAN_CHECKS, BRANCHY_VALUE_HEAD)
