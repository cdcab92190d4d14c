"""Noise first (issue 19 point 1): `diff` and `log compare` tell a change from noise.

Fixtures: tests/data/ours/ab/{clean_1,clean_2,item_logging} (SOURCES.md): three runs of our
trainer with one configuration, the last with `--inject item_logging`.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from goodhart_prof.analysis import analyze
from goodhart_prof.analysis.compare.comparison import compare
from goodhart_prof.analysis.compare.noise import profiler_cost
from goodhart_prof.perflog.measure import add
from tests.support.helpers import run_main
from goodhart_prof.report.diff.page import page
from goodhart_prof.report.diff.document import to_document
from goodhart_prof.trace.load import load
from goodhart_prof.trace.run_record import read_run
from tests.support.paths import DATA

AB = DATA / "ours" / "ab"
TIME_KINDS = {"throughput", "iteration", "phase", "category", "kernel", "communication"}


def side(name: str):
    path = AB / name
    return analyze(load(path)), read_run(path)


@pytest.fixture(scope="module")
def clean_1():
    return side("clean_1")


@pytest.fixture(scope="module")
def clean_2():
    return side("clean_2")


@pytest.fixture(scope="module")
def item_logging():
    return side("item_logging")


# -- hand-built traces: verdicts, warm-up, fewer than 3 iterations ---------------------------------
def steps_trace(path: Path, durations: dict[int, float]) -> Path:
    """One rank, `ProfilerStep#N` of the given durations back to back, each with a `rollout`
    annotation of half of it."""
    events, ts = [], 0.0
    for n, dur in durations.items():
        events.append({"ph": "X", "name": f"ProfilerStep#{n}", "cat": "user_annotation", "ts": ts,
                       "dur": dur, "pid": 1, "tid": 1})
        events.append({"ph": "X", "name": "rollout", "cat": "user_annotation", "ts": ts + 1,
                       "dur": dur / 2, "pid": 1, "tid": 1})
        ts += dur + 10
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def pair(tmp_path, a: dict[int, float], b: dict[int, float]):
    return compare(analyze(load(steps_trace(tmp_path / "a.json", a))),
                   analyze(load(steps_trace(tmp_path / "b.json", b))))


def test_separate_intervals_are_a_change_and_warmup_is_left_out(tmp_path):
    # A: iteration 0 (warm-up, 50 ms) then 1000-1100 us; B: 700-760 us.
    c = pair(tmp_path, {0: 50_000, 1: 1000, 2: 1100, 3: 1050, 4: 1020}, {1: 700, 2: 760, 3: 720})
    assert (c.noise_a.iterations, c.noise_a.warmup, c.noise_b.iterations) == ([1, 2, 3, 4], [0], [1, 2, 3])
    assert c.iterations_line == "A: 4 iterations (1 warm-up excluded); B: 3 iterations"
    assert c.time_statement is None
    s = c.spread.set_index(["kind", "item"])
    it = s.loc[("iteration", "iteration time")]
    assert (it.a, it.low_a, it.high_a) == (1035.0, 1000.0, 1100.0)  # the 50 ms warm-up is not in
    assert (it.b, it.low_b, it.high_b, it.verdict) == (720.0, 700.0, 760.0, "better")
    assert it.impact_us == pytest.approx(315.0 * 3.5)
    assert s.loc[("phase", "rollout"), "verdict"] == "better"
    assert set(zip(c.better["kind"], c.better["item"])) == {("iteration", "iteration time"), ("phase", "rollout")}
    assert c.worse.empty and c.within_noise.empty


def test_overlapping_intervals_are_within_noise(tmp_path, capsys):
    c = pair(tmp_path, {1: 1000, 2: 1400, 3: 1100}, {1: 900, 2: 1050, 3: 1300, 4: 950})
    assert c.headline.empty  # B's median is 16% lower, but its interval reaches into A's
    assert set(c.within_noise["item"]) == {"iteration time", "rollout"}
    code, out, _ = run_main(["diff", str(tmp_path / "a.json"), str(tmp_path / "b.json")], capsys)
    assert code == 0 and "within noise: iteration time, rollout (intervals overlap)" in out
    assert "What got better: nothing" in out and "What got worse: nothing" in out


def test_fewer_than_three_iterations_concludes_nothing_about_time(tmp_path, capsys):
    c = pair(tmp_path, {1: 10_000, 2: 11_000}, {1: 1000, 2: 1100, 3: 1050})  # 10x, but 2 iterations
    assert c.headline.empty and (c.spread["verdict"] == "not judged").all()
    assert c.time_statement.startswith("nothing can be concluded about time: A has 2 counted iterations")
    code, out, _ = run_main(["diff", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["time_statement"] == c.time_statement
    assert doc["headline"] == {"better": [], "worse": []} and doc["iterations"]["a"]["counted"] == [1, 2]


# -- the run record --------------------------------------------------------------------------------
def test_a_run_json_that_is_not_json_is_one_line_on_the_command_line(tmp_path, capsys):
    """(What read_run makes of run.json and metrics.jsonl: tests/trace/test_run_record.py.)"""
    (tmp_path / "run.json").write_text("{not json")
    said = f"{tmp_path / 'run.json'}: not a readable run.json (not JSON: "
    # exit 2, one `Error:` line naming the file, no traceback
    (tmp_path / "rank-0.pt.trace.json.gz").write_bytes((AB / "clean_1" / "rank-0.pt.trace.json.gz").read_bytes())
    code, _, err = run_main(["diff", str(tmp_path), str(AB / "clean_2")], capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"Error: {said}"), err


# -- the fixtures: two runs of one configuration, and one with --inject item_logging --------------
def test_fixture_folders_stay_small():
    for name in ("clean_1", "clean_2", "item_logging"):
        folder = AB / name
        assert sum(p.stat().st_size for p in folder.iterdir()) < 1_000_000
        assert {p.name for p in folder.iterdir()} == {"rank-0.pt.trace.json.gz", "run.json", "metrics.jsonl"}


def test_two_runs_of_one_configuration_show_no_change_in_time(clean_1, clean_2):
    (a, ra), (b, rb) = clean_1, clean_2
    c = compare(a, b, ra, rb)
    assert c.time_statement is None and c.noise_a.n == c.noise_b.n == 6
    assert not set(c.headline["kind"]) & TIME_KINDS  # no time item is better or worse
    assert c.headline.empty  # and the counts are the same: same code, same reads
    noise = set(c.within_noise["item"])
    assert {"env-steps/s", "iteration time", "rollout", "ppo_update"} <= noise
    assert set(c.spread["verdict"]) == {"within noise"}
    doc = json.loads(json.dumps(to_document(c), allow_nan=False))
    assert {w["item"] for w in doc["within_noise"]} == noise
    assert all(r["low_a"] <= r["a"] <= r["high_a"] for r in doc["spread"])
    assert "within noise</b> (intervals overlap)" in page(c)


def test_item_logging_is_the_one_real_change(clean_1, item_logging):
    (a, ra), (b, rb) = clean_1, item_logging
    c = compare(a, b, ra, rb)
    assert c.better.empty and len(c.worse) == 1
    w = c.worse.iloc[0]
    site = "rollout > env_step > aten::item"
    # expected from each side's own host reads: those at the site inside the counted iterations
    counted = {s: set(n.iterations) for s, n in (("a", c.noise_a), ("b", c.noise_b))}
    per_it = {s: int((x.host_reads["site"].eq(site) & x.host_reads["iteration"].isin(counted[s])).sum())
              / len(counted[s]) for s, x in (("a", a), ("b", b))}
    assert per_it["a"] == 0 and per_it["b"] == 8  # one read per rollout step (8 steps)
    assert (w["kind"], w["item"], w["site"], w["metric"]) == ("host_read", "item", site, "count_per_iteration")
    assert w.delta == per_it["b"] - per_it["a"]
    assert (c.spread["verdict"] != "better").all() and (c.spread["verdict"] != "worse").all()


def test_diff_command_on_run_folders(capsys):
    code, out, _ = run_main(["diff", str(AB / "clean_1"), str(AB / "item_logging")], capsys)
    assert code == 0
    assert "A: 6 iterations, env-steps/s from 8 untraced iterations; B: 6 iterations" in out
    assert "item at rollout > env_step > aten::item" in out and "What got better: nothing" in out
    assert "within noise: env-steps/s, iteration time" in out


def test_log_compare_of_two_runs_of_one_configuration(tmp_path, capsys):
    log = tmp_path / "PERFLOG.md"
    rows = [add(AB / name, name, log) for name in ("clean_1", "clean_2")]
    for row in rows:
        run = read_run(AB / row["change"])
        rates = run.throughput()["rate"].to_numpy()
        assert row["env_steps_per_s"] == pytest.approx(float(np.median(rates)))
        assert (row["env_steps_per_s_low"], row["env_steps_per_s_high"]) == (rates.min(), rates.max())
        assert row["env_steps_per_s_n"] == len(rates) == 8
        n = compare(analyze(load(AB / row["change"])), analyze(load(AB / "clean_1"))).noise_a
        steps = n.samples[n.samples["item"] == "iteration time"]["value"].to_numpy() / 1e3
        assert (row["iteration_ms"], row["iteration_ms_low"], row["iteration_ms_high"], row["iteration_ms_n"]) \
            == (pytest.approx(float(np.median(steps))), steps.min(), steps.max(), 6)
    code, out, _ = run_main(["log", "compare", "1", "2", "--log", str(log)], capsys)
    for field in ("Iteration (ms)", "Env-steps/s"):  # log compare's readable field names
        line = next(x for x in out.splitlines() if x.startswith(field))
        assert code == 0 and "within noise" in line and "better" not in line and "worse" not in line


def test_profiler_cost_of_a_run_by_its_own_clock():
    # worked by hand from clean_1/metrics.jsonl (iteration_s): traced iterations 10-15 (run.json's
    # window) sorted 0.037096 0.047049 0.047548 0.049351 0.049940 0.059150, median
    # (0.047548 + 0.049351) / 2 = 0.0484495; untraced 1-8 (0 is warm-up, 9 the profiler's) sorted
    # 0.025856 0.026359 0.027835 0.028807 0.032235 0.033955 0.038256 0.039862, median
    # (0.028807 + 0.032235) / 2 = 0.030521. Ratio 0.0484495 / 0.030521 = 1.58742. With 6 and 8
    # values the 95% intervals are [min, max] (k = 2 covers only 1 - 2 * 7/64 = 78% and
    # 1 - 2 * 9/256 = 93%), covering 1 - 2/64 = 96.875% and 1 - 2/256 = 99.22%: the cost's interval
    # is [0.037096 / 0.039862, 0.059150 / 0.025856] = [0.93061, 2.28767] at 96.875% x 99.22% = 96.12%
    cost = profiler_cost(read_run(AB / "clean_1"))
    assert cost.n == 6
    assert cost.median == pytest.approx(1.58742, abs=5e-6)
    assert (cost.low, cost.high) == (pytest.approx(0.93061, abs=5e-6), pytest.approx(2.28767, abs=5e-6))
    assert cost.confidence == pytest.approx(0.96118, abs=5e-6)


def test_a_machine_that_changed_speed_withholds_every_time_verdict(tmp_path, clean_2, capsys):
    """clean_1 with its untraced iterations made twice as fast (as when other work stops during the
    run): its traced iterations now cost 3.17x the untraced ones against clean_2's 1.24x, so no
    time figure is judged, and the counts are still compared."""
    folder = tmp_path / "drifted"
    folder.mkdir()
    for name in ("rank-0.pt.trace.json.gz", "run.json"):
        (folder / name).write_bytes((AB / "clean_1" / name).read_bytes())
    rows = [json.loads(line) for line in (AB / "clean_1" / "metrics.jsonl").read_text().splitlines()]
    for r in rows:
        if r["iteration"] < 9:
            r["iteration_s"] /= 2
            r["env_steps_per_s"] *= 2
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    a, b = analyze(load(folder)), clean_2[0]
    c = compare(a, b, read_run(folder), clean_2[1])
    ca, cb = c.noise_a.profiler_cost, c.noise_b.profiler_cost
    assert ca.low > cb.high  # 1.86-4.58x against 0.58-1.51x
    assert c.time_statement.startswith("nothing can be concluded about time: the machine's speed changed")
    assert f"{ca.median:.2f}x" in c.time_statement and f"{cb.median:.2f}x" in c.time_statement
    assert set(c.spread["verdict"]) == {"not judged"} and c.headline.empty  # same code: same counts
    code, out, _ = run_main(["diff", str(folder), str(AB / "clean_2")], capsys)
    assert code == 0 and "the machine's speed changed between or during the runs" in " ".join(out.split())
    # the undisturbed pair is not flagged
    assert compare(*clean_2[:1], *clean_2[:1], clean_2[1], clean_2[1]).time_statement is None
