"""What the rules produce: a `Finding` (one rule's advice, with its evidence and estimated
saving) and a `NotJudged` (a rule the runner skipped, and why), and the severities a finding has."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SEVERITIES = ("high", "medium", "low")


@dataclass
class Finding:
    """One rule's advice. `est_saving_us`: time per iteration (per rank) fixing it would save, as
    its rule declares (`Rule.saving`), None where the trace cannot say; `saving_note`: what it
    counts or why none. The runner (rules/savings.py) sets `est_saving_share` (of the mean
    iteration, or of the trace span: `saving_basis`) and, from it, the severity."""

    rule: str
    severity: str
    title: str
    evidence: dict[str, Any]
    fix: str
    est_saving_us: float | None = None
    saving_note: str = ""
    est_saving_share: float | None = None
    saving_basis: str = "iteration"


@dataclass(frozen=True)
class NotJudged:
    """A rule the runner skipped, and why (what the trace lacks)."""

    rule: str
    reason: str
