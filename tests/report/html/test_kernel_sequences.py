"""report/html/kernel_sequences.py: the HTML section of frequent kernel sequences, on TraceLens's
OWLv2 inference trace (both tables, full names in hover text, escaped) and the sentence when
there is none (a trace without kernels)."""
from __future__ import annotations

import html

from goodhart_prof.report.html.kernel_sequences import KEY, TITLE, kernel_sequences_section
from tests.support.analyses import analysis_of

OWLV2 = "tracelens/h100_owlv2_inference.json.gz"


def test_both_tables_with_full_names_escaped():
    a = analysis_of(OWLV2)
    page = kernel_sequences_section(a)
    assert page.startswith(f'<section id="{KEY}"><h2>{TITLE}</h2>')
    assert page.count("<table") == 2 and page.count("<tr>") == 2 + 10 + len(a.kernel_sequences.fusion)
    top = a.kernel_sequences.sequences[0]
    assert f'title="{html.escape(top.kernels[0], quote=True)}"' in page
    assert "aten::mul &gt; aten::sigmoid &gt; aten::mul" in page
    assert "<" not in top.kernels[0] or top.kernels[0] not in page  # never raw


def test_a_sentence_without_kernels():
    a = analysis_of("ours/loops/step_loop.pt.trace.json.gz")
    assert "No repeated kernel sequence: no kernels in the trace." in kernel_sequences_section(a)
