"""End to end: `python -m trainer` and `goodhart-prof run` on the CPU with a tiny config."""
from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

from goodhart_prof.capture.hooks import PHASES, ProfSettings
from tests.support.helpers import (clean_env, error_lines, read_trace, run_cmd, step_labels, write_tiny_config)
from trainer.config import build_config
from trainer.env import GoodhartGridWorld
from trainer.train import train

pytestmark = pytest.mark.slow


def test_profiling_off_writes_no_trace(tmp_path):
    cfg = write_tiny_config(tmp_path)
    out = tmp_path / "out"
    res = run_cmd(["-m", "trainer", "--config", str(cfg), "--total-iterations", "4",
                   "--output-dir", str(out)])
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in out.iterdir()) == ["metrics.jsonl", "run.json"]
    record = json.loads((out / "run.json").read_text())
    assert record["profiling"]["enabled"] is False and record["merged_trace"] is None
    assert record["iterations_run"] == 4 and record["env_steps"] == 4 * 16 * 8
    assert record["env_steps_per_s"] > 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0, 1, 2, 3]
    assert {"env_steps_per_s", "proxy_return", "true_return", "goodhart_gap", "loss"} <= set(rows[0])


def test_run_traces_iterations_50_to_55(tmp_path):
    cfg = write_tiny_config(tmp_path)
    root = tmp_path / "traces"
    res = run_cmd(["-m", "goodhart_prof.cli", "run", "--iterations", "50-55", "--config", str(cfg),
                   "--output-dir", str(root)])
    assert res.returncode == 0, res.stderr
    (out,) = [p for p in root.iterdir() if p.name != "latest"]  # the run's own folder, a timestamp
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d", out.name), out.name
    assert (root / "latest").resolve() == out.resolve()
    assert {"rank-0.pt.trace.json.gz", "run.json"} <= {p.name for p in out.iterdir()}
    assert not (out / "merged_trace.json").exists()  # one rank: its rank file is the run's trace
    events = read_trace(out / "rank-0.pt.trace.json.gz")["traceEvents"]
    assert step_labels(events) == [f"ProfilerStep#{i}" for i in range(50, 56)]
    annotations = {e["name"] for e in events if e.get("cat") == "user_annotation"}
    assert set(PHASES) <= annotations
    # Each traced iteration holds one rollout with rollout_steps env steps inside it.
    assert sum(e["name"] == "env_step" for e in events if e.get("ph") == "X") == 6 * 8
    record = json.loads((out / "run.json").read_text())
    assert record["iterations_run"] == 57  # --total-iterations defaults to last traced + 2 in lite (attribution/)
    assert record["profiling"]["iterations_traced"] == list(range(50, 56))
    assert record["torch_version"] == torch.__version__
    assert record["merged_trace"] is None
    assert record["traces"] == {"0": str(out / "rank-0.pt.trace.json.gz")}
    assert f"| trace: {out / 'rank-0.pt.trace.json.gz'} |" in res.stdout
    assert (record["run_dir"], record["run_name"]) == (str(out), out.name)
    assert f"| run folder: {out} (run.json)" in res.stdout
    assert record["env_steps_per_s"] > 0


def test_a_one_rank_run_folder_is_read_from_its_rank_trace(tmp_path):
    """A one-rank run writes no merged copy of its trace (issue 35 item 13: 4.4 of the 4.9 MB of
    an A/B run folder); analyze reads the folder, and `latest`, from the rank file."""
    cfg = write_tiny_config(tmp_path)
    root = tmp_path / "traces"
    res = run_cmd(["-m", "goodhart_prof.cli", "run", "--iterations", "2-3", "--config", str(cfg),
                   "--output-dir", str(root), "--name", "one"])
    assert res.returncode == 0, res.stderr
    out = root / "one"
    assert sorted(p.name for p in out.iterdir() if p.is_file()) == [
        "metrics.jsonl", "rank-0.pt.trace.json.gz", "run.json"]
    for path, env in ((out, clean_env()), (None, clean_env(PROF_OUTPUT_DIR=str(root)))):
        res = run_cmd(["-m", "goodhart_prof.cli", "analyze", "--json", *([str(path)] if path else [])], env=env)
        assert res.returncode == 0, res.stderr
        doc = json.loads(res.stdout)
        assert doc["trace"]["paths"] == [str(out / "rank-0.pt.trace.json.gz")]
        assert (doc["trace"]["ranks"], doc["iterations"]["count"]) == ([0], 2)  # ProfilerStep#2, #3


@pytest.mark.parametrize("value", ["55-50", "abc", "-3"])
def test_bad_iterations_is_one_line_usage_error(tmp_path, value):
    res = run_cmd(["-m", "goodhart_prof.cli", "run", "--iterations", value, "--output-dir",
                   str(tmp_path / "never")])
    assert res.returncode == 2
    lines = error_lines(res.stderr)
    assert len(lines) == 1 and lines[0].startswith("Error: --iterations") and value in lines[0]
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "never").exists()


