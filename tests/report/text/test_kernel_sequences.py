"""report/text/kernel_sequences.py: the terminal report's frequent kernel sequences and fusion
candidates, on TraceLens's OWLv2 inference trace (eager, record_shapes and stacks): both tables
fit 80, 100 and 160 columns, and the fusion candidate OWLv2's SiLU makes (mul, sigmoid, mul)
shows its launches and bytes per iteration."""
from __future__ import annotations

import io
from dataclasses import replace

import pytest
from rich.console import Console

from goodhart_prof.report.text.kernel_sequences import kernels_text, per_window, render_kernel_sequences
from tests.support.analyses import analysis_of
from tests.support.table_checks import check, tables

OWLV2 = "tracelens/h100_owlv2_inference.json.gz"


def text(a, width: int) -> list[str]:
    out = io.StringIO()
    render_kernel_sequences(a, Console(file=out, width=width, color_system=None))
    return out.getvalue().splitlines()


@pytest.mark.parametrize("width", [80, 100, 160])
def test_both_tables_fit(width):
    assert check(text(analysis_of(OWLV2), width), width) == 2


def test_the_silu_chain_is_the_first_fusion_candidate():
    a = analysis_of(OWLV2)
    lines = text(a, 200)
    (_, frequent), (heads, fusion) = tables(lines)
    assert len(frequent) == len(a.kernel_sequences.sequences) == 10
    assert lines[1].startswith("Frequent kernel sequences (most GPU time first)")
    assert "4,330 kernels in 1 (rank, iteration) windows" in " ".join(lines)
    first = a.kernel_sequences.fusion[0]
    assert fusion[0][0] == "aten::mul > aten::sigmoid > aten::mul" == first.op_chain
    # n, per iteration (one window: the count), launches fewer: 180 x (3 - 1)
    assert fusion[0][2:4] == ["3", "180"] and fusion[0][6] == "360"
    assert fusion[0][7].endswith("GiB")


def test_no_section_without_sequences():
    a = analysis_of(OWLV2)
    empty = replace(a.kernel_sequences, sequences=(), fusion=())
    assert text(replace(a, kernel_sequences=empty), 100) == []
    assert text(replace(a, kernel_sequences=None), 100) == []


def test_helpers():
    assert per_window(360, 2) == 180.0 and per_window(360, 0) == 360.0 and per_window(None, 2) is None
    s = analysis_of(OWLV2).kernel_sequences.fusion[0]
    assert kernels_text(s) == " > ".join(["vectorized_elementwise_kern…"] * 3)
