"""report/html/common.py: what the HTML sections share. Trace text escaped for the page and for
plotly labels, long names wrapped for hover boxes (at most 8 lines), small data tables whose
caption and headers are escaped and whose cells are the caller's."""
from __future__ import annotations

from goodhart_prof.report.html.common import data_table, esc, label, wrap


def test_esc_and_label():
    assert esc('<a href="x">&') == "&lt;a href=&quot;x&quot;&gt;&amp;"
    assert esc(12.5) == "12.5"
    assert label('<b>"x"&') == '&lt;b&gt;"x"&amp;'  # quotes stay: plotly shows them as they are


def test_wrap_cuts_long_names_into_escaped_lines():
    assert wrap("void k<int>(float)", 100) == "void k&lt;int&gt;(float)"
    lines = wrap("a" * 250, 100).split("<br>")
    assert [len(x) for x in lines] == [100, 100, 50]
    assert len(wrap("word " * 400, 10).split("<br>")) == 8  # a hover box stays short


def test_data_table_escapes_caption_and_headers_not_cells():
    table = data_table("cap <1>", ["h&", "v"], [["<code>x</code>", "1"], ["y", "2"]])
    assert table == ('<table class="data"><caption>cap &lt;1&gt;</caption><tr><th>h&amp;</th><th>v</th></tr>'
                     "<tr><td><code>x</code></td><td>1</td></tr><tr><td>y</td><td>2</td></tr></table>")
    assert data_table("empty", ["a"], []).endswith("<tr><th>a</th></tr></table>")
