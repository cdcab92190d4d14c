"""Burstiness: windowed utilization, idle gaps and their classes, kernel-start burstiness B.

Hand-built traces with answers worked out by hand, and every trace in shared/traces.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from goodhart_prof.analysis.gpu.burstiness import GAP_CLASSES, burstiness
from goodhart_prof.analysis.gpu.device_time import gpu_time
from goodhart_prof.report.json_report import burstiness_json
from goodhart_prof.trace.load import load
from tests.support.paths import DATA

SHARED = DATA  # copies of ../shared/traces (tests/data/SOURCES.md)
ALL_TRACES = {
    "tracelens/h100_owlv2_inference.json.gz": DATA / "tracelens" / "h100_owlv2_inference.json.gz",
    "hta/v100_ddp_rank1.json.gz": DATA / "hta" / "v100_ddp_rank1.json.gz",
    "hta/mi250_minitoy_rocm.json.gz": DATA / "hta" / "mi250_minitoy_rocm.json.gz",
    "kineto/resnet50_v100_2021.pt.trace.json.gz": SHARED / "kineto" / "resnet50_v100_2021.pt.trace.json.gz",
    "param/dlrm_8rank": SHARED / "param" / "dlrm_8rank",
    "hta/sampled_128rank": SHARED / "hta" / "sampled_128rank",
}


def kernel(ts, dur, stream=7, corr=None, launch=None, device=0, cat="kernel", name="k"):
    """A GPU activity and, when `launch` is given, its cudaLaunchKernel at that time."""
    args = {"device": device, "stream": stream}
    if corr is not None:
        args["correlation"] = corr
    out = [{"ph": "X", "cat": cat, "name": name, "pid": device, "tid": stream, "ts": ts,
            "dur": dur, "args": args}]
    if launch is not None:
        out.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100,
                    "tid": 100, "ts": launch, "dur": 2, "args": {"correlation": corr}})
    return out


def trace_of(tmp_path: Path, *activities: list[dict]):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [e for a in activities for e in a]}))
    return load(path)


def one(trace, **kw):
    (result,) = burstiness(trace, **kw)
    return result


# ---- gaps --------------------------------------------------------------------------------------

def gap_trace(tmp_path):
    return trace_of(
        tmp_path,
        kernel(0, 10, corr=1, launch=-5),
        kernel(15, 5, corr=2, launch=-4),     # gap 10..15 (5): queued long before -> launch
        kernel(100, 10, corr=3, launch=50),   # gap 20..100 (80): launched at 50 > 20 -> host_wait
        kernel(200, 10, corr=4, launch=60),   # gap 110..200 (90): queued, still waited -> other
        kernel(215, 5, corr=5, launch=212),   # gap 210..215 (5): launched late -> host_wait
        kernel(223, 7, corr=6),               # gap 220..223 (3): launch not in trace -> launch
        kernel(280, 10, corr=7),              # gap 230..280 (50): launch not in trace -> other
        # gap 290..300 (10) opened by two activities at once; the earliest launch counts -> launch
        kernel(300, 10, stream=8, corr=8, launch=295),
        kernel(300, 5, corr=9, launch=100, cat="gpu_memcpy", name="Memcpy DtoD (Device -> Device)"),
    )


def test_gaps_are_classed_by_launch_time_and_size(tmp_path):
    b = one(gap_trace(tmp_path))
    table = b.gap_table
    assert table["start"].tolist() == [10, 20, 110, 210, 220, 230, 290]
    assert table["end"].tolist() == [15, 100, 200, 215, 223, 280, 300]
    assert table["dur_us"].tolist() == [5, 80, 90, 5, 3, 50, 10]
    assert table["cls"].tolist() == ["launch", "host_wait", "other", "host_wait", "launch",
                                     "other", "launch"]
    gaps = b.gaps
    assert gaps["count"] == 7 and gaps["total_us"] == 243 and gaps["max_us"] == 90
    durs = [5, 80, 90, 5, 3, 50, 10]
    assert gaps["p50_us"] == 10
    assert [gaps["p90_us"], gaps["p99_us"]] == pytest.approx(np.percentile(durs, [90, 99]))
    assert gaps["by_class"] == {"host_wait": {"count": 2, "total_us": 85.0},
                                "launch": {"count": 3, "total_us": 18.0},
                                "other": {"count": 2, "total_us": 140.0}}


def test_gap_total_is_the_idle_time(tmp_path):
    trace = gap_trace(tmp_path)
    assert one(trace).gaps["total_us"] == gpu_time(trace)["idle_us"].iloc[0] == 243


def test_overlapping_and_touching_activity_leaves_no_gap(tmp_path):
    b = one(trace_of(tmp_path, kernel(0, 10), kernel(5, 10, stream=8), kernel(15, 5),
                     kernel(20, 5, cat="gpu_memset", name="Memset (Device)")))
    assert b.gaps["count"] == 0 and b.gaps["total_us"] == 0
    assert b.gaps["p50_us"] is None and b.gaps["max_us"] is None
    assert b.gap_table.empty and list(b.gap_table.columns) == ["start", "end", "dur_us", "cls"]
    assert all(b.gaps["by_class"][c] == {"count": 0, "total_us": 0.0} for c in GAP_CLASSES)


# ---- utilization windows -----------------------------------------------------------------------

def test_window_utilization_by_hand(tmp_path):
    b = one(trace_of(tmp_path, kernel(0, 10), kernel(20, 10)), windows=3, min_window_us=1)
    assert b.window_us == 10
    assert b.window_starts.tolist() == [0, 10, 20]
    assert b.window_util.tolist() == [1, 0, 1]
    assert b.util_cv == pytest.approx(np.std([1, 0, 1]) / np.mean([1, 0, 1]))  # 0.7071


def test_windows_union_overlap_and_split_at_edges(tmp_path):
    # [0,15) and [5,12) overlap; [18,30) starts inside the second window.
    b = one(trace_of(tmp_path, kernel(0, 15), kernel(5, 7, stream=8), kernel(18, 12)),
            windows=3, min_window_us=1)
    assert b.window_util.tolist() == pytest.approx([1.0, 0.7, 1.0])


def test_min_window_and_short_last_window(tmp_path):
    # span 25 / 200 windows is 0.125 us, raised to 10 us: windows [0,10) [10,20) [20,25).
    b = one(trace_of(tmp_path, kernel(0, 5), kernel(12, 13)))
    assert b.window_us == 10
    assert b.window_starts.tolist() == [0, 10, 20]
    assert b.window_util.tolist() == pytest.approx([0.5, 0.8, 1.0])


def test_default_window_is_span_over_200(tmp_path):
    b = one(trace_of(tmp_path, kernel(0, 100), kernel(3900, 100)))
    assert b.window_us == 20 and len(b.window_util) == 200
    assert b.window_util[:5].tolist() == [1] * 5 and b.window_util[5:195].sum() == 0


# ---- burstiness B ------------------------------------------------------------------------------

def test_periodic_kernels_give_minus_one(tmp_path):
    train = [kernel(100 * i, 10) for i in range(50)]
    copies = [kernel(100 * i + 50, 5, cat="gpu_memcpy", name="Memcpy HtoD (Pinned -> Device)")
              for i in range(0, 50, 7)]  # copies in between do not count: kernels only
    b = one(trace_of(tmp_path, *train, *copies))
    assert b.burstiness_B == -1.0


def test_bursts_give_positive_b(tmp_path):
    # worked by hand: kernels starting at 0, 1, ..., 9 and 30 leave ten intervals, nine of 1 us and
    # one of 21 us: mean 30/10 = 3, mean square (9 + 441)/10 = 45, so sigma = sqrt(45 - 9) = 6 and
    # B = (6 - 3) / (6 + 3) = 1/3
    b = one(trace_of(tmp_path, *[kernel(s, 0.5) for s in [*range(10), 30]]))
    assert b.burstiness_B == pytest.approx(1 / 3, abs=1e-12)
    # four intervals of 1 us and one of 11 us (starts 0..4, 15): mean 3, mean square
    # (4 + 121)/5 = 25, sigma 4, B = 1/7
    b = one(trace_of(tmp_path, *[kernel(s, 0.5) for s in [*range(5), 15]]))
    assert b.burstiness_B == pytest.approx(1 / 7, abs=1e-12)
    # ten bursts of ten kernels: bursty, B well above the Poisson 0
    starts = [10_000 * burst + 2 * i for burst in range(10) for i in range(10)]
    assert one(trace_of(tmp_path, *[kernel(s, 1) for s in starts])).burstiness_B > 0.5


def test_poisson_starts_give_about_zero(tmp_path):
    rng = np.random.default_rng(7)
    starts = np.cumsum(rng.exponential(100.0, 3000))
    b = one(trace_of(tmp_path, *[kernel(float(s), 1.0) for s in starts]))
    assert abs(b.burstiness_B) < 0.05


def test_fewer_than_three_kernels_have_no_b(tmp_path):
    b = one(trace_of(tmp_path, kernel(0, 10), kernel(50, 10),
                     kernel(70, 5, cat="gpu_memset", name="Memset (Device)")))
    assert b.burstiness_B is None
    assert burstiness_json(b)["burstiness_B"] is None


# ---- JSON --------------------------------------------------------------------------------------

def plain(obj) -> bool:
    if isinstance(obj, dict):
        return all(isinstance(k, str) and plain(v) for k, v in obj.items())
    if isinstance(obj, list):
        return all(plain(v) for v in obj)
    return obj is None or type(obj) in (int, float, str, bool)


def test_json_is_plain_and_matches_design(tmp_path):
    out = burstiness_json(one(gap_trace(tmp_path)))
    assert set(out) == {"window_us", "util_cv", "burstiness_B", "gaps", "idle_causes"}
    assert out["idle_causes"] and all(set(c) == {"cause", "idle_us", "share", "frame"}
                                      for c in out["idle_causes"])
    assert set(out["gaps"]) == {"count", "p50_us", "p90_us", "p99_us", "max_us", "total_us",
                                "by_class"}
    assert set(out["gaps"]["by_class"]) == set(GAP_CLASSES)
    assert plain(out)
    json.dumps(out, allow_nan=False)
    # One activity of zero length: nothing is defined, and nothing is NaN either.
    empty = burstiness_json(one(trace_of(tmp_path, kernel(5, 0))))
    assert empty["util_cv"] is None and empty["burstiness_B"] is None and plain(empty)
    json.dumps(empty, allow_nan=False)


def test_one_result_per_device_in_order(tmp_path):
    results = burstiness(trace_of(tmp_path, kernel(0, 10, device=1), kernel(0, 10, device=0),
                                  kernel(20, 10, device=1)))
    assert [(r.rank, r.device) for r in results] == [(0, 0), (0, 1)]
    assert results[1].gaps["count"] == 1 and results[0].gaps["count"] == 0


# ---- every shared trace ------------------------------------------------------------------------

@pytest.mark.parametrize("key", sorted(ALL_TRACES))
def test_every_trace_gives_finite_burstiness(key):
    path = ALL_TRACES[key]
    if not path.exists():
        pytest.skip(f"{path} missing: shared/traces is expected at ../shared/traces from the repo root")
    trace = load(path)
    results = burstiness(trace)
    times = gpu_time(trace).set_index(["rank", "device"])
    assert [(r.rank, r.device) for r in results] == list(times.index)
    for r in results:
        span = times.loc[(r.rank, r.device), "span_us"]
        assert r.window_us == pytest.approx(max(span / 200, 10.0))
        assert len(r.window_starts) == len(r.window_util) > 0
        assert np.isfinite(r.window_util).all()
        assert ((r.window_util >= -1e-9) & (r.window_util <= 1 + 1e-9)).all()
        # Busy time summed over windows is the device's busy time.
        n = len(r.window_util)
        lengths = np.append(np.full(n - 1, r.window_us), span - (n - 1) * r.window_us)
        assert (r.window_util * lengths).sum() == pytest.approx(times.loc[(r.rank, r.device), "busy_us"])
        assert np.isfinite(r.util_cv)
        assert r.burstiness_B is None or -1 <= r.burstiness_B <= 1
        g = r.gaps
        assert g["total_us"] == pytest.approx(times.loc[(r.rank, r.device), "idle_us"])
        assert sum(c["count"] for c in g["by_class"].values()) == g["count"] == len(r.gap_table)
        assert sum(c["total_us"] for c in g["by_class"].values()) == pytest.approx(g["total_us"])
        if g["count"]:
            assert g["p50_us"] <= g["p90_us"] <= g["p99_us"] <= g["max_us"]
        assert plain(burstiness_json(r))
        json.dumps(burstiness_json(r), allow_nan=False)


def test_h100_gaps_add_up_to_tracelens_idle_time():
    timeline = pd.read_csv(DATA / "tracelens" / "gpu_timeline.csv").set_index("type")["time ms"]
    b = one(load(ALL_TRACES["tracelens/h100_owlv2_inference.json.gz"]))
    assert b.gaps["total_us"] == pytest.approx(timeline["idle_time"] * 1000, rel=1e-4)
    # One stream, eager inference: every gap of 30 us or more is the CPU being late.
    assert b.gaps["by_class"]["other"]["count"] == 0
    assert b.gaps["by_class"]["host_wait"]["total_us"] > 0.95 * b.gaps["total_us"]
