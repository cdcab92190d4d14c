"""The hottest host ops: self and inclusive time per cpu op name, recomputed from the raw JSON."""
from __future__ import annotations

import gzip
import json
import math
from collections import defaultdict
from pathlib import Path

import pytest

from goodhart_prof.analysis import analyze
from goodhart_prof.analysis.host.hottest_ops import COLUMNS, hot_ops
from goodhart_prof.report.json_report import host_ops_json, to_document
from goodhart_prof.trace.load import load
from tests.support.helpers import clean_env, run_cmd
from tests.support.paths import DATA

H100 = DATA / "tracelens" / "h100_owlv2_inference.json.gz"
CPU_2RANK = DATA / "ours" / "cpu_2rank_merged.json.gz"


def naive_self_and_total(path: Path) -> tuple[dict[str, dict[str, float]], float]:
    """Per op name: calls, self (duration less the direct child ops) and total (calls not inside
    a call of the same name), and the host time (the top-level ops' durations), by walking each
    thread's cpu ops with a stack, straight from the JSON."""
    with gzip.open(path, "rt") as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"
                  and not str(e["name"]).startswith("ProfilerStep#")]
    threads = defaultdict(list)
    for e in events:
        threads[(e["pid"], e["tid"])].append((float(e["ts"]), float(e["dur"]), str(e["name"])))
    ops: dict[str, dict[str, float]] = defaultdict(lambda: {"calls": 0, "self": [], "total": []})
    host = []
    for evs in threads.values():
        evs.sort(key=lambda x: (x[0], -x[1]))
        stack: list[list] = []  # [end, name, dur, children's time]
        def close(item):
            name = item[1]
            ops[name]["self"].append(item[2] - item[3])
            if all(s[1] != name for s in stack):
                ops[name]["total"].append(item[2])
        for ts, dur, name in evs:
            while stack and stack[-1][0] < ts + dur:  # not inside the top of the stack
                close(stack.pop())
            if stack:
                stack[-1][3] += dur
            else:
                host.append(dur)
            ops[name]["calls"] += 1
            stack.append([ts + dur, name, dur, 0.0])
        while stack:
            close(stack.pop())
    return ({n: {"calls": v["calls"], "self": math.fsum(v["self"]), "total": math.fsum(v["total"])}
             for n, v in ops.items()}, math.fsum(host))


@pytest.mark.parametrize("path", [H100, CPU_2RANK], ids=["h100_owlv2", "ours_cpu_2rank"])
def test_self_and_total_match_a_naive_walk(path):
    table = hot_ops(load(path))
    assert list(table.columns) == COLUMNS
    naive, host = naive_self_and_total(path)
    assert set(table["name"]) == set(naive)
    # the self times add up to the host time; no op has more self time than total time
    assert table["self_us"].sum() == pytest.approx(host, rel=1e-9)
    assert (table["self_us"] <= table["total_us"] + 1e-6).all() and (table["self_us"] >= 0).all()
    assert table["self_pct"].sum() == pytest.approx(100.0)
    assert list(table["self_us"]) == sorted(table["self_us"], reverse=True)
    rows = table.set_index("name")
    for name in list(table["name"].head(5)) + ["aten::linear", "aten::addmm", "aten::copy_"]:
        if name not in naive:
            continue
        assert rows.loc[name, "calls"] == naive[name]["calls"], name
        assert rows.loc[name, "self_us"] == pytest.approx(naive[name]["self"], rel=1e-9, abs=1e-6), name
        assert rows.loc[name, "total_us"] == pytest.approx(naive[name]["total"], rel=1e-9, abs=1e-6), name


def test_owlv2_figures():
    """On the OWLv2 inference trace the host waits in aten::copy_ (device-to-host reads):
    77.4% of its 501.1 ms in cpu ops; aten::linear holds its addmm (total 59.5 ms, self 7.3 ms)."""
    table = hot_ops(load(H100)).set_index("name")
    assert table["self_us"].sum() == pytest.approx(501_129.319, abs=0.001)
    assert table.index[0] == "aten::copy_" and table.loc["aten::copy_", "self_pct"] == pytest.approx(77.40, abs=0.01)
    assert table.loc["aten::linear", "total_us"] == pytest.approx(59_461.671, abs=0.001)
    assert table.loc["aten::linear", "self_us"] == pytest.approx(7_269.925, abs=0.001)


def test_json_and_text_report_show_the_top_ops():
    a = analyze(load(CPU_2RANK))
    doc = to_document(a, top=3)
    ops = doc["host_ops"]
    assert ops == host_ops_json(a.host_ops, 3) and len(ops["ops"]) == 3
    assert ops["host_us"] == pytest.approx(a.host_ops["self_us"].sum())
    assert [o["name"] for o in ops["ops"]] == list(a.host_ops["name"].head(3))
    assert json.loads(json.dumps(doc, allow_nan=False))["host_ops"] == ops
    res = run_cmd(["-m", "goodhart_prof.cli", "analyze", str(CPU_2RANK), "--top", "4"],
                  env=clean_env(COLUMNS="160"))
    assert res.returncode == 0, res.stderr
    assert f"Top 4 of {len(a.host_ops)} host ops by self time" in res.stdout
    top = a.host_ops.iloc[0]
    line = next(l for l in res.stdout.splitlines() if l.startswith(top["name"] + " "))
    assert f"{top['calls']:,}" in line and f"{top['self_pct']:.1f}%" in line
