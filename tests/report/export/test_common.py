"""report/export/common.py: what both exporters share. Microseconds to exact integer nanoseconds,
the summary line, the output check, launch -> GPU links as row positions, and the utilization
counter samples (a hand-made trace whose GPU is busy, idle, busy in 100 us stretches)."""
from __future__ import annotations

import numpy as np
import pytest

from goodhart_prof.analysis import analyze
from goodhart_prof.report.export.common import (ExportError, ExportSummary, check_output, linked_launches,
                                                to_ns, utilization_samples)
from tests.support.events import launch, load_events, op


def test_to_ns_is_exact_on_absolute_clocks():
    # 1.7e15 us (an epoch clock) holds quarter microseconds; scaling it whole loses them
    us = np.array([1.25, 0.75, 1_699_999_999_999_999.75])
    assert to_ns(us).tolist() == [1250, 750, 1_699_999_999_999_999_750]
    assert (us[2:] * 1000).astype(np.int64).tolist() != [1_699_999_999_999_999_750]
    assert to_ns(np.array([], dtype=float)).tolist() == []


def test_summary_line_names_only_what_was_written(tmp_path):
    pb = ExportSummary(tmp_path / "out.pftrace", "perfetto", slices=1234, gpu_slices=56, python_slices=7,
                       flows=56, sync_instants=3, counter_tracks=1)
    assert pb.line() == (f"wrote {tmp_path / 'out.pftrace'} (perfetto): 1,234 slices (56 GPU, 7 Python), "
                         "56 launch flows, 3 sync instants, 1 utilization counter(s)")
    js = ExportSummary(tmp_path / "o.json", "chrome-json", slices=10, gpu_slices=2, overflow_tracks=2,
                       overflow_slices=1500, trace_instants=4, trace_counter_tracks=1)
    assert js.line().endswith("(chrome-json): 10 slices (2 GPU), 4 trace instants, 1 trace counter(s), "
                              "1,500 on 2 overflow track(s), 0 launch flows, 0 sync instants, "
                              "0 utilization counter(s)")


def test_check_output_refuses_with_the_export_error(tmp_path):
    out = tmp_path / "t.json"
    assert check_output(out, force=False) == out
    out.write_text("{}")
    with pytest.raises(ExportError, match="already exists"):
        check_output(out, force=False)
    assert check_output(out, force=True) == out
    with pytest.raises(ExportError, match="is a folder"):
        check_output(tmp_path, force=True)


@pytest.fixture
def two_kernels(tmp_path):
    """Kernels k1 (110-210 us) and k2 (310-410 us), each with its launch; an op with no launch."""
    return load_events(tmp_path, launch("k1", 100, 1, "aten::mm") + launch("k2", 300, 2) + [op("aten::add", 500, 10)])


def test_linked_launches_are_row_positions(two_kernels):
    links = linked_launches(two_kernels)
    names = two_kernels.events["name"].astype(str).to_numpy()
    assert [(names[g], names[k]) for g, k in links[["gpu_pos", "launch_pos"]].to_numpy()] == [
        ("k1", "cudaLaunchKernel"), ("k2", "cudaLaunchKernel")]
    ts = two_kernels.events["ts"].to_numpy()
    assert ts[links["launch_pos"]].tolist() == [100.0, 300.0]


def test_utilization_samples_end_at_zero(two_kernels):
    ((rank, device, times, percent),) = utilization_samples(analyze(two_kernels))
    assert (rank, device) == (0, 0)
    assert times[0] == 110.0 and times[-1] == 410.0  # first window start .. last activity end
    busy = dict(zip(times.tolist(), percent.tolist()))
    assert busy[110.0] == busy[200.0] == 100.0 and busy[250.0] == 0.0 and busy[310.0] == 100.0
    assert percent[-1] == 0.0
