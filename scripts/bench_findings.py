#!/usr/bin/env python
"""Findings on real traces: how often the analyzer's rules are right, against hand-made labels.

Runs `analyze` on every labelled trace (tests/data/findings_labels.json, paths relative to
tests/data, which holds copies of ../shared/traces and our own loops' traces; ../shared/traces is the
fallback, for traces too large to copy), prints each trace's findings and rules not judged, and
scores every label:

- expected and fired: true positive;  expected, silent: false negative (missed)
- must_not and fired: false positive; must_not, silent: true negative
- the rule said it could not judge the trace (`not_judged`, with its reason): NJ, whatever the
  label. A rule that never ran is not a correct silence, nor a miss: NJ pairs are counted apart
  (split by label: an `expected` NJ is a trace the rule should have been able to judge).

precision = TP / (TP + FP), recall = TP / (TP + FN), over the judged pairs only. Labels the
analyzer is known to get wrong (the file's `known_faults`, each with why and whose fix it needs)
count as they come out and are marked `known`.

Held out: the traces listed under the labels file's `held_out` were labelled (and the labels
committed) before the analyzer was run on them, and no rule was changed because of them; they are
scored on their own as well, since the other labels are the ones the rules were fixed against
(a fit, not a generalisation). The last line printed is one JSON object (`--json-out FILE` writes
it too).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from goodhart_prof.analysis import analyze  # noqa: E402
from goodhart_prof.trace.load import load  # noqa: E402

LABELS = ROOT / "tests" / "data" / "findings_labels.json"
SHARED = ROOT.parent / "shared" / "traces"
LOCAL = ROOT / "tests" / "data"


def labelled_traces() -> dict[str, dict[str, list[str]]]:
    return json.loads(LABELS.read_text())["traces"]


def known_faults() -> dict[str, dict[str, str]]:
    """trace -> rule -> why the analyzer gets that label wrong today, and whose fix it needs."""
    return json.loads(LABELS.read_text()).get("known_faults", {})


def held_out() -> dict[str, str]:
    """trace -> how it was kept apart (the commit of its labels, before any analyzer run on it)."""
    return json.loads(LABELS.read_text()).get("held_out", {})


def resolve(rel: str) -> Path | None:
    for base in (LOCAL, SHARED):  # the repository's copies first
        if (base / rel).exists():
            return base / rel
    return None


def score(traces: dict[str, dict[str, list[str]]]) -> dict:
    """Per (trace, rule) verdicts and the totals; traces not found are listed as missing."""
    rows, missing = [], []
    known = known_faults()
    for rel, labels in traces.items():
        path = resolve(rel)
        if path is None:
            missing.append(rel)
            continue
        a = analyze(load(path, progress=False))
        fired = {f.rule: f for f in a.findings}
        silent = {n.rule: n.reason for n in a.not_judged}
        for rule, (label, reason) in labels.items():
            hit = rule in fired
            verdict = "NJ" if rule in silent and not hit else \
                {("expected", True): "TP", ("expected", False): "FN",
                 ("must_not", True): "FP", ("must_not", False): "TN"}[(label, hit)]
            rows.append({"trace": rel, "rule": rule, "label": label, "verdict": verdict,
                         "reason": reason, "title": fired[rule].title if hit else None,
                         "not_judged": silent.get(rule), "known": known.get(rel, {}).get(rule)})
        unlabelled = sorted(set(fired) - set(labels))
        rows.extend({"trace": rel, "rule": r, "label": None, "verdict": "unlabelled",
                     "reason": None, "title": fired[r].title, "not_judged": None, "known": None}
                    for r in unlabelled)
    out = {"rows": rows, "missing": missing, "traces": len(traces) - len(missing),
           "labels": sum(r["label"] is not None for r in rows), **_totals(rows)}
    kept_apart = set(held_out())
    out["held_out"] = {"traces": sorted(kept_apart & set(traces) - set(missing)),
                       **_totals([r for r in rows if r["trace"] in kept_apart])}
    return out


def _totals(rows: list[dict]) -> dict:
    """Counts per verdict, the not-judged pairs by label, and precision and recall over the
    judged pairs (None where nothing was there to count)."""
    counts = {v: sum(r["verdict"] == v for r in rows) for v in ("TP", "FP", "FN", "TN", "NJ", "unlabelled")}
    tp, fp, fn = counts["TP"], counts["FP"], counts["FN"]
    return {"counts": counts,
            "judged": tp + fp + fn + counts["TN"],
            "not_judged": {label: sum(r["verdict"] == "NJ" and r["label"] == label for r in rows)
                           for label in ("expected", "must_not")},
            "precision": tp / (tp + fp) if tp + fp else None,
            "recall": tp / (tp + fn) if tp + fn else None}


def _line(name: str, totals: dict) -> str:
    nj = totals["not_judged"]
    return (f"{name}: precision {totals['precision']}  recall {totals['recall']}  over "
            f"{totals['judged']} judged pairs ({ {k: totals['counts'][k] for k in ('TP', 'FP', 'FN', 'TN')} }); "
            f"not judged apart: {nj['expected']} expected, {nj['must_not']} must_not")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json-out", type=Path, default=None)
    args = p.parse_args(argv)
    result = score(labelled_traces())
    for row in result["rows"]:
        note = row["title"] or (f"not judged: {row['not_judged']}" if row["not_judged"] else "silent")
        verdict = row["verdict"] + (" known" if row["known"] and row["verdict"] in ("FP", "FN") else "")
        print(f"{verdict:10} {row['trace']:52} {row['rule']:24} {note}"[:200])
    for rel in result["missing"]:
        print(f"missing    {rel}")
    print(_line(f"all {result['traces']} traces, {result['labels']} labelled pairs", result))
    kept = result["held_out"]
    print(_line(f"held out ({len(kept['traces'])} traces labelled before the analyzer ran on them)", kept)
          if kept["traces"] else "held out: no trace kept apart yet (findings_labels.json `held_out`)")
    summary = {k: result[k] for k in ("traces", "labels", "counts", "judged", "not_judged", "precision",
                                      "recall", "missing")}
    summary["held_out"] = kept
    if args.json_out:
        args.json_out.write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
