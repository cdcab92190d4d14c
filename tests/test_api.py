"""`goodhart_prof.analyze(path)`: one call for notebooks, the same figures and JSON as the CLI."""
from __future__ import annotations

import json
import subprocess
import sys

import goodhart_prof
from goodhart_prof.analysis import analyze
from goodhart_prof.report.json_report import to_document
from goodhart_prof.trace.load import load
from tests.support.paths import DATA

V100 = DATA / "hta" / "v100_ddp_rank1.json.gz"


def test_one_call_gives_the_analysis_and_the_cli_json():
    a = goodhart_prof.analyze(V100)
    assert type(a).__name__ == "Analysis" and len(a.kernels) == 51
    assert {f.rule for f in a.findings} >= {"exposed_communication", "low_utilization"}
    expected = to_document(analyze(load(V100, progress=False)), 5)
    got = a.to_json(5)
    for doc in (got, expected):
        doc["trace"].pop("load")  # what this load cost: time and RSS differ run to run
        stages = doc.pop("timing")  # so do the stages' times
        assert set(stages["analysis_s"]) == {"sync_points", "phases", "gpu_time", "kernels", "burstiness",
                                             "memory", "efficiency", "host_ops", "ranks", "communication",
                                             "critical_path", "kernel_sequences", "compile", "cupti", "rules"}
        assert stages["load_s"] > 0 and stages["report_s"] > 0
        assert abs(stages["analysis_total_s"] - sum(stages["analysis_s"].values())) < 1e-3
    assert json.dumps(got, sort_keys=True) == json.dumps(expected, sort_keys=True)


def test_narrowed_to_a_rank_and_the_package_import_stays_light():
    a = goodhart_prof.analyze(V100, rank=1, device=1)
    assert a.trace.ranks == [1] and set(a.gpu["device"]) == {1}
    code = "import sys, goodhart_prof; print(sorted(m for m in ('pandas', 'torch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stderr
