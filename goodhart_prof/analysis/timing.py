"""What each stage of an analysis cost: wall seconds per stage, in the order they ran.

`analyze` runs every analysis through one `Stages`; the JSON report's `timing` section shows them
beside the load's time (`Trace.load_cost`) and the report's own, so a slowdown shows where it is
(`scripts/bench_analyze.py --stages`). A stage that reuses a table another built earlier (the host
tree, the launch join: analysis/memo.py) is cheaper than alone: the first to ask pays.
"""
from __future__ import annotations

import time
from typing import Any, Callable, TypeVar

T = TypeVar("T")


class Stages:
    """Seconds per named stage; a name run twice adds up."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def run(self, name: str, fn: Callable[..., T], *args: Any) -> T:
        start = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start

    @property
    def total(self) -> float:
        return sum(self.seconds.values())
