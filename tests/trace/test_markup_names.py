"""Names from a trace that look like rich markup (`[param|cuda]`, `[/x]`, `[bold]`) are printed as
they are by `analyze`'s text report: in tables, in sites, in findings and in lines of prose."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.events import X
from tests.support.helpers import clean_env, item_sync_events
from tests.support.paths import ROOT



def bracket_trace(path: Path) -> Path:
    """A kernel, an op, a record_function and a Python frame whose names hold square brackets,
    around one `.item()` sync (its site is the record_function's chain) and one GPU."""
    events = [
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}},
        X("ProfilerStep#1", "user_annotation", 0, 2000),
        X("/tmp/m[param|cuda]/train.py(42): step", "python_function", 10, 370,
          **{"Python id": 1, "Python parent id": None}),
        X("aten::mm[param|cuda]", "cpu_op", 20, 50, **{"External id": 1}),
        X("cudaLaunchKernel", "cuda_runtime", 22, 5, correlation=7, **{"External id": 1}),
        X("gemm[param|cuda]", "kernel", 30, 300, pid=0, tid=7, device=0, stream=7, correlation=7),
        X("[param|cuda]", "user_annotation", 390, 70),
    ] + item_sync_events()
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_bracketed_names_print_verbatim(tmp_path):
    trace = bracket_trace(tmp_path / "t[bold].json")
    res = subprocess.run([sys.executable, "-m", "goodhart_prof.cli", "analyze", str(trace)],
                         capture_output=True, text=True, timeout=120, env=clean_env(COLUMNS="250"), cwd=ROOT)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    lines = out.splitlines()
    assert "t[bold].json" in lines[0]
    kernel_rows = [ln for ln in lines if ln.startswith("gemm[param|cuda] ")]
    assert kernel_rows and "│ gemm" in kernel_rows[0]  # the kernels table's name cell
    assert any(ln.startswith("aten::mm[param|cuda] ") for ln in lines)  # host ops table
    site_rows = [ln for ln in lines if "│ item │" in ln]
    assert site_rows and site_rows[0].startswith("[param|cuda] > aten::item"), site_rows
    assert "/tmp/m[param|cuda]/train.py(42): step" in out  # why the GPU idles: the host's frame
    assert "one kernel, gemm[param|cuda], takes" in out and "launched by aten::mm[param|cuda]" in out
