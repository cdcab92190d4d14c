"""report/html/host.py: the HTML report's host charts and the hottest host ops section. The sync
and phase figures read from their tables (the H100 OWLv2 trace), the host ops table on hand-made
nested ops (self and total times worked out by hand), the sync note, and labels made unique."""
from __future__ import annotations

import pandas as pd
import pytest

from goodhart_prof.analysis import analyze
from goodhart_prof.report.html.host import (TOP_SITES, host_ops_section, kinds, phase_figure, sync_iterations_figure,
                                            sync_note, sync_sites_figure, unique)
from tests.support.analyses import analysis_of
from tests.support.events import cuda_item, load_events, op


def test_sync_and_phase_figures_show_their_tables():
    a = analysis_of("tracelens/h100_owlv2_inference.json.gz")
    sites = sync_sites_figure(a)
    assert sum(sum(t.x) for t in sites.data) == a.syncs.sites.head(TOP_SITES)["count"].sum()
    per_it = sync_iterations_figure(a)
    assert sum(sum(t.y) for t in per_it.data) == a.syncs.total
    assert list(per_it.layout.xaxis.categoryarray) == ["#6", "outside"]

    phases = phase_figure(a)
    cpu, gpu = phases.data
    assert list(cpu.y) == list(a.phases["name"].iloc[[1, 0]])  # the iteration first
    assert gpu.x[0] == pytest.approx(a.phases["gpu_us"].iloc[1] / 1e3)


@pytest.fixture
def nested(tmp_path):
    """aten::linear (0-100 us) holding aten::addmm (10-40), aten::relu (200-220), and an `.item()`
    at 300 (aten::item 50 us holding aten::_local_scalar_dense 48 us)."""
    events = [op("aten::linear", 0, 100), op("aten::addmm", 10, 30), op("aten::relu", 200, 20)] + cuda_item(300, 1)
    return analyze(load_events(tmp_path, events))


def test_host_ops_table_self_and_total_times(nested):
    html = host_ops_section(nested, top=3)
    # self: linear 100 - 30 = 70, scalar 48, addmm 30, relu 20, item 50 - 48 = 2; host time 170 us
    assert "The 3 of 5 host ops with the most self time" in html and "host time, 170 us" in html
    assert ("<tr><td><code>aten::linear</code></td><td>1</td><td>70 us</td><td>41.2%</td>"
            "<td>100 us</td><td>58.8%</td></tr>") in html
    assert "<code>aten::addmm</code></td><td>1</td><td>30 us</td><td>17.6%</td>" in html
    assert "aten::relu" not in html and "aten::item<" not in html  # past the top 3


def test_one_read_as_a_sync_point(nested):
    assert sync_note(nested).startswith("1 sync points (item 1)")
    (bar,) = sync_sites_figure(nested).data
    assert (bar.name, list(bar.x), list(bar.y)) == ("item", [1], ["1. aten::item"])
    (outside,) = sync_iterations_figure(nested).data
    assert list(outside.x) == ["outside"] and list(outside.y) == [1]  # no iterations in this trace


def test_kinds_by_count_and_unique_labels():
    assert kinds(pd.Series(["b", "a", "b", "c", "a", "b"])) == ["b", "a", "c"]
    assert unique(["a", "b", "a", "a"]) == ["a", "b", "a (2)", "a (3)"]
