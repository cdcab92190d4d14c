"""Property-based: damaged real traces either load (and the analysis and reports run) or fail with
the documented one-line TraceError (tests/support/trace_mutations.py). Bounded: 120 examples (51 s on the shared 2-core machine, 2026-11-26); the long
run is scripts/fuzz_loader.py."""
from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.trace_mutations import check, damaged_file

_counter = itertools.count()
PROPERTY = settings(max_examples=80, deadline=None, database=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def folder():
    with tempfile.TemporaryDirectory() as name:
        yield Path(name)


def _write(folder: Path, data: bytes, gz: bool) -> Path:
    # A new name each time: the loader maps files, so none is rewritten under its reader.
    path = folder / f"mutant-{next(_counter)}.json{'.gz' if gz else ''}"
    path.write_bytes(data)
    return path


@PROPERTY
@given(mutant=damaged_file(), gz_suffix=st.booleans())
def test_damaged_traces_load_or_fail_cleanly(folder, mutant, gz_suffix):
    data, done = mutant
    check(_write(folder, data, gz_suffix))


@settings(PROPERTY, max_examples=40)
@given(mutants=st.lists(damaged_file(), min_size=2, max_size=3))
def test_damaged_folders_load_or_fail_cleanly(folder, mutants):
    sub = folder / f"ranks-{next(_counter)}"
    sub.mkdir()
    for i, (data, _) in enumerate(mutants):
        (sub / f"rank-{i}.json").write_bytes(data)
    check(sub)
