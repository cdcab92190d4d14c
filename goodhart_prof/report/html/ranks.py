"""The HTML report's "Ranks and communication" section: collectives per rank, where they are
called from, each rank's step side by side, and who arrived late at which collective."""
from __future__ import annotations

from typing import Callable

import pandas as pd

from ..common import capped, more_rows
from .common import LAYOUT, data_table, esc, go, label
from ...units import device_text, duration_sig
from ..text.communication import communication_notes, rate, size

KEY = "ranks"
TITLE = "Ranks and communication"
TOP_SITES = 10
RANK_COLORS = {"compute_us": "#43a047", "comm_us": "#8c564b", "exposed_us": "#d62728",
               "wait_us": "#ff7f0e"}
RANK_LABELS = {"compute_us": "compute", "comm_us": "communication", "exposed_us": "exposed",
               "wait_us": "waiting for a later rank"}


def ranks_section(a, figure: Callable) -> str:
    """The whole <section>; `figure(fig, name)` embeds a plotly figure (html.py's page)."""
    comm, ranks = a.communication, a.ranks
    if comm is None or comm.overlap.empty:
        return (f'<section id="{KEY}"><h2>{esc(TITLE)}</h2><p class="empty">No communication '
                f'kernels (NCCL/RCCL): a single-GPU trace, or one without collectives.</p></section>')
    parts = [_collectives_table(comm), _sites_table(comm)]
    if ranks is not None and not ranks.ranks.empty:
        parts.append(figure(rank_figure(ranks), "ranks") or "")
        if ranks.reason is None and not ranks.iterations.empty:
            parts.append(figure(arrival_figure(ranks), "arrivals") or "")
        else:
            parts.append(f'<p class="note">Arrivals at collectives: not judged: {esc(ranks.reason)}</p>')
    body = "".join(f'<div class="figure">{p}</div>' for p in parts if p)
    return f'<section id="{KEY}"><h2>{esc(TITLE)}</h2>{body}</section>'


def _collectives_table(comm) -> str:
    c = comm.collectives
    waits = c["wait_us"].notna().any()
    rows = [(device_text(r.rank, r.device), esc(r.kind), f"{int(r.count):,}", duration_sig(r.total_us),
             esc(size(r.bytes, r.sized_count, r.count)), esc(rate(r.algbw_gbps)), esc(rate(r.busbw_gbps)),
             "-" if pd.isna(r.group_size) else f"{int(r.group_size)}",
             *((duration_sig(r.wait_us) if pd.notna(r.wait_us) else "-", esc(rate(r.arrived_busbw_gbps)))
               if waits else ()))
            for r in c.itertuples()]
    heads = ("rank/device", "collective", "count", "kernel time", "bytes", "algbw", "busbw", "n",
             *(("waiting", "busbw once all arrived") if waits else ()))
    notes = "".join(f'<p class="note">{esc(n)}</p>' for n in communication_notes(c))
    return data_table("Collectives per rank", heads, rows) + notes


def _sites_table(comm) -> str:
    if comm.sites.empty:
        return ""
    rows = [(esc(r.kind), f"{int(r.count):,}", duration_sig(r.total_us), f"<code>{esc(r.site)}</code>")
            for r in comm.sites.head(TOP_SITES).itertuples()]
    return data_table("Where the collectives are called from (all ranks)",
                      ("collective", "count", "kernel time", "site"), rows)


def _means(ranks) -> pd.DataFrame:
    table = ranks.ranks
    if table["step_us"].notna().any():
        table = table[table["step_us"].notna()]
    return table.groupby("rank")[["step_us", "compute_us", "comm_us", "exposed_us", "wait_us"]].mean()


def rank_figure(ranks):
    """Per rank, mean per traced iteration: compute, communication, its exposed part and the
    waiting for later ranks, with the step time as a marker."""
    means = _means(ranks)
    if means.empty:
        return None
    total = len(means)  # a bar per rank: past ROW_LIMIT ranks only the slowest
    means = means.iloc[capped(means["step_us"].fillna(means["compute_us"] + means["comm_us"]).to_numpy(float))]
    more = more_rows(total, len(means), "ranks", "longest steps")
    graph = go()
    y = [f"rank {r}" for r in means.index]
    columns = ["compute_us", "comm_us", "exposed_us"] + (["wait_us"] if ranks.reason is None else [])
    fig = graph.Figure([graph.Bar(x=means[c] / 1e3, y=y, orientation="h", name=RANK_LABELS[c],
                                  marker_color=RANK_COLORS[c],
                                  hovertemplate="%{y}: %{x:,.3f} ms " + RANK_LABELS[c] + "<extra></extra>")
                        for c in columns])
    if means["step_us"].notna().any():
        fig.add_trace(graph.Scatter(x=means["step_us"] / 1e3, y=y, mode="markers", name="step",
                                    marker=dict(symbol="line-ns-open", size=18, color="#212121"),
                                    hovertemplate="%{y}: step %{x:,.3f} ms<extra></extra>"))
    fig.update_layout(**LAYOUT, barmode="group", height=140 + 70 * len(y),
                      title="Each rank's iteration (mean per traced iteration, ms)"
                      + (f"<br><sub>{more}</sub>" if more else ""), xaxis_title="ms")
    return fig


def arrival_figure(ranks):
    """Arrival at each collective of the iteration where the others waited longest: how long
    after the first rank each rank got there (ms); the latest is the one the others wait for."""
    it = ranks.iterations.sort_values("caused_wait_us").iloc[-1]
    arr = ranks.arrivals[ranks.arrivals["iteration"] == it["iteration"]]
    grid = arr.pivot_table(index="rank", columns="seq", values="arrival_us", aggfunc="first")
    kinds = arr.drop_duplicates("seq").set_index("seq")["kind"]
    x = [label(f"#{s} {kinds[s]}") for s in grid.columns]
    graph = go()
    fig = graph.Figure(graph.Heatmap(
        z=grid.to_numpy(float) / 1e3, x=x, y=[f"rank {r}" for r in grid.index], colorscale="Reds",
        colorbar=dict(title="ms late"),
        hovertemplate="%{y} at %{x}: %{z:,.3f} ms after the first rank<extra></extra>"))
    when = f"iteration {int(it['iteration'])}" if it["iteration"] >= 0 else "the whole trace"
    fig.update_layout(**LAYOUT, height=160 + 30 * len(grid),
                      title=f"Arrival at each collective, {when}: rank {int(it['slowest_rank'])} "
                            f"kept the others waiting {duration_sig(it['caused_wait_us'])}")
    return fig

