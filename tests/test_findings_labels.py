"""Findings on real traces, against the labels in tests/data/findings_labels.json (written by
reading each trace): every labelled rule fires where it must and stays silent where it must not.
The traces are the copies in tests/data (real traces recorded by others, and our loops written
the way users write them, tests/data/ours/user_loops); a trace too large to copy is read from
../shared/traces and skipped where that folder is absent. A label listed in `known_faults` is
expected to stay wrong (strict xfail) until its fix lands, and then must leave that list."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from bench_findings import LOCAL, SHARED, known_faults, labelled_traces, resolve, score  # noqa: E402

TRACES = labelled_traces()
KNOWN = known_faults()


def _cases():
    for rel in sorted(TRACES):
        known = KNOWN.get(rel, {})
        yield pytest.param(rel, marks=[pytest.mark.xfail(strict=True, reason="; ".join(known.values()))]
                           if known else [], id=rel)


@pytest.mark.parametrize("rel", list(_cases()))
def test_labelled_findings_are_right(rel):
    if resolve(rel) is None:
        if not (LOCAL / rel).exists() and not SHARED.exists():
            pytest.skip(f"{rel}: too large for tests/data and ../shared/traces is absent")
        pytest.fail(f"{rel}: not in tests/data or ../shared/traces")
    result = score({rel: TRACES[rel]})
    wrong = [f"{r['rule']}: {r['verdict']} ({r['label']}: {r['reason']}; got {r['title']!r})"
             for r in result["rows"] if r["verdict"] in ("FP", "FN")]
    assert wrong == []


def test_labels_are_well_formed():
    assert len(TRACES) >= 25
    for rel, labels in TRACES.items():
        for rule, (label, reason) in labels.items():
            assert label in ("expected", "must_not") and len(reason.split()) >= 1, (rel, rule)
    for rel, faults in KNOWN.items():  # a known fault names a labelled pair, and says why
        for rule, why in faults.items():
            assert rule in TRACES[rel] and why.startswith(("FP:", "FN:")), (rel, rule)


def test_known_faults_are_the_only_faults():
    """Each known fault is wrong the way it says (FP or FN), and only those pairs are wrong
    (over the traces present here)."""
    present = {rel: TRACES[rel] for rel in KNOWN if resolve(rel) is not None}
    result = score(present)
    wrong = {(r["trace"], r["rule"]): r["verdict"] for r in result["rows"] if r["verdict"] in ("FP", "FN")}
    assert wrong == {(rel, rule): why[:2] for rel in present for rule, why in KNOWN[rel].items()}
