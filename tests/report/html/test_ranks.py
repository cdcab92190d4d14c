"""report/html/ranks.py: the HTML "Ranks and communication" section. The collectives table and each
rank's bars of the 8-rank DLRM trace (NCCL kernel counts and times, step times, recomputed from
the raw rank files), the arrival heatmap's slowest rank, and the sentence for a trace without
collectives."""
from __future__ import annotations

import re

import pytest

from goodhart_prof.report.html.ranks import arrival_figure, rank_figure, ranks_section
from tests.support.analyses import analysis_of
from tests.support.dlrm import DLRM, raw_rank



@pytest.fixture(scope="module")
def dlrm():
    return analysis_of(DLRM)


def test_collectives_table_against_the_raw_kernels(dlrm):
    html = ranks_section(dlrm, lambda fig, name: f"<figure {name}>")
    kinds, _ = raw_rank(1)
    for kind, (count, us) in kinds.items():
        row = re.search(rf"<tr><td>rank 1 / gpu 1</td><td>{kind}</td><td>(\d+)</td><td>([^<]*)</td>", html)
        assert row.groups() == (str(count), f"{us / 1e3:.3g} ms")
    assert "<figure ranks>" in html and "<figure arrivals>" in html
    assert "<th>waiting</th><th>busbw once all arrived</th>" in html


def test_each_ranks_bars_are_its_step_and_kernel_times(dlrm):
    fig = rank_figure(dlrm.ranks)
    bars = {t.name: dict(zip(t.y, t.x)) for t in fig.data}
    assert list(bars) == ["compute", "communication", "exposed", "waiting for a later rank", "step"]
    for rank in (0, 1):
        kinds, step = raw_rank(rank)
        assert bars["step"][f"rank {rank}"] == pytest.approx(step / 1e3)
        assert bars["communication"][f"rank {rank}"] == pytest.approx(sum(us for _, us in kinds.values()) / 1e3)
    assert len(bars["step"]) == 8


def test_arrival_heatmap_names_the_slowest_rank(dlrm):
    it = dlrm.ranks.iterations.iloc[0]
    fig = arrival_figure(dlrm.ranks)
    assert fig.layout.title.text.startswith(f"Arrival at each collective, iteration 10: rank {int(it['slowest_rank'])} "
                                            "kept the others waiting")
    heat = fig.data[0]
    assert list(heat.y) == [f"rank {r}" for r in range(8)] and heat.x[0] == "#0 all_to_all"


def test_no_collectives_reads_as_a_sentence():
    html = ranks_section(analysis_of("hta/mi250_minitoy_rocm.json.gz"), lambda fig, name: "")
    assert html == ('<section id="ranks"><h2>Ranks and communication</h2><p class="empty">No communication '
                    "kernels (NCCL/RCCL): a single-GPU trace, or one without collectives.</p></section>")
