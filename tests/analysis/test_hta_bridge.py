"""Holistic Trace Analysis (HTA 0.5.0) as an independent oracle on the V100 DDP trace.

HTA reads the trace with its own parser and computes the same quantities with its own code, so
agreement here checks our loader and analyses together. Where HTA defines a number differently,
the test says how, checks the difference explicitly, and then compares after accounting for it:

1. HTA keeps only the GPU activity that CPU events *before the last ProfilerStep* launched
   (`Trace._filter_irrelevant_gpu_kernels`, include_last_profiler_step=False): the last step is
   assumed incomplete. We keep everything. `hta_cut` applies HTA's cut to our trace.
2. HTA's temporal breakdown measures its "kernel_time" from the first to the last GPU activity,
   exactly our span, and its idle time as span minus the union of activity, exactly our idle.
   Its "compute" is the union of kernels that are neither NCCL nor Memcpy/Memset (so memcpys and
   communication are "non-compute"); with our categories that is everything but communication,
   memcpy and memset.
3. HTA's idle breakdown is per *stream*: the gaps between consecutive activities of one stream.
   Ours is per *device*: gaps where no stream is busy. On one stream the two agree, except that
   HTA also counts back-to-back activities (0 us apart) as a 0 us "kernel_wait" gap, while we merge
   touching intervals. HTA's host_wait / kernel_wait (< 30 trace units, i.e. us; its docstring says
   ns) / other are our host_wait / launch / other.
4. HTA's kernel breakdown lists each kernel name's sum/mean (no count: count = sum / mean), and
   per kernel type (COMPUTATION, COMMUNICATION, MEMORY) the time when *only* that type runs, with
   overlaps in separate "X overlapping Y" rows.
"""
from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest

pytest.importorskip("hta")
from hta.trace_analysis import TraceAnalysis  # noqa: E402

from goodhart_prof.analysis.gpu.burstiness import burstiness  # noqa: E402
from goodhart_prof.analysis.gpu.device_time import gpu_time  # noqa: E402
from goodhart_prof.analysis.intervals import merge_intervals  # noqa: E402
from goodhart_prof.analysis.gpu.kernels import categorize, kernel_table  # noqa: E402
from goodhart_prof.analysis.host.links import gpu_launches  # noqa: E402
from goodhart_prof.trace.load import load  # noqa: E402
from goodhart_prof.trace.model import GPU_ACTIVITY_CATS, Trace  # noqa: E402
from tests.support.paths import DATA

V100 = DATA / "hta" / "v100_ddp_rank1.json.gz"
RANK = 1  # the trace's distributedInfo rank
NON_COMPUTE = ["communication", "memcpy", "memset"]
HTA_TYPE = {"communication": "COMMUNICATION", "memcpy": "MEMORY", "memset": "MEMORY"}
# HTA 0.5.0 still uses pandas' `inplace=` keywords, which pandas 3 deprecates; not our concern.
pytestmark = pytest.mark.filterwarnings("ignore::Warning:hta")


@pytest.fixture(scope="module")
def hta(tmp_path_factory) -> TraceAnalysis:
    folder = tmp_path_factory.mktemp("hta_v100")  # HTA reads a folder of per-rank traces
    shutil.copy(V100, folder / V100.name)
    return TraceAnalysis(trace_dir=str(folder))


@pytest.fixture(scope="module")
def full() -> Trace:
    return load(V100)


def hta_cut(trace: Trace) -> Trace:
    """Our trace without the GPU activity HTA drops: keep what was launched before the last
    ProfilerStep began."""
    ev = trace.events
    last_step = ev.loc[ev["name"].astype(str).str.startswith("ProfilerStep"), "ts"].max()
    links = gpu_launches(trace)
    kept = links.loc[(links["launch_row"] >= 0) & (links["launch_ts"] < last_step), "gpu_row"]
    is_gpu = ev["cat"].isin(GPU_ACTIVITY_CATS)
    return dataclasses.replace(trace, events=ev[~is_gpu | ev.index.isin(kept)])


