"""`goodhart-prof analyze --html`: one self-contained page, every chart read from the tables, safe
text, no clobbering; and in headless Chromium: no JavaScript errors and every figure drawn."""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from goodhart_prof.analysis import analyze
from goodhart_prof.analysis.rules import Finding
from goodhart_prof.analysis.host.syncs import sync_summary
from goodhart_prof.errors import UserError
from goodhart_prof.report.html import page as report
from goodhart_prof.trace.load import load
from tests.support.analyses import analysis_of
from tests.support.helpers import clean_env, error_lines, run_cmd, write_tiny_config
from tests.support.paths import DATA, ROOT

H100 = DATA / "tracelens" / "h100_owlv2_inference.json.gz"
FIGURE_DIV = 'class="plotly-graph-div"'
DOCS_PNG = ROOT / "docs" / "report.png"  # README's picture
DOCS_PNG_SIZE = (1400, 1800)


@pytest.fixture(scope="module")
def gpu_analysis():
    return analysis_of("tracelens/h100_owlv2_inference.json.gz")


@pytest.fixture(scope="module")
def gpu_page(gpu_analysis, tmp_path_factory) -> Path:
    return report.write_html(gpu_analysis, tmp_path_factory.mktemp("gpu") / "report.html")


@pytest.fixture(scope="module")
def cpu_analysis(tmp_path_factory):
    """A CPU-only trace of our own trainer: iterations 1-2 of 3, tiny config."""
    folder = tmp_path_factory.mktemp("cpu_run")
    cfg = write_tiny_config(folder)
    res = run_cmd(["-m", "trainer", "--config", str(cfg), "--total-iterations", "3",
                   "--output-dir", str(folder / "tmp")],
                  env=clean_env(PROF_ENABLED="1", PROF_ITERATIONS="1-2"), cwd=folder)
    assert res.returncode == 0, res.stderr
    return analyze(load(folder / "tmp"))  # the run folder: its one rank trace


@pytest.fixture(scope="module")
def cpu_page(cpu_analysis, tmp_path_factory) -> Path:
    return report.write_html(cpu_analysis, tmp_path_factory.mktemp("cpu") / "report.html")


def plotlyjs_head() -> str:
    from plotly.offline import get_plotlyjs
    return get_plotlyjs()[:400]


# -- the page ---------------------------------------------------------------------------------
def test_gpu_page_is_self_contained_with_every_section(gpu_page, gpu_analysis):
    page = gpu_page.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert page.count(plotlyjs_head()) == 1  # plotly.js inline, exactly once
    assert not re.search(r"<script[^>]*\bsrc=", page) and 'src="http' not in page
    assert "<link " not in page  # no external stylesheets either
    for key, title in report.SECTIONS.items():
        assert (f"<h2>{title}" in page) == (key not in report.OPTIONAL_SECTIONS)  # no compile, no CUPTI
    # categories, kernels, timeline, gaps, 2 sync charts, phases, memory, roofline (the trace has shapes)
    assert page.count(FIGURE_DIV) == 9 and 'id="fig-roofline"' in page
    # header: path, ranks, devices, events; and the GPU table
    assert str(H100) in page and "rank 0 / gpu 0" in page and f"{len(gpu_analysis.trace.events):,}" in page
    assert "52.6%" in page  # utilization 566,759 / 1,078,288
    # findings: each one's severity, rule, title and fix
    for f in gpu_analysis.findings:
        assert f.rule in page and f.fix in page and f.severity.upper() in page
    assert not list(gpu_page.parent.glob(".report.html.*"))  # no temp file left behind


def test_text_from_the_trace_is_escaped(gpu_analysis):
    evil = "</script><script>alert(1)</script>"
    a = dataclasses.replace(
        gpu_analysis,
        phases=gpu_analysis.phases.assign(name=[evil, "ProfilerStep#6"]),
        findings=[Finding("item_logging", "high", f"title {evil}",
                          {"count": 3, "note": "a & b <i>", "sites": [
                              {"site": "<img src=x onerror=alert(2)>", "count": 3, "total_us": 1.5}]},
                          "fix <b>bold</b>")])
    page = report.render_html(a)
    assert "alert(1)</script>" not in page and "<img src=x" not in page and "<b>bold" not in page
    assert "title &lt;/script&gt;&lt;script&gt;alert(1)" in page
    assert "&lt;img src=x onerror=alert(2)&gt;" in page and "a &amp; b &lt;i&gt;" in page
    # inside a figure the name is an entity-escaped plotly label, in JSON that escapes "/" too
    assert "&lt;\\u002fscript&gt;&lt;script&gt;alert(1)" in page


