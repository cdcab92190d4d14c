"""What the HTML report's section modules share (report/html/page.py and the html_* sections):
escaping, plotly layout, small data tables."""
from __future__ import annotations

import html
import textwrap
from typing import Any, Iterable


LAYOUT = dict(template="plotly_white", margin=dict(l=10, r=10, t=40, b=40),
              font=dict(size=12), hoverlabel=dict(align="left"))


def esc(value: Any) -> str:
    """Text from the trace, escaped for the page."""
    return html.escape(str(value), quote=True)


def label(text: str) -> str:
    """Text for a plotly label: entities for &, <, > so plotly.js shows them instead of tags."""
    return html.escape(str(text), quote=False)


def wrap(text: str, width: int = 100) -> str:
    """A long name for a hover box: escaped, cut into lines."""
    return "<br>".join(label(part) for part in textwrap.wrap(str(text), width, break_long_words=True,
                                                              break_on_hyphens=False)[:8])


def data_table(caption: str, headers: Iterable[str], rows: Iterable[Iterable[str]]) -> str:
    """A small HTML table; cells are already escaped or formatted by the caller."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="data"><caption>{esc(caption)}</caption><tr>{head}</tr>{body}</table>'


def go():
    import plotly.graph_objects as graph_objects
    return graph_objects
