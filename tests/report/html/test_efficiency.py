"""report/html/efficiency.py: the HTML efficiency section. The op-type table of the bert-small H100
trace (aten::addmm's FLOPs worked out from the raw events' shapes, 2·M·N·K), its roofline figure
with the device's roof, the CPU-only FLOPs trace without roofs, ops without shapes named with
their counts, and the sentence where there is no such op."""
from __future__ import annotations

import gzip
import json
import math
import re

import pytest

from goodhart_prof.analysis import analyze
from goodhart_prof.report.html.efficiency import efficiency_section, roofline_figure
from tests.support.analyses import analysis_of
from tests.support.events import load_events, op
from tests.support.paths import DATA

BERT = "tracelens/h100_bert_small_inference.json.gz"


def embed(fig, name: str) -> str:
    return f"<figure {name}>"


def addmm_flops() -> tuple[int, int]:
    """Count and FLOPs of aten::addmm in the raw trace: bias, x [.., K], w [K, N]."""
    with gzip.open(DATA / BERT, "rt") as fh:
        ops = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X" and e.get("name") == "aten::addmm"]
    total = 0
    for e in ops:
        _, x, w = e["args"]["Input Dims"][:3]
        total += 2 * math.prod(x[:-1]) * x[-1] * w[-1]
    return len(ops), total


def cells(html: str, op: str) -> list[str]:
    row = re.search(rf"<tr><td>[^<]*</td><td><code>{re.escape(op)}</code></td>(.*?)</tr>", html).group(1)
    return re.findall(r"<td>(.*?)</td>", row)


def test_op_table_of_a_gpu_trace():
    a = analysis_of(BERT)
    html = efficiency_section(a, embed)
    n, flops = addmm_flops()
    assert (n, flops) == (26, 8_029_194_240)
    time_us = a.efficiency.ops.set_index("op").at["aten::addmm", "time_us"]
    dtype, count, time, gflop, _, _, tflops = cells(html, "aten::addmm")[:7]
    assert (dtype, count, time, gflop) == ("bf16", "26", "197.6 us", f"{flops / 1e9:,.2f}")
    assert tflops == f"{flops / (time_us * 1e-6) / 1e12:,.2f}" == "40.63"
    assert "rank 0 / gpu 0: NVIDIA H100 80GB HBM3, peak: H100 SXM" in html
    assert '<div class="figure"><figure roofline></div>' in html


def test_roofline_has_the_devices_roof():
    fig = roofline_figure(analysis_of(BERT).efficiency)
    assert [t.name for t in fig.data] == ["compute kernel", "op type", "roof bf16: 990 TFLOP/s, 3,350 GB/s"]
    roof = fig.data[-1]
    # min(peak, intensity x bandwidth): the memory slope below the ridge, flat above it
    assert roof.y[0] == pytest.approx(roof.x[0] * 3350 / 1e3) and roof.y[-1] == pytest.approx(989.5)


def test_cpu_ops_have_no_roof_and_no_percentages():
    a = analysis_of("ours/cpu_flops_ops.json.gz")
    html = efficiency_section(a, embed)
    assert "the CPU (ops' own CPU time; no kernels): CPU, peak unknown: no roofs, no percentages" in html
    assert cells(html, "aten::conv2d")[-3:] == ["-", "-", "-"]  # % of peak, % of roof, bound
    assert [t.name for t in roofline_figure(a.efficiency).data] == ["op type"]


def test_ops_without_shapes_are_named_with_their_counts():
    path = "hta/critical_path_simple_add.json.gz"
    with gzip.open(DATA / path, "rt") as fh:
        names = [e.get("name") for e in json.load(fh)["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    html = efficiency_section(analysis_of(path), embed)
    assert (f"FLOPs unknown (shapes or scalar arguments not recorded): <code>aten::conv2d</code> "
            f"x{names.count('aten::conv2d')}, <code>aten::addmm</code> x{names.count('aten::addmm')}</p>") in html


def test_no_gemm_op_reads_as_a_sentence(tmp_path):
    a = analyze(load_events(tmp_path, [op("aten::relu", 0, 10)]))
    html = efficiency_section(a, embed)
    assert "No GEMM, convolution or attention op with recorded shapes" in html
    assert "<figure" not in html and html.endswith("</p></section>")


def test_many_ranks_of_one_model_are_summed_and_sourced_once():
    from goodhart_prof.report.html.page import render_html
    from tests.support.analyses import analysis_of

    page = render_html(analysis_of("param/dlrm_8rank"))
    section = page[page.index('<section id="efficiency">'):page.index("</section>", page.index('<section id="efficiency">'))]
    assert section.count("volta-v100-datasheet") == 1
    assert "8 devices (rank 0 / gpu 0 .. rank 7 / gpu 7): Tesla V100-SXM2-32GB" in section
    assert "Roofline by op type, summed over the devices of each model" in section
    assert "<td><code>aten::mm</code></td><td>fp32</td><td>V100 SXM2</td><td>8</td><td>104</td>" in section
