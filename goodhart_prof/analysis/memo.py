"""Tables derived from a trace, built once per trace: a memo the analyses share (the host tree,
the launch links, the iterations, ...), held here and not on the `Trace`, which keeps only what
loading produced.

The memo of a trace lives as long as the trace: it is keyed by the trace object (by identity: a
`dataclasses.replace` copy is another trace, with a memo of its own) and dropped when the trace
is collected. So a derived value must not hold its trace (a HostTree keeps the columns it needs,
not the trace), or the trace, and its memo, would live on.
"""
from __future__ import annotations

import weakref
from typing import Any, Callable, TypeVar

from ..trace.model import Trace

T = TypeVar("T")

_MEMOS: dict[int, dict[str, Any]] = {}


def memo_of(trace: Trace) -> dict[str, Any]:
    """The trace's memo: key -> derived value (empty until an analysis builds one)."""
    key = id(trace)
    memo = _MEMOS.get(key)
    if memo is None:
        memo = _MEMOS[key] = {}
        weakref.finalize(trace, _MEMOS.pop, key, None)
    return memo


def derived(trace: Trace, key: str, build: Callable[[Trace], T]) -> T:
    """`build(trace)` on first use for this trace and key, then the value it built (a None is
    built again)."""
    memo = memo_of(trace)
    value = memo.get(key)
    if value is None:
        value = memo[key] = build(trace)
    return value


def memo_count() -> int:
    """How many traces have a memo now (a trace that went has none)."""
    return len(_MEMOS)