def test_refuses_to_replace_a_file_unless_forced(gpu_analysis, tmp_path):
    target = tmp_path / "old.html"
    target.write_text("keep me")
    with pytest.raises(UserError, match=r"old\.html: already exists \(use --force to replace it\)"):
        report.write_html(gpu_analysis, target)
    assert target.read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.html"]
    report.write_html(gpu_analysis, target, force=True)
    assert target.read_text(encoding="utf-8").count(FIGURE_DIV) == 9


def test_cli_writes_html_beside_the_json_report(tmp_path):
    out = tmp_path / "out.html"
    res = run_cmd(["-m", "goodhart_prof.cli", "analyze", str(H100), "--json", "--html", str(out)])
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["schema"] == "goodhart-prof/analysis/v1"  # stdout stays JSON
    assert out.exists() and out.read_text(encoding="utf-8").count(FIGURE_DIV) == 9
    out.write_text("mine")
    res = run_cmd(["-m", "goodhart_prof.cli", "analyze", str(H100), "--html", str(out)])
    assert res.returncode == 2 and error_lines(res.stderr) == [
        f"Error: {out}: already exists (use --force to replace it)"]
    assert res.stdout == "" and out.read_text() == "mine"  # refused before the work


@pytest.mark.slow
def test_cpu_only_trace_gets_sentences_not_empty_charts(cpu_page, cpu_analysis):
    assert cpu_analysis.gpu.empty and not cpu_analysis.burstiness and cpu_analysis.syncs.total == 0
    assert cpu_analysis.reads.total > 0  # .item() on the CPU: host reads, not sync points
    page = cpu_page.read_text(encoding="utf-8")
    assert "No sync points: this is a CPU-only trace." in page and "would be a sync point" in page
    assert page.count(plotlyjs_head()) == 1
    assert page.count("This trace has no GPU activity") == 1  # one line says so ...
    for key in report.GPU_SECTIONS:  # ... and the GPU sections are left out, navigation too
        assert f'id="{key}"' not in page and f'href="#{key}"' not in page
    assert "none (no GPU activity)" in page
    assert page.count(FIGURE_DIV) == 1  # phases (no sync point to chart; lite mode: no memory)
    assert "No memory events" in page
    assert "ProfilerStep#1" in page and "ProfilerStep#2" in page
    assert "only CPU time is shown" in page


def test_cpu_only_two_rank_page_has_host_sections_and_no_gpu_section():
    """Our trainer on 2 CPU ranks (tests/data/ours): no GPU section, no empty chart, no zero
    column; the hottest host ops and the phases of both ranks instead."""
    a = analyze(load(DATA / "ours" / "cpu_2rank_merged.json.gz"))
    assert a.gpu.empty and a.trace.ranks == [0, 1]
    page = report.render_html(a)
    ids = re.findall(r'<section id="([^"]+)"><h2>', page)
    assert ids == [k for k in report.SECTIONS if k not in report.GPU_SECTIONS + report.OPTIONAL_SECTIONS]
    assert page.count("This trace has no GPU activity") == 1
    rest = re.sub(r'<p class="empty" id="no-gpu">[^<]*</p>', "", page)  # the line naming them
    for title in ("GPU utilization", "Top kernels", "Idle gaps", "Why the GPU idles",
                  "kernel categories</b>", "idle gap classes", "GPU time launched"):
        assert title not in rest
    assert page.count(FIGURE_DIV) == 1  # the phases; the host reads are not sync points
    # the host ops table: the top op by self time, its calls, self and total as the table has them
    top = a.host_ops.iloc[0]
    assert f"<code>{top['name']}</code></td><td>{int(top['calls']):,}</td>" in page
    assert f"{top['self_pct']:.1f}%" in page
    # phases: the median rank's and the slowest rank's CPU time, never their sum
    phases = report.phase_figure(a)
    assert [t.name for t in phases.data] == ["CPU time (median rank)", "CPU time (slowest rank)"]
    steps = a.phases[a.phases["kind"] == "iteration"]
    assert list(phases.data[0].x[:2]) == pytest.approx(list(steps["cpu_us"] / 1e3))
    assert list(phases.data[1].x[:2]) == pytest.approx(list(steps["cpu_max_us"] / 1e3))


