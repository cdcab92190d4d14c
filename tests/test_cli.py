"""`goodhart-prof analyze` end to end: every real trace, JSON schema v1, narrowing, broken input."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tests.support.helpers import clean_env, error_lines, run_cmd
from tests.support.paths import DATA, ROOT

SHARED = DATA  # copies of ../shared/traces (tests/data/SOURCES.md)
REQUIRED = {"schema", "trace", "gpu", "kernels", "categories", "sync_points", "burstiness", "phases",
            "findings"}


def shared_inputs() -> list[Path]:
    if not SHARED.exists():
        return []
    files = sorted(p for p in SHARED.rglob("*.json.gz") if "ours" not in p.relative_to(SHARED).parts)
    return files + [SHARED / "param" / "dlrm_8rank", SHARED / "hta" / "sampled_128rank"]


def analyze_json(path: Path, *extra: str) -> dict:
    res = run_cmd(["-m", "goodhart_prof.cli", "analyze", str(path), "--json", *extra])
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


@pytest.mark.parametrize("path", shared_inputs(), ids=lambda p: p.name)
def test_every_shared_trace_analyzes(path):
    doc = analyze_json(path)
    assert REQUIRED <= set(doc) and doc["schema"] == "goodhart-prof/analysis/v1"
    assert doc["trace"]["events"] > 0
    if not doc["trace"]["devices"]:  # GPUs listed or launched on, but no GPU activity recorded
        missing = doc["gpu_not_recorded"]
        assert missing["launch_calls"] > 0 or missing["listed_gpus"] > 0, missing
        assert missing["note"].startswith("GPU activity was not recorded")
        assert doc["gpu"] == {} and doc["kernels"] == [] and doc["categories"] == []
        return
    assert doc["gpu_not_recorded"] is None
    for key, gpu in doc["gpu"].items():
        assert 0 < gpu["busy_us"] <= gpu["span_us"] + 1e-6
        assert gpu["idle_us"] == pytest.approx(gpu["span_us"] - gpu["busy_us"], abs=1e-3)
        assert 0 < gpu["utilization"] <= 1
        assert key in doc["burstiness"]
    assert doc["kernels"] and doc["kernels"][0]["total_us"] >= doc["kernels"][-1]["total_us"]
    assert sum(c["pct"] for c in doc["categories"]) == pytest.approx(100, abs=0.01)
    assert doc["sync_points"]["total"] == sum(doc["sync_points"]["by_kind"].values())
    for finding in doc["findings"]:
        assert {"rule", "severity", "evidence", "fix"} <= set(finding)


def test_eight_rank_folder_and_narrowing():
    folder = SHARED / "param" / "dlrm_8rank"
    if not folder.exists():
        pytest.skip(f"{folder} not present (shared traces live beside the repository)")
    doc = analyze_json(folder)
    assert doc["trace"]["ranks"] == list(range(8)) and doc["trace"]["rank_source"] == "distributedInfo"
    assert len(doc["gpu"]) == 8
    one = analyze_json(folder, "--rank", "3")
    assert one["trace"]["ranks"] == [3] and list(one["gpu"]) == ["rank3/gpu3"]
    assert one["gpu"]["rank3/gpu3"] == doc["gpu"]["rank3/gpu3"]
    top = analyze_json(folder, "--top", "2")
    assert len(top["kernels"]) == 2
    res = run_cmd(["-m", "goodhart_prof.cli", "analyze", str(folder), "--rank", "9"])
    assert res.returncode == 2 and "no rank 9" in res.stderr


def test_text_report_and_seed_script_agree():
    path = DATA / "tracelens" / "h100_owlv2_inference.json.gz"
    if not path.exists():
        path = SHARED / "tracelens" / "h100_owlv2_inference.json.gz"
    cli = run_cmd(["-m", "goodhart_prof.cli", "analyze", str(path)])
    script = run_cmd([str(ROOT / "scripts" / "analyze_trace.py"), str(path)])
    assert cli.returncode == 0 and script.returncode == 0, script.stderr
    assert cli.stdout == script.stdout
    for section in ("GPU time", "GPU kernels by total time", "Kernel categories", "Sync points",
                    "Burstiness", "Phases", "Findings"):
        assert section in cli.stdout
    assert "566.759 ms" in cli.stdout and "1.078 s" in cli.stdout  # busy and span


def _broken_inputs(tmp: Path) -> dict[str, Path]:
    good = json.dumps({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7,
                                        "ts": 1, "dur": 2}]})
    cases = {
        "empty": b"",
        "whitespace": b"  \n\t ",
        "truncated": good[: len(good) // 2].encode(),
        "not_json": b"this is not json",
        "list": b"[1, 2, 3]",
        "no_events": b'{"schemaVersion": 1}',
        "events_not_list": b'{"traceEvents": 3}',
        "truncated_gzip": gzip.compress(good.encode())[:30],
    }
    paths = {}
    for name, data in cases.items():
        paths[name] = tmp / (name + (".json.gz" if "gzip" in name else ".json"))
        paths[name].write_bytes(data)
    paths["missing"] = tmp / "does_not_exist.json"
    empty_dir = tmp / "empty_dir"
    empty_dir.mkdir()
    paths["empty_dir"] = empty_dir
    return paths


def test_broken_input_is_one_line_error_exit_2(tmp_path):
    for case, path in _broken_inputs(tmp_path).items():
        res = run_cmd(["-m", "goodhart_prof.cli", "analyze", str(path)])
        lines = error_lines(res.stderr)
        assert res.returncode == 2, (case, res.stderr)
        assert len(lines) == 1 and str(path) in lines[0], (case, res.stderr)
        assert "Traceback" not in res.stderr


def test_hta_flag_without_hta_is_a_clear_message(tmp_path):
    # Shadow any installed HTA with a package whose import fails, as on a machine without it.
    shadow = tmp_path / "shadow" / "hta"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named hta')\n")
    path = DATA / "hta" / "mi250_minitoy_rocm.json.gz"
    if not path.exists():
        path = SHARED / "hta" / "mi250_minitoy_rocm.json.gz"
    env = clean_env(PYTHONPATH=str(shadow.parent))
    res = run_cmd(["-m", "goodhart_prof.cli", "analyze", str(path), "--hta"], env=env)
    assert res.returncode == 2 and "pip install -e '.[hta]'" in res.stderr
    assert len(error_lines(res.stderr)) == 1 and "Traceback" not in res.stderr


def test_analyze_and_diff_declare_their_shared_options_alike():
    from click.testing import CliRunner

    from goodhart_prof.cli import cli
    helps = {cmd: CliRunner().invoke(cli, [cmd, "--help"], terminal_width=200).output for cmd in ("analyze", "diff")}
    for text in helps.values():
        assert "--html FILE" in text and "--force  " in text and "Replace an existing --html file." in text
        assert "[default: 15; x>=1]" in text
    assert "Print the goodhart-prof/analysis/v1 JSON document." in helps["analyze"]
    assert "Print the goodhart-prof/diff/v1 JSON document." in helps["diff"]
    assert "Also write a self-contained page with A-vs-B charts to FILE." in helps["diff"]
    assert "Also write a self-contained HTML report (plotly charts) to FILE." in helps["analyze"]
    export = CliRunner().invoke(cli, ["export", "--help"], terminal_width=200).output
    assert "Replace OUTPUT if it exists." in export
