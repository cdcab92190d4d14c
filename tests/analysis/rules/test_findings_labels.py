"""Findings on real traces, against the labels in tests/data/findings_labels.json (written by
reading each trace): every labelled rule fires where it must and stays silent where it must not.
The traces are the copies in tests/data (real traces recorded by others, and our loops written
the way users write them, tests/data/ours/user_loops); a trace too large to copy is read from
../shared/traces and skipped where that folder is absent. A label listed in `known_faults` is
expected to stay wrong (strict xfail) until its fix lands, and then must leave that list."""
from __future__ import annotations

import sys

import pytest

from tests.support.paths import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
from bench_findings import (LOCAL, SHARED, _totals, held_out, known_faults, labelled_traces,  # noqa: E402
                            resolve, score)

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
    # a rule that must fire may not excuse itself as not judged (NJ is counted apart by the
    # benchmark, so here it is a miss); a must_not rule that could not judge is not a fault
    wrong = [f"{r['rule']}: {r['verdict']} ({r['label']}: {r['reason']}; got {r['title'] or r['not_judged']!r})"
             for r in result["rows"] if r["verdict"] in ("FP", "FN") or (r["verdict"], r["label"]) == ("NJ", "expected")]
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


def test_not_judged_pairs_are_counted_apart():
    """A rule that never ran is neither a correct silence nor a hit: precision and recall come
    from the judged pairs only (hand-made rows: 2 TP, 1 FP, 1 FN, 3 TN, and 4 NJ of which 1 expected)."""
    rows = ([{"verdict": "TP", "label": "expected"}] * 2 + [{"verdict": "FP", "label": "must_not"}]
            + [{"verdict": "FN", "label": "expected"}] + [{"verdict": "TN", "label": "must_not"}] * 3
            + [{"verdict": "NJ", "label": "expected"}] + [{"verdict": "NJ", "label": "must_not"}] * 3)
    t = _totals(rows)
    assert t["judged"] == 7 and t["counts"]["NJ"] == 4
    assert t["not_judged"] == {"expected": 1, "must_not": 3}
    assert t["precision"] == 2 / 3 and t["recall"] == 2 / 3


def test_held_out_traces_are_labelled_ones():
    """Every held-out trace is a labelled trace, and says how it was kept apart."""
    for rel, how in held_out().items():
        assert rel in TRACES and len(how.split()) >= 3, rel