@pytest.fixture(scope="module")
def cut(full) -> Trace:
    return hta_cut(full)


def busy(gpu, mask=None) -> float:
    if mask is not None:
        gpu = gpu[mask]
    s, e = merge_intervals(gpu["ts"].to_numpy(), gpu["end"].to_numpy())
    return float((e - s).sum())


def test_hta_drops_the_last_profiler_step(hta, full, cut):
    hta_gpu = hta.t.get_trace(RANK)
    hta_gpu = hta_gpu[hta_gpu["stream"].ne(-1)]
    assert len(cut.gpu) == len(hta_gpu)
    assert len(full.gpu) - len(cut.gpu) == 4458  # the last step's kernels, memcpys, memsets
    ours_full = gpu_time(full).iloc[0]
    hta_span = hta.get_temporal_breakdown(visualize=False).iloc[0]["kernel_time(us)"]
    assert ours_full["span_us"] > hta_span  # our span runs to the end of the last step


def test_temporal_breakdown_matches(hta, cut):
    ref = hta.get_temporal_breakdown(visualize=False).set_index("rank").loc[RANK]
    ours = gpu_time(cut).iloc[0]
    assert ours["span_us"] == ref["kernel_time(us)"] == 1_396_669
    assert ours["idle_us"] == ref["idle_time(us)"] == 643_612
    gpu = cut.gpu
    compute = ~np.isin(categorize(gpu["name"], gpu["cat"]), NON_COMPUTE)
    assert busy(gpu, compute) == ref["compute_time(us)"]
    assert ours["busy_us"] - busy(gpu, compute) == ref["non_compute_time(us)"]


def test_idle_breakdown_matches_per_stream(hta, cut):
    ref, _ = hta.get_idle_time_breakdown(ranks=[RANK], visualize=False)
    _, stats = hta.get_idle_time_breakdown(ranks=[RANK], visualize=False,
                                           show_idle_interval_stats=True)
    ev = cut.events
    is_gpu = ev["cat"].isin(GPU_ACTIVITY_CATS)
    assert sorted(ev.loc[is_gpu, "stream"].unique()) == [7, 14]
    for stream in (7, 14):
        one_stream = dataclasses.replace(cut, events=ev[~is_gpu | (ev["stream"] == stream)])
        (ours,) = burstiness(one_stream)
        by_class = ours.gaps["by_class"]
        hta_time = ref[ref["stream"] == stream].set_index("idle_category")["idle_time"]
        hta_count = stats[stats["stream"] == stream]["count"]
        assert by_class["host_wait"]["total_us"] == hta_time["host_wait"]
        assert by_class["launch"]["total_us"] == hta_time["kernel_wait"]
        assert by_class["other"]["total_us"] == hta_time["other"]
        # Counts: HTA adds a 0 us kernel_wait gap for every pair of back-to-back activities.
        g = one_stream.gpu.sort_values("ts")
        back_to_back = int((g["ts"].to_numpy()[1:] == g["end"].to_numpy()[:-1]).sum())
        assert by_class["host_wait"]["count"] == hta_count["host_wait"]
        assert by_class["other"]["count"] == hta_count["other"]
        assert by_class["launch"]["count"] + back_to_back == hta_count["kernel_wait"]
    # Per stream, stream 7 waits 133 times on something other than the CPU; per device there is
    # no such gap, because the NCCL stream is busy whenever the compute stream waits like that.
    assert stats[stats["stream"] == 7].loc["other", "count"] == 133
    (device,) = burstiness(cut)
    assert device.gaps["by_class"]["other"]["count"] == 0
    assert device.gaps["total_us"] == gpu_time(cut)["idle_us"].iloc[0]