def test_interrupted_run_leaves_no_truncated_trace(tmp_path):
    cfg = write_tiny_config(tmp_path)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "trainer", "--config", str(cfg),
                             "--total-iterations", "400", "--output-dir", str(out)],
                            env=clean_env(PROF_ENABLED="1", PROF_ITERATIONS="3-390"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics = out / "metrics.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline:  # wait until the traced window is under way
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 8:
            break
        time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail("trainer did not reach iteration 8")
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert "Traceback" not in stderr
    leftovers = [p.name for p in out.iterdir()]
    assert not [n for n in leftovers if n.endswith((".gz", ".tmp")) or ".tmp" in n], leftovers
    assert "merged_trace.json" not in leftovers


def _ckpt_params(path):
    return torch.load(path, weights_only=False)["policy"]


def test_checkpoint_resume_is_bit_identical(tmp_path):
    cfg = write_tiny_config(tmp_path)
    straight, split = tmp_path / "straight", tmp_path / "split"
    base = ["-m", "trainer", "--config", str(cfg), "--checkpoint-every", "3", "--seed", "5"]
    assert run_cmd(base + ["--total-iterations", "6", "--output-dir", str(straight)]).returncode == 0
    assert run_cmd(base + ["--total-iterations", "3", "--output-dir", str(split)]).returncode == 0
    # As a run killed after its checkpoint at 3 leaves it (no run.json): a finished run is not
    # resumed (issue 32 item 1: resuming would train again over what it recorded).
    (split / "run.json").unlink()
    # Resume with profiling on: ProfilerStep labels must still equal the training iteration.
    res = run_cmd(base + ["--total-iterations", "6", "--output-dir", str(split), "--resume"],
                  env=clean_env(PROF_ENABLED="1", PROF_ITERATIONS="4"))
    assert res.returncode == 0, res.stderr
    a, b = _ckpt_params(straight / "checkpoint-rank0.pt"), _ckpt_params(split / "checkpoint-rank0.pt")
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    assert torch.load(split / "checkpoint-rank0.pt", weights_only=False)["iteration"] == 6
    assert step_labels(read_trace(split / "rank-0.pt.trace.json.gz")["traceEvents"]) == ["ProfilerStep#4"]


def test_two_ranks_on_cpu_merge_into_one_trace(tmp_path):
    cfg = write_tiny_config(tmp_path)
    out = tmp_path / "out" / "two"
    res = run_cmd(["-m", "goodhart_prof.cli", "run", "--iterations", "2-3", "--nproc", "2",
                   "--config", str(cfg), "--output-dir", str(out.parent), "--name", out.name])
    assert res.returncode == 0, res.stderr
    for rank in (0, 1):
        doc = read_trace(out / f"rank-{rank}.pt.trace.json.gz")
        assert doc["distributedInfo"]["rank"] == rank and doc["distributedInfo"]["backend"] == "gloo"
    merged = read_trace(out / "merged_trace.json")
    events = merged["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert names == {0: "rank 0", 1: "rank 1"}
    for rank in (0, 1):
        assert step_labels(events, pid=rank) == ["ProfilerStep#2", "ProfilerStep#3"]
    # DDP's gradient all-reduce ran on both ranks inside the traced iterations.
    for rank in (0, 1):
        assert any("allreduce" in e.get("name", "").lower() for e in events if e.get("pid") == rank)
    record = json.loads((out / "run.json").read_text())
    assert record["world_size"] == 2 and record["env_steps"] == 2 * 5 * 16 * 8  # iterations 0-4 (4: attribution/)
    assert record["merged_trace"] == str(out / "merged_trace.json")  # several ranks: merged as before


def _random_policy_true_return(cfg, steps: int) -> float:
    torch.manual_seed(123)
    env = GoodhartGridWorld.from_config(cfg, "cpu", torch.float32)
    state, _ = env.reset()
    for _ in range(steps):
        state = env.step(state, torch.randint(0, 5, (cfg.n_envs,))).state
    episodes, _, true_sum, _ = state.stats.tolist()
    return true_sum / episodes


def test_trainer_learns_true_return_beats_random(tmp_path):
    cfg = build_config(None, device="cpu", total_iterations=20, output_dir=str(tmp_path),
                       progress=False, seed=3)
    result = train(cfg, ProfSettings())
    learned = sum(r["true_return"] for r in result.rows[-3:]) / 3
    proxy = sum(r["proxy_return"] for r in result.rows[-3:]) / 3
    random_true = _random_policy_true_return(cfg, 4 * cfg.max_episode_steps)
    assert learned > 3 * max(random_true, 0.1), (learned, random_true)
    assert proxy > learned  # the Goodhart gap: decoys pay the proxy, not the truth


def test_summary_line_names_outputs(tmp_path):
    cfg = write_tiny_config(tmp_path)
    res = run_cmd(["-m", "trainer", "--config", str(cfg), "--total-iterations", "2",
                   "--output-dir", str(tmp_path / "o")])
    assert res.returncode == 0
    assert re.search(r"trained 2 iterations \(256 env-steps\) on 1 rank\(s\), cpu \| [\d,]+ env-steps/s",
                     res.stdout)
