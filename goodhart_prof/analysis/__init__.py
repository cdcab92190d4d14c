"""Analyses: pure functions from a loaded `Trace` to result tables, and one facade over them
(facade.py `analyze`, returning result.py's `Analysis`)."""
from __future__ import annotations

from .facade import analyze
from .result import Analysis

__all__ = ["Analysis", "analyze"]
