"""The HTML report's CUPTI counters section (report/html/cupti_section.py)."""
from __future__ import annotations

from goodhart_prof.analysis.facade import analyze
from goodhart_prof.report.html.cupti_section import cupti_section
from goodhart_prof.trace.load import load
from tests.support.paths import DATA


def test_the_section_has_every_counter_per_op_and_kernel():
    html = cupti_section(analyze(load(DATA / "hta" / "cupti_counters_a100.json.gz")))
    assert html.startswith('<section id="cupti"><h2>CUPTI counters</h2><p>77 kernel ranges with 9 counters.')
    assert html.count("<th>smsp__sass_thread_inst_executed_op_ffma_pred_on.sum</th>") == 2  # op and kernel tables
    assert "<td>aten::cudnn_convolution</td><td>28</td>" in html
