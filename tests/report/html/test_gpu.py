"""report/html/gpu.py: the HTML report's GPU charts and tables. Each figure read from the analysis
tables it shows (the H100 OWLv2 trace), the kernel libraries' counts adding up to the trace's GPU
activities (counted from the raw file), and no GPU figure at all for a CPU-only trace."""
from __future__ import annotations

import gzip
import re

import msgspec
import numpy as np
import pytest

from goodhart_prof.report.html.gpu import (GAP_COLORS, MARKED_GAPS, TOP_KERNELS, category_figure,
                                           gap_histogram_figure, kernel_figure, library_table_html,
                                           timeline_figure)
from tests.support.analyses import analysis_of
from tests.support.paths import DATA

H100 = DATA / "tracelens" / "h100_owlv2_inference.json.gz"


@pytest.fixture(scope="module")
def gpu_analysis():
    return analysis_of("tracelens/h100_owlv2_inference.json.gz")


def test_each_gpu_figure_shows_its_table(gpu_analysis):
    a = gpu_analysis
    cats = category_figure(a)
    assert sum(cats.data[0].x) == pytest.approx(a.categories["total_us"].sum() / 1e3)

    kernels = kernel_figure(a)
    shown = {name: bar for trace in kernels.data for name, bar in zip(trace.hovertext, trace.x)}
    assert len(shown) == min(TOP_KERNELS, len(a.kernels))
    assert {t.name for t in kernels.data} == set(a.kernels.head(TOP_KERNELS)["category"])
    assert max(shown.values()) == pytest.approx(a.kernels["total_us"].iloc[0] / 1e3)

    b = a.burstiness[0]
    timeline = timeline_figure(a)
    util = next(t for t in timeline.data if t.name == "utilization per window")
    assert len(util.x) == len(b.window_starts) + 1 and util.x[0] == pytest.approx(0)
    assert util.x[-1] == pytest.approx(a.gpu["span_us"].iloc[0] / 1e3)  # ms from the first activity
    assert np.allclose(np.asarray(util.y[:-1]), b.window_util * 100)
    markers = [t for t in timeline.data if t.mode == "markers"]
    assert sum(len(t.x) for t in markers) == min(MARKED_GAPS, len(b.gap_table))
    assert max(max(t.customdata[:, 0]) for t in markers) == pytest.approx(b.gaps["max_us"] / 1e3)

    gaps = gap_histogram_figure(a)
    counts = {t.name: sum(t.y) for t in gaps.data if t.yaxis == "y"}
    idle_ms = sum(sum(t.y) for t in gaps.data if t.yaxis == "y2")
    assert counts == {c: b.gaps["by_class"][c]["count"] for c in GAP_COLORS}
    assert idle_ms == pytest.approx(b.gaps["total_us"] / 1e3)


class _Event(msgspec.Struct):
    ph: object = None
    cat: object = None


class _Doc(msgspec.Struct):
    traceEvents: list[_Event]


def test_library_counts_add_up_to_the_raw_gpu_activities(gpu_analysis):
    with gzip.open(H100, "rb") as fh:
        events = msgspec.json.decode(fh.read(), type=_Doc).traceEvents
    raw = sum(1 for e in events if e.ph == "X" and e.cat in ("kernel", "gpu_memcpy", "gpu_memset"))
    assert raw == 5165
    table = library_table_html(gpu_analysis)
    rows = re.findall(r"<tr><td>([^<]*)</td><td>([\d,]+)</td><td>([^<]*)</td><td>([\d.]+)%</td></tr>", table)
    assert [r[0] for r in rows] == ["aten", "cutlass", "cublas", "runtime", "cudnn"]
    assert sum(int(r[1].replace(",", "")) for r in rows) == raw
    assert sum(float(r[3]) for r in rows) == pytest.approx(100, abs=0.3)


def test_cpu_only_trace_has_no_gpu_figures():
    a = analysis_of("ours/cpu_2rank_merged.json.gz")
    for make in (category_figure, kernel_figure, timeline_figure, gap_histogram_figure, library_table_html):
        assert make(a) is None