def test_kernel_breakdown_matches(hta, cut):
    by_type, by_name = hta.get_gpu_kernel_breakdown(
        visualize=False, num_kernels=1_000_000, duration_ratio=1.0, include_memory_kernels=True)
    ref = by_name.set_index("name")
    ours = kernel_table(cut).set_index("name")
    assert set(ours.index) == set(ref.index) and "others" not in ref.index
    ref = ref.loc[ours.index]
    assert (ours["total_us"] == ref["sum (us)"]).all()
    assert (ours["count"] == (ref["sum (us)"] / ref["mean (us)"]).round()).all()
    assert (ours["max_us"] == ref["max (us)"]).all() and (ours["min_us"] == ref["min (us)"]).all()
    # Per type, HTA reports the time when only that type runs: all busy time minus the busy time
    # of the other types.
    gpu = cut.gpu
    hta_type = np.array([HTA_TYPE.get(c, "COMPUTATION") for c in categorize(gpu["name"], gpu["cat"])])
    only = by_type.set_index("kernel_type")["sum"]
    total = busy(gpu)
    for kind in ("COMPUTATION", "COMMUNICATION", "MEMORY"):
        assert only[kind] == total - busy(gpu, hta_type != kind)
    assert only.sum() == total


# -- the 8 DLRM ranks: communication overlap and straggler candidates --------------------------
DLRM = DATA / "param" / "dlrm_8rank"


@pytest.fixture(scope="module")
def hta_dlrm(tmp_path_factory) -> TraceAnalysis:
    folder = tmp_path_factory.mktemp("hta_dlrm")
    for path in DLRM.glob("*.json.gz"):
        shutil.copy(path, folder / path.name)
    return TraceAnalysis(trace_dir=str(folder))


@pytest.fixture(scope="module")
def dlrm_analysis():
    from goodhart_prof.analysis import analyze
    return analyze(load(DLRM, progress=False))


def test_dlrm_overlap_per_rank_matches_hta(hta_dlrm, dlrm_analysis):
    """HTA's comp_comm_overlap_pctg is our overlap (communication time a compute kernel runs
    alongside), in percent rounded to 2 decimals."""
    theirs = hta_dlrm.get_comm_comp_overlap(visualize=False).set_index("rank")["comp_comm_overlap_pctg"]
    ours = dlrm_analysis.communication.overlap.set_index("rank")["overlap"]
    assert sorted(theirs.index) == sorted(ours.index) == list(range(8))
    for rank in theirs.index:
        assert 100 * ours[rank] == pytest.approx(theirs[rank], abs=0.006)


def test_dlrm_slowest_rank_is_among_htas_straggler_candidates(hta_dlrm, dlrm_analysis):
    """HTA ranks candidates by the normalized start of the most variable communication kernel
    (two by default); ours is the rank whose late arrivals cost the others the most waiting."""
    candidates = hta_dlrm.get_potential_stragglers(num_candidates=2)
    (it,) = dlrm_analysis.ranks.iterations.itertuples()
    assert candidates == [2, 7] and it.slowest_rank == 7



def test_htas_own_log_lines_stay_out_of_the_report():
    """HTA logs at INFO to stdout and prints while it parses ("Parsed ...", "add distributedInfo");
    `analyze --hta` shows its tables and none of that."""
    from tests.support.helpers import run_cmd

    done = run_cmd(["-c", "import sys; from goodhart_prof.entry import main; main(sys.argv[1:])",
                    "analyze", str(DATA / "hta" / "mi250_minitoy_rocm.json.gz"), "--hta"])
    assert done.returncode == 0, done.stderr[-2000:]
    assert "HTA: temporal breakdown" in done.stdout and "HTA: idle time breakdown" in done.stdout
    for chatter in ("Parsed ", "distributedInfo", "parse_traces", "Rounding down ns"):
        assert chatter not in done.stdout + done.stderr, chatter


def test_quiet_leaves_logging_as_it_found_it():
    import logging

    from goodhart_prof.analysis.hta_bridge import quiet

    before = logging.root.manager.disable
    with quiet():
        assert logging.root.manager.disable == logging.WARNING
        print("not shown")
    assert logging.root.manager.disable == before
