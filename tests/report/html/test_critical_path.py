"""report/html/critical_path.py: the HTML critical path section. HTA's simple_add trace (no
iterations: the whole trace; host-bound; 41.435 s of a 41.602 s window, the same figures as the
text section and HTA's own output), the path recomputed without each name, a GPU-bound replay's
kernel names escaped and shortened, and the sentence for a rank with GPU work but no path."""
from __future__ import annotations

import re

from goodhart_prof.report.html.critical_path import critical_path_section
from tests.support.analyses import analysis_of

SIMPLE_ADD = "hta/critical_path_simple_add.json.gz"


def row(html: str, name: str) -> list[str]:
    """The cells of the table row whose first cell holds `name`."""
    found = re.search(rf"<tr><td><code[^>]*>{re.escape(name)}</code></td>.*?</tr>", html)
    return re.findall(r"<td>(.*?)</td>", found.group(0))[1:]


def test_simple_add_section_has_the_text_figures():
    html = critical_path_section(analysis_of(SIMPLE_ADD))
    assert html.startswith('<section id="critical"><h2>Critical path</h2>')
    assert "Rank 0, the whole trace: no iterations found" in html
    assert "<b>41.435 s of 41.602 s</b>" in html
    assert "host 99.9% (ops 41.394 s, launch waits 1.572 ms), GPU 0.1%" in html
    assert "<b>host-bound</b>" in html
    # the top name: 24.587 s of the path (59.3%) in 6 calls; without it the path is 16.848 s
    assert row(html, "cudaDeviceGetStreamPriorityRange") == ["host", "24.587 s", "59.3%", "6", "16.848 s"]
    assert row(html, "cudaFree") == ["host", "8.310 s", "20.1%", "15", "33.125 s"]
    assert row(html, "Memcpy HtoD (Pageable -&gt; Device)")[:4] == ["gpu", "39.080 ms", "0.1%", "16"]
    assert html.count("<tr><td><code") == 10  # the 10 names holding most of the path
    assert "Segments (10 longest of 35, in time order)" in html
    # the longest segment: 23.418 ms into the window to 25.138 s, 25.112 s on the path
    assert "<tr><td>23.418 ms</td><td>25.138 s</td><td>25.112 s</td><td>host-bound</td></tr>" in html


def test_gpu_bound_replay_names_kernels_short_and_escaped():
    html = critical_path_section(analysis_of("tracelens/vllm_decode_full_graph.json.gz"))
    assert "GPU-bound</b>" in html and "host 0.0%" in html
    sides = re.findall(r"</code></td><td>(host|gpu)</td>", html)
    assert sides and set(sides) == {"gpu"}
    assert "Segments (" not in html  # one segment: no table


def test_a_rank_without_a_path_says_why():
    html = critical_path_section(analysis_of("hta/mi250_minitoy_rocm.json.gz"))
    assert '<p class="empty">No critical path (rank 0): no host work in the window.</p>' in html
