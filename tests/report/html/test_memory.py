"""report/html/memory.py: the HTML memory section. The per-device table of the bert-small H100
trace (peaks and allocation counts recomputed from its raw `[memory]` events), the host row
without a reserved figure, allocated/reserved lines per device in MiB, trace text escaped, and
the sentence for a trace without memory events."""
from __future__ import annotations

import dataclasses
import gzip
import json
import re

import pytest

from goodhart_prof.report.html.memory import memory_empty, memory_figure, memory_table_html
from tests.support.analyses import analysis_of
from tests.support.paths import DATA

BERT = "tracelens/h100_bert_small_inference.json.gz"


def raw_gpu_memory() -> dict:
    with gzip.open(DATA / BERT, "rt") as fh:
        args = [e["args"] for e in json.load(fh)["traceEvents"]
                if e.get("name") == "[memory]" and e["args"].get("Device Type") == 1]
    return {"allocated": max(a["Total Allocated"] for a in args), "reserved": max(a["Total Reserved"] for a in args),
            "allocations": sum(a["Bytes"] > 0 for a in args), "events": len(args)}


def row(html: str, label: str) -> list[str]:
    return re.findall(r"<td>(.*?)</td>", re.search(rf"<tr><td>{label}</td>.*?</tr>", html).group(0))


def test_device_table_against_the_raw_events():
    raw = raw_gpu_memory()
    assert (raw["allocated"], raw["reserved"], raw["allocations"]) == (101_305_344, 121_634_816, 109)
    html = memory_table_html(analysis_of(BERT))
    assert row(html, "rank0/gpu0") == [
        "rank0/gpu0", f"{raw['allocated'] / 2**20:.1f} MiB", f"{raw['reserved'] / 2**20:.1f} MiB",
        f"{raw['reserved'] / raw['allocated']:.2f}x", f"{raw['allocations']}", "-", "1"]
    assert row(html, "rank0/host")[1:4] == ["16 B", "n/a (host: no caching allocator)", "-"]
    assert "Allocations inside iterations by phase and op" in html
    assert "process&#x27;s RSS" in html  # captions escaped too


def test_figure_lines_in_mib():
    fig = memory_figure(analysis_of(BERT))
    raw = raw_gpu_memory()
    lines = {t.name: t for t in fig.data}
    assert set(lines) == {"rank0/host allocated", "rank0/gpu0 allocated", "rank0/gpu0 reserved"}  # host: no reserved
    assert len(lines["rank0/gpu0 allocated"].x) == raw["events"]
    assert max(lines["rank0/gpu0 allocated"].y) == pytest.approx(raw["allocated"] / 2**20)
    assert max(lines["rank0/gpu0 reserved"].y) == pytest.approx(raw["reserved"] / 2**20)
    assert lines["rank0/gpu0 allocated"].x[0] >= 0  # seconds from the first memory event


def test_op_names_from_the_trace_are_escaped():
    a = analysis_of(BERT)
    sites = a.memory.sites.copy()
    sites.loc[sites.index[0], "op"] = "<script>x</script>"
    html = memory_table_html(dataclasses.replace(a, memory=dataclasses.replace(a.memory, sites=sites)))
    assert "<script>" not in html and "&lt;script&gt;x&lt;/script&gt;" in html


def test_without_memory_events_a_sentence():
    a = analysis_of("hta/mi250_minitoy_rocm.json.gz")
    assert memory_figure(a) is None and memory_table_html(a) is None
    assert memory_empty(a).startswith("No memory events: record them with ")
