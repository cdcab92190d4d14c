"""Findings on real traces recorded by others, against the labels in tests/data/findings_labels.json
(written by reading each trace): every labelled rule fires where it must and stays silent where
it must not. The traces are the copies in tests/data."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from bench_findings import labelled_traces, resolve, score  # noqa: E402

TRACES = labelled_traces()


@pytest.mark.parametrize("rel", sorted(TRACES))
def test_labelled_findings_are_right(rel):
    if resolve(rel) is None:
        pytest.fail(f"{rel}: not in tests/data")
    result = score({rel: TRACES[rel]})
    wrong = [f"{r['rule']}: {r['verdict']} ({r['label']}: {r['reason']}; got {r['title']!r})"
             for r in result["rows"] if r["verdict"] in ("FP", "FN")]
    assert wrong == []


def test_labels_are_well_formed():
    assert len(TRACES) >= 10
    for rel, labels in TRACES.items():
        for rule, (label, reason) in labels.items():
            assert label in ("expected", "must_not") and len(reason.split()) >= 1, (rel, rule)
