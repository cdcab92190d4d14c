"""Analyses of the fixture traces, made once per test session: the report tests of several
modules read the same trace's analysis (treat it as read-only; `dataclasses.replace` for a
variant)."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from goodhart_prof.analysis import analyze
from goodhart_prof.trace.load import load
from tests.support.paths import DATA


@lru_cache(maxsize=None)
def analysis_of(relative: str):
    """The analysis of tests/data/<relative> (a file or a folder of rank traces)."""
    return analyze(load(DATA / Path(relative)))
