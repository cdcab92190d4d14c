"""`Threshold`: a figure a rule or the runner judges by, with the reason it is set there.

One type for every cut-off of the advice: a rule's thresholds (`Rule.thresholds`, shown with the
finding's evidence so a reader sees what was judged against what) and the severity shares of the
runner (`savings.SEVERITY_SHARES`: high at a tenth of the iteration, medium at 2%).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Threshold:
    """`value`: the cut-off (in the unit of the figure it is compared with); `reason`: why there."""

    value: float
    reason: str