def test_no_syncs_and_no_findings_read_as_sentences(gpu_analysis):
    a = dataclasses.replace(gpu_analysis, syncs=sync_summary(gpu_analysis.sync_points.iloc[:0]),
                            findings=[])
    page = report.render_html(a)
    assert "No sync points: the host never waited for the device." in page
    assert "None of the rules fired." in page
    assert page.count(FIGURE_DIV) == 7  # 9 less the two sync charts


# -- a real browser ---------------------------------------------------------------------------
# Attached to the page under test: records uncaught errors and rejected promises on <html>, where
# --dump-dom shows them, and marks that the page finished loading.
PROBE = ("<script>(function(){var d=document.documentElement;function add(m){d.setAttribute("
         "'data-js-errors',(d.getAttribute('data-js-errors')||'')+String(m).slice(0,300)+' | ');}"
         "window.addEventListener('error',function(e){add(e.message||e);});"
         "window.addEventListener('unhandledrejection',function(e){add('unhandled rejection: '+"
         "((e.reason&&e.reason.message)||e.reason));});"
         "window.addEventListener('load',function(){d.setAttribute('data-probe','loaded');});})();"
         "</script>")


def chromium(tmp: Path, name: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp / f'profile-{name}'}", "--virtual-time-budget=5000", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


@pytest.mark.skipif(shutil.which("chromium") is None,
                    reason="chromium is not on PATH (apt-get install -y chromium)")
@pytest.mark.parametrize("which", ["gpu", "cpu"])
def test_page_renders_in_headless_chromium(which, request, tmp_path):
    page = request.getfixturevalue(f"{which}_page")
    source = page.read_text(encoding="utf-8")
    figures = source.count(FIGURE_DIV)
    probed = tmp_path / "probed.html"
    probed.write_text(source.replace("<head>", "<head>" + PROBE, 1), encoding="utf-8")
    shot = tmp_path / f"{which}.png"
    dump = chromium(tmp_path, "dump", "--dump-dom", probed.as_uri())
    screenshot = None
    if which == "gpu":  # one screenshot is enough (and each costs ~1.5 s)
        screenshot = chromium(tmp_path, "shot", f"--screenshot={shot}", "--window-size=1400,4000",
                              page.as_uri())
    # GOODHART_WRITE_SCREENSHOT=1 also refreshes the README's picture (docs/report.png): the top of
    # the same page, drawn by the same browser.
    docs_shot = None
    if which == "gpu" and os.environ.get("GOODHART_WRITE_SCREENSHOT") == "1":
        # the trace's path as a clone shows it (tests/data/...), not this machine's checkout
        shown = tmp_path / "docs_page.html"
        root = str(DOCS_PNG.parent.parent) + "/"
        shown.write_text(page.read_text(encoding="utf-8").replace(root, ""), encoding="utf-8")
        docs_shot = chromium(tmp_path, "docs", f"--screenshot={DOCS_PNG}",
                             f"--window-size={DOCS_PNG_SIZE[0]},{DOCS_PNG_SIZE[1]}", shown.as_uri())
    dom, err = dump.communicate(timeout=90)
    if screenshot is not None:
        screenshot.communicate(timeout=90)
    if docs_shot is not None:
        docs_shot.communicate(timeout=90)
        assert docs_shot.returncode == 0 and png_size(DOCS_PNG) == DOCS_PNG_SIZE
    assert dump.returncode == 0, err[-2000:]
    assert 'data-probe="loaded"' in dom, "the page never finished loading"
    errors = re.search(r'data-js-errors="([^"]*)"', dom)
    assert errors is None, f"JavaScript errors: {errors.group(1)}"
    assert dom.count('class="plot-container plotly"') == figures > 0  # every figure drawn
    assert dom.count('class="main-svg"') >= figures
    if screenshot is not None:
        assert screenshot.returncode == 0 and shot.exists() and png_size(shot) == (1400, 4000)
        assert shot.stat().st_size > 100_000  # charts, not a blank page (white compresses to kBs)


def test_the_idle_table_has_no_python_column_without_frames():
    from goodhart_prof.report.html.page import render_html
    from tests.support.analyses import analysis_of

    page = render_html(analysis_of("hta/mi250_minitoy_rocm.json.gz"))
    idle = page[page.index('<section id="idle">'):page.index("</section>", page.index('<section id="idle">'))]
    assert "<th>host was in</th>" in idle and "mostly in (Python)" not in idle
    page = render_html(analysis_of("tracelens/h100_owlv2_inference.json.gz"))
    idle = page[page.index('<section id="idle">'):page.index("</section>", page.index('<section id="idle">'))]
    assert "<th>mostly in (Python)</th>" in idle and "scipy/ndimage/_interpolation.py(739): zoom" in idle
