"""The anti-pattern zoo: each planted slowdown is found by the rule of the same name, nothing else fires.

CPU-detectable patterns are recorded here (`goodhart-prof run --inject NAME --mode full` on the
tiny config, all runs started at once); the CUDA-only rules are checked on real GPU traces from
other people's runs and on hand-built ones, since no GPU recording of our trainer exists yet.
"""
from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
import weakref
from pathlib import Path

import pytest
import torch

from goodhart_prof.analysis import analyze
from goodhart_prof.analysis.rules import BY_ID, ZOO_RULES

UNFUSED_KERNELS_PER_STEP = BY_ID["unfused_adam"].limit("kernels_per_step")
from goodhart_prof.trace.load import load
from tests.support.helpers import clean_env, error_lines, run_cmd, write_tiny_config
from tests.support.events import ann, kernel, load_events, memcpy, op, rt
from tests.support.paths import DATA, ROOT
from trainer import antipatterns, zoo
from trainer.config import ConfigError, build_config
from trainer.ppo import clip_grad_norm_no_sync
from trainer.train import Trainer

SHARED = DATA  # copies of ../shared/traces (tests/data/SOURCES.md)
PLANTED = Path(antipatterns.__file__).resolve()

# Tiny config: 8 env steps per rollout, 1 epoch x 2 minibatches; two traced iterations.
STEPS, MINIBATCHES = 8, 2
# What each pattern does per iteration, from the planted code, and a piece of its planted line.
EXPECTED = {
    "item_logging": (STEPS, ".item()"),                      # one read per env step
    "cpu_alloc": (STEPS, "torch.zeros(n_envs).to(device)"),  # one buffer per env step
    # 3 checks per forward: one per step (acting, and valuing the previous step's truncated
    # final states in the same batch), the last value, one per minibatch
    "nan_checks": (3 * (STEPS + 1 + MINIBATCHES), "torch.where("),
    "sync_grad_clip": (MINIBATCHES, "total_norm.item()"),    # one read per optimizer step
    "branchy_value_head": (MINIBATCHES, "if returns.std() > 0"),  # one branch per minibatch
    "pageable_htod": (STEPS, "torch.from_numpy(obs).to("),   # one host-built obs per env step
}
# memory_growth's evidence is growth across iterations, not a count per iteration at a site: its
# run traces three iterations (the rule needs them), and test_planted_memory_growth checks it.
GROWTH = "memory_growth"
# graph_break compiles the trainer (about a minute on the CPU): judged on its recording in
# tests/data/ours/zoo/graph_break (SOURCES.md) rather than recorded again here.
BREAK = "graph_break"
assert set(EXPECTED) | {GROWTH, BREAK} == zoo.CPU_DETECTABLE
WINDOW = {"clean": "2-4", GROWTH: "2-4"}  # the clean run is judged by memory_growth too


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> dict[str, Path]:
    """Trace folders of a clean run and of each CPU-detectable pattern, recorded in parallel."""
    root = tmp_path_factory.mktemp("zoo")
    cfg = write_tiny_config(root)
    env = clean_env(OMP_NUM_THREADS="1")
    procs = {}
    for name in ("clean", *EXPECTED, GROWTH):
        out = root / name
        argv = [sys.executable, "-m", "goodhart_prof.cli", "run", "--iterations", WINDOW.get(name, "2-3"), "--mode",
                "full", "--config", str(cfg), "--output-dir", str(root), "--name", name, "--no-progress"]
        argv += [] if name == "clean" else ["--inject", name]
        procs[name] = (out, subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                                             stderr=subprocess.PIPE, text=True))
    folders = {}
    for name, (out, proc) in procs.items():
        _, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, (name, stderr[-2000:])
        folders[name] = out
    return folders


def function_body(path: Path, first_line: int, fn: str) -> str:
    lines = path.read_text().splitlines()[first_line - 1:]
    assert re.match(rf"\s*(def|class) {fn}\b", lines[0]), lines[0]
    indent = len(lines[0]) - len(lines[0].lstrip())
    body = [lines[0]]
    for line in lines[1:]:
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break
        body.append(line)
    return "\n".join(body)


def zoo_findings(folder: Path) -> dict[str, object]:
    return {f.rule: f for f in analyze(load(folder)).findings if f.rule in ZOO_RULES}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(EXPECTED))
def test_planted_pattern_fires_its_rule_with_evidence(recorded, name):
    found = zoo_findings(recorded[name])
    assert set(found) == {name}, sorted(found)  # its rule, and no other zoo rule
    per_iteration, planted_code = EXPECTED[name]
    ev = found[name].evidence
    assert ev["per_iteration"] == per_iteration and ev["count"] == 2 * per_iteration
    top = ev["sites"][0]
    assert top["count"] == ev["count"]
    # The site is the planted line itself (analysis/host/line_sites.py reads trainer/antipatterns.py
    # from the current directory), or, where the trace cannot tell, its function with the
    # planted line among the candidate lines.
    source = PLANTED.read_text().splitlines()
    m = re.match(r"^(?P<file>.+\.py):(?P<line>\d+) (?P<fn>\w+)$", top["site"])
    if m is not None:
        assert Path(m["file"]).resolve() == PLANTED, top["site"]
        assert planted_code in source[int(m["line"]) - 1], top["site"]
    else:
        m = re.match(r"^in function (?P<fn>\w+) \((?P<file>.+\.py), defined at line (?P<def>\d+)\): "
                     r"candidate lines (?P<lines>[\d, ]+)$", top["site"])
        assert m and Path(m["file"]).resolve() == PLANTED, top["site"]
        assert planted_code in function_body(PLANTED, int(m["def"]), m["fn"]), top["site"]
        assert any(planted_code in source[int(n) - 1] for n in m["lines"].split(", ")), top["site"]
    record = json.loads((recorded[name] / "run.json").read_text())
    assert record["config"]["inject"] == name


@pytest.mark.slow
def test_planted_graph_break_is_found_by_its_rule_alone():
    """The zoo's graph_break (trainer/antipatterns.py graph_break_step, compiled with the env step),
    recorded lite on the A/B config (tests/data/SOURCES.md): one break per env step, 8 per
    iteration, at the line of the planted torch._dynamo.graph_break(), named from the attribution
    iteration's stacks; no other zoo rule fires, and no recompile."""
    folder = DATA / "ours" / "zoo" / BREAK
    a = analyze(load(folder))
    rules = [f.rule for f in a.findings]
    assert [r for r in rules if r in ZOO_RULES] == [BREAK] and "recompile" not in rules
    (f,) = [f for f in a.findings if f.rule == BREAK]
    (b,) = f.evidence["breaks"]
    assert (b["function"], b["file"], b["times_per_iteration"]) == ("step_with_break", "trainer/antipatterns.py", 8.0)
    assert PLANTED.read_text().splitlines()[b["line"] - 1].strip() == "torch._dynamo.graph_break()"
    record = json.loads((folder / "run.json").read_text())
    assert record["config"]["inject"] == BREAK and record["config"]["compile"] == "on"


def test_planted_memory_growth(recorded):
    found = zoo_findings(recorded[GROWTH])
    assert set(found) == {GROWTH}, sorted(found)
    ev = found[GROWTH].evidence
    assert ev["iterations"] == 3 and list(ev["allocated_end"]) == [2, 3, 4]
    ends = list(ev["allocated_end"].values())
    assert all(b - a >= BY_ID[GROWTH].limit("per_iteration_bytes") for a, b in zip(ends, ends[1:]))
    # The kept graphs were allocated by the value forward inside the planted GAE wrapper.
    assert ev["kept_by"][0]["phase"] == "gae" and ev["kept_by"][0]["live_bytes"] >= ev["growth"]
    assert "gae_and_keep_loss" in PLANTED.read_text()
    record = json.loads((recorded[GROWTH] / "run.json").read_text())
    assert record["config"]["inject"] == GROWTH


@pytest.mark.slow
def test_clean_run_fires_no_zoo_rule(recorded):
    # Torch's own reads (foreach Adam's CPU step counters, aten::std's scalar) are not ours.
    assert zoo_findings(recorded["clean"]) == {}
    judged = {n.rule for n in analyze(load(recorded["clean"])).not_judged}
    assert GROWTH not in judged  # three traced iterations with memory events: judged, silent
    record = json.loads((recorded["clean"] / "run.json").read_text())
    assert record["config"]["inject"] == ""


@pytest.mark.slow
@pytest.mark.parametrize("argv", [["-m", "goodhart_prof.cli", "run"], ["-m", "trainer"]])
def test_bad_inject_name_is_one_line_error(tmp_path, argv):
    res = run_cmd(argv + ["--inject", "item_logging,bogus", "--output-dir", str(tmp_path / "never")])
    assert res.returncode == 2 and "Traceback" not in res.stderr
    lines = error_lines(res.stderr)
    assert len(lines) == 1 and "'bogus'" in lines[0], res.stderr
    assert all(n in lines[0] for n in zoo.NAMES)
    assert not (tmp_path / "never").exists()


def test_inject_config_is_canonical_and_overrides(tmp_path):
    cfg = build_config(write_tiny_config(tmp_path), device="cpu", inject="tiny_batch, no_amp,tiny_batch")
    assert cfg.inject == "no_amp,tiny_batch"  # zoo order, each once
    assert (cfg.n_envs, cfg.amp) == (zoo.TINY_BATCH_ENVS, "off")
    with pytest.raises(ConfigError, match="valid: item_logging"):
        build_config(None, device="cpu", inject="fast")


def test_clean_trainer_has_no_planted_code(tmp_path):
    cfg = build_config(write_tiny_config(tmp_path), device="cpu", output_dir=str(tmp_path))
    trainer = Trainer(cfg)
    assert trainer.env_step == trainer.env.step  # no wrapper around the hot path
    assert trainer.clip_grads is clip_grad_norm_no_sync
    assert type(trainer.policy).forward is antipatterns.ActorCritic.forward
    assert "prepare_targets" not in vars(trainer.policy.value_head)
    planted = Trainer(build_config(write_tiny_config(tmp_path), device="cpu",
                                   output_dir=str(tmp_path), inject=",".join(zoo.NAMES)))
    assert planted.env_step != planted.env.step and isinstance(planted.optimizer, torch.optim.Adam)


def test_host_built_observations_equal_the_device_ones(tmp_path):
    cfg = build_config(write_tiny_config(tmp_path), device="cpu", output_dir=str(tmp_path))
    env = Trainer(cfg).env
    step = antipatterns.pageable_htod_step(env.step, env)
    state, _ = env.reset()
    for _ in range(5):
        actions = torch.randint(0, 5, (cfg.n_envs,))
        host = step(state, actions)
        assert torch.equal(host.obs, env.observe(host.state.grid, host.state.pos))
        state = host.state


# -- CUDA-only rules: real GPU traces and hand-built ones ---------------------------------------------
def rules(trace) -> dict[str, object]:
    return {f.rule: f for f in analyze(trace).findings}


def test_gpu_rules_on_real_traces():
    v100 = rules(load(DATA / "hta" / "v100_ddp_rank1.json.gz"))
    assert "no_amp" in v100 and v100["no_amp"].evidence["low_precision_us"] == 0  # volta_sgemm
    assert v100["unfused_adam"].evidence["optimizer"] == ["SGD"]  # a for-loop SGD step
    assert v100["unfused_adam"].evidence["kernels_per_step"] >= UNFUSED_KERNELS_PER_STEP
    assert "eager_update" not in v100  # its backward is a CompiledFunctionBackward
    owl = rules(load(DATA / "tracelens" / "h100_owlv2_inference.json.gz"))
    assert not {"no_amp", "unfused_adam", "eager_update", "cpu_alloc"} & set(owl)  # bf16 inference
    assert owl["pageable_htod"].evidence["gpu_copies"] == 25


def test_tiny_batch_and_eager_update_on_dlrm():
    path = SHARED / "param" / "dlrm_8rank"
    if not path.exists():
        pytest.skip(f"{path} not present (shared traces live beside the repository)")
    found = rules(load(path))
    assert found["tiny_batch"].evidence["median_kernel_us"] < 10
    assert "eager_update" in found and not found["eager_update"].evidence["compiled_elsewhere"]


def _optimizer_trace(tmp_path, kernel_names, backward, name="opt.json"):
    """A training step on a GPU: backward nodes, then an Adam step launching kernel_names."""
    events, t, corr = [ann("ProfilerStep#1", 0, 100_000)], 10.0, 1
    for bw in backward:
        events.append(op(f"autograd::engine::evaluate_function: {bw}", t, 20))
        t += 30
    for i in range(60):  # enough GPU activity to judge eager_update
        events += [rt("cudaLaunchKernel", t, 5, corr), kernel("elementwise_kernel", t + 6, 40, corr)]
        t, corr = t + 50, corr + 1
    events.append(ann("Optimizer.step#Adam.step", t, 20 * len(kernel_names) + 10))
    for k in kernel_names:
        events += [rt("cudaLaunchKernel", t + 2, 5, corr), kernel(k, t + 8, 4, corr)]
        t, corr = t + 20, corr + 1
    return load_events(tmp_path, events, name)


def test_unfused_adam_judges_the_kernels_of_the_step(tmp_path):
    foreach = [f"multi_tensor_apply_kernel<BinaryOpListAlphaFunctor{i}>" for i in range(7)]
    found = rules(_optimizer_trace(tmp_path, foreach, ["MmBackward0"]))
    assert found["unfused_adam"].evidence["kernels_per_step"] == 7
    fused = ["multi_tensor_apply_kernel<BinaryOpScalarFunctor>",
             "multi_tensor_apply_kernel<FusedAdamMathFunctor<float, 4>>"]
    assert "unfused_adam" not in rules(_optimizer_trace(tmp_path, fused, ["MmBackward0"], "f.json"))


def test_eager_update_looks_at_the_backward(tmp_path):
    eager = rules(_optimizer_trace(tmp_path, [], ["MmBackward0", "torch::autograd::AccumulateGrad"]))
    assert eager["eager_update"].evidence["backward_ops"] == 1  # AccumulateGrad is always eager
    compiled = _optimizer_trace(tmp_path, [], ["CompiledFunctionBackward",
                                               "torch::autograd::AccumulateGrad"], "c.json")
    assert "eager_update" not in rules(compiled)


def test_no_amp_reads_hopper_and_cutlass_type_names(tmp_path):
    def gemms(name, file):
        events, t = [ann("ProfilerStep#1", 0, 100_000)], 0.0
        for i in range(120):
            events += [rt("cudaLaunchKernel", t, 5, i), kernel(name, t + 6, 500, i)]
            t += 501
        return rules(load_events(tmp_path, events, file))
    assert "no_amp" not in gemms("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN", "bf16.json")  # cuBLASLt bf16
    assert "no_amp" in gemms("cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4", "tf32.json")
    assert "no_amp" in gemms("ampere_sgemm_128x64_nn", "fp32.json")


def _moves_on_gpu(tmp_path, creator: str, name: str):
    """Two iterations of 3 `torch.<creator>(...).to('cuda')` each, as Kineto records them on a GPU."""
    events, corr = [], 1
    for it in range(2):
        base = it * 10_000
        events.append(ann(f"ProfilerStep#{it}", base, 9_000))
        for k in range(3):
            t = base + 100 + 1000 * k
            events += [op(creator, t, 20), op("aten::to", t + 50, 80), op("aten::_to_copy", t + 55, 70),
                       op("aten::copy_", t + 60, 60), rt("cudaMemcpyAsync", t + 70, 20, corr),
                       memcpy("Memcpy HtoD (Pageable -> Device)", t + 200, 3, corr)]
            corr += 1
    return rules(load_events(tmp_path, events, name))


def test_gpu_copies_of_fresh_tensors_go_to_one_rule(tmp_path):
    made = _moves_on_gpu(tmp_path, "aten::zeros", "zeros.json")  # torch.zeros(n).to(dev)
    assert made["cpu_alloc"].evidence["per_iteration"] == 3 and "pageable_htod" not in made
    assert made["cpu_alloc"].evidence["creators"] == {"aten::zeros": 6}
    host = _moves_on_gpu(tmp_path, "aten::lift_fresh", "numpy.json")  # torch.from_numpy(a).to(dev)
    assert host["pageable_htod"].evidence["gpu_copies"] == 6 and "cpu_alloc" not in host


# -- memory_growth: bf16 observations, a bounded history ---------------------------------------------
def _saved_bytes(loss: torch.Tensor, exclude: set[int]) -> int:
    """Bytes of the tensors `loss`'s graph saved for backward (each storage once), storages in
    `exclude` (the parameters, the observation buffer) left out: what keeping `loss` keeps alive."""
    sizes, todo, done = {}, [loss.grad_fn], set()
    while todo:
        node = todo.pop()
        if node is None or node in done:
            continue
        done.add(node)
        for attr in dir(node):
            value = getattr(node, attr) if attr.startswith("_saved_") else None
            for t in value if isinstance(value, (tuple, list)) else (value,):
                if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in exclude:
                    sizes[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        todo += [fn for fn, _ in node.next_functions]
    return sum(sizes.values())


def _fake_gae(n: int):
    return lambda *args: (torch.zeros(n), torch.ones(n))


def test_memory_growth_values_bf16_observations_under_the_trainers_autocast(tmp_path):
    # On CUDA the trainer's observation buffer is bf16 (amp on); the planted forward used to run
    # outside autocast: bf16 input, float weights, a RuntimeError on the first iteration.
    cfg = build_config(write_tiny_config(tmp_path), device="cpu", output_dir=str(tmp_path),
                       amp="on", inject="memory_growth")
    trainer = Trainer(cfg)
    obs = torch.rand(cfg.rollout_steps, cfg.n_envs, *trainer.env.obs_shape).to(torch.bfloat16)
    n = obs.shape[0] * obs.shape[1]
    history: list[torch.Tensor] = []
    unguarded = antipatterns.value_loss_history_gae(_fake_gae(n), trainer.policy, obs, history,
                                                    contextlib.nullcontext)
    with pytest.raises(RuntimeError, match="BFloat16"):
        unguarded()  # the bug, as it was
    planted = antipatterns.value_loss_history_gae(_fake_gae(n), trainer.policy, obs, history,
                                                  trainer.autocast)
    advantages, returns = planted()
    assert len(history) == 1 and history[0].dtype == torch.float32 and history[0].requires_grad
    assert torch.isfinite(history[0]) and history[0].grad_fn is not None
    assert torch.equal(returns, torch.ones(n))  # GAE's results pass through
    # The trainer wires it with its own autocast: a whole iteration (amp on, CPU) keeps one loss.
    trainer.run_iteration(0, None)
    assert len(trainer.loss_history) == 1 and trainer.loss_history[0].grad_fn is not None


def test_memory_growth_history_is_bounded():
    # The CUDA preset's network and bf16 observations (64 steps x 512 envs: the slice is what
    # counts, not the rollout), under bf16 autocast as the trainer runs it on CUDA.
    c, hidden, view, rows = 32, 256, 7, antipatterns.VALUED_ROWS
    policy = antipatterns.ActorCritic((3, view, view), 5, c, hidden)
    obs = torch.rand(64, 512, 3, view, view).to(torch.bfloat16)
    n = obs.shape[0] * obs.shape[1]
    history: list[torch.Tensor] = []
    planted = antipatterns.value_loss_history_gae(
        _fake_gae(n), policy, obs, history, lambda: torch.autocast("cpu", dtype=torch.bfloat16))
    planted()
    first = weakref.ref(history[0])
    exclude = {p.untyped_storage().data_ptr() for p in policy.parameters()}
    exclude.add(obs.untyped_storage().data_ptr())
    per_loss = _saved_bytes(history[0], exclude)
    cells = view * view
    # bf16 activations of the valued rows (ReLU outputs of conv1, conv2, fc), the bf16 weight
    # copies autocast made (conv1, conv2, fc) and the float32 difference the square keeps; the
    # value head adds a bf16 copy of its weight, or, run in float32, its float32 input.
    trunk = 2 * (rows * (c * cells + 2 * c * cells + hidden)
                 + 3 * c * 9 + 2 * c * c * 9 + 2 * c * cells * hidden) + 4 * rows
    head_bf16, head_fp32 = 2 * hidden, 4 * rows * hidden
    assert per_loss in (trunk + head_bf16, trunk + head_fp32), per_loss
    assert trunk + head_bf16 == 4_185_280  # docs/zoo.md states these, and the bound below
    assert antipatterns.KEPT_LOSSES * (trunk + head_fp32) == 284_602_368
    for _ in range(antipatterns.KEPT_LOSSES):
        planted()
    assert len(history) == antipatterns.KEPT_LOSSES
    assert first() is None  # the oldest loss was dropped, and with it its graph
    assert _saved_bytes(history[-1], exclude) == per_loss  # every kept loss costs the same


# -- scripts/bench_zoo.py -----------------------------------------------------------------------------
sys.path.insert(0, str(ROOT / "scripts"))
import bench_zoo  # noqa: E402

# A learning rate that turns the weights to NaN after the first update: the clean trainer goes on
# (NaN rewards nobody checks), sync_grad_clip's readback raises "gradient norm is nan".
NAN_LR = "lr = 1e30\n"


def _bench(tmp_path, config: Path, *extra: str) -> tuple[int, dict, str]:
    out = tmp_path / "zoo.json"
    argv = ["--config", str(config), "--device", "cpu", "--total-iterations", "8", "--iterations",
            "2-4", "--warmup-iterations", "1", "--timed-iterations", "2", "--threads", "1",
            "--keep", str(tmp_path / "runs"), "--json-out", str(out), *extra]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = bench_zoo.main(argv)
    printed = buf.getvalue()
    last = json.loads(printed.strip().splitlines()[-1])  # the last line is one JSON object
    assert json.loads(out.read_text()) == last
    assert [p.name for p in out.parent.iterdir() if p.name.endswith(".tmp")] == []
    return code, last, printed


@pytest.mark.slow
def test_bench_zoo_goes_on_after_a_failed_pattern(tmp_path):
    config = write_tiny_config(tmp_path)
    config.write_text(config.read_text() + NAN_LR)
    code, summary, printed = _bench(tmp_path, config, "--patterns", "sync_grad_clip,item_logging")
    assert code == 1 and summary["finished"] and summary["pending"] == []
    assert summary["failed"] == summary["failed_patterns"] == ["sync_grad_clip"]
    [failed] = summary["failures"]
    assert failed["name"] == "sync_grad_clip" and failed["stage"] == "run"
    assert failed["error"] == "exit 1: FloatingPointError: gradient norm is nan"
    assert "Traceback" in failed["stderr_tail"] and "\n" not in failed["error"]
    # The pattern after the failed one ran, was found, and was timed.
    assert summary["detected"] == ["item_logging"] and summary["missed"] == ["sync_grad_clip"]
    assert summary["recall"] == 0.5 and summary["precision"] == 1.0
    assert summary["measurable"] == ["sync_grad_clip", "item_logging"]
    assert list(summary["slowdowns"]) == ["item_logging"] and summary["slowdowns"]["item_logging"] > 0
    assert summary["timing"]["item_logging"]["iterations"] == 2  # 6 and 7 (0: warm-up, 1-5: profiler)
    kept = tmp_path / "runs" / "item_logging"
    assert (kept / "rank-0.pt.trace.json.gz").exists() and not (kept / "merged_trace.json").exists()
    rows = [line.split() for line in printed.splitlines() if line.strip()]
    confusion = {r[0]: r for r in rows[2:13]}  # after the title and the header: the eleven rules
    assert confusion["sync_grad_clip"][2] == "FAILED" and confusion["item_logging"][2] == "detected"
    timing = {r[0]: r for r in rows[15:]}
    assert timing["sync_grad_clip"][1:3] == ["FAILED", "(run)"] and timing["item_logging"][1] == "2"
    assert "FAILED sync_grad_clip (run): exit 1: FloatingPointError" in printed


@pytest.mark.slow
def test_bench_zoo_budget_lists_the_patterns_it_did_not_start(tmp_path):
    code, summary, printed = _bench(tmp_path, write_tiny_config(tmp_path), "--budget-s", "0",
                                    "--patterns", "memory_growth,cpu_alloc")
    assert code == 0 and summary["not_run"] == ["memory_growth", "cpu_alloc"]
    assert summary["failed"] == [] and summary["recall"] is None and summary["slowdowns"] == {}
    assert summary["timing"]["clean"]["iterations"] == 2  # the clean run always runs
    assert "not run (budget 0.0 s): memory_growth, cpu_alloc" in printed
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["cache", "clean", "latest"]
    # Into the same folder again: the clean run is replaced, not refused, nor its metrics doubled.
    code, again, _ = _bench(tmp_path, write_tiny_config(tmp_path), "--budget-s", "0",
                            "--patterns", "cpu_alloc")
    assert code == 0 and again["failed"] == [] and again["timing"]["clean"]["iterations"] == 2
    metrics = (tmp_path / "runs" / "clean" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["iteration"] for line in metrics] == list(range(8))


def test_bench_zoo_times_iterations_no_profiler_touched():
    assert bench_zoo.timed_iterations(32, 2, 16, (20, 22)) == list(range(2, 18))
    # warm-up 0-1; 19 warms the profiler up, 20-22 are traced, 23 writes the trace
    assert bench_zoo.timed_iterations(32, 2, 30, (20, 22)) == [*range(2, 19), *range(24, 32)]
    assert bench_zoo.timed_iterations(7, 1, 5, (2, 4)) == [6]
    assert bench_zoo.timed_iterations(6, 1, 5, None) == [1, 2, 3, 4, 5]


def test_bench_zoo_slowdown_is_per_env_step(tmp_path):
    rows = [{"iteration": i, "env_steps": 4096, "iteration_s": s}
            for i, s in enumerate([9.0, 0.40, 0.38, 0.44, 0.40, 0.50])]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    clean = bench_zoo.timing_stats(bench_zoo.iteration_samples(tmp_path, [1, 2, 3, 4, 5]))
    assert clean["iterations"] == 5 and clean["iteration_s_median"] == 0.40  # iteration 0 left out
    assert (clean["iteration_s_min"], clean["iteration_s_max"]) == (0.38, 0.50)
    assert (clean["iteration_s_q1"], clean["iteration_s_q3"]) == (0.40, 0.44)
    assert clean["env_steps_per_s"] == 10240.0
    # 8 envs instead of 128: a quarter of the clean iteration time is 4x slower per env-step.
    tiny = bench_zoo.timing_stats([{"iteration": i, "env_steps": 256, "iteration_s": 0.1}
                                   for i in range(3)])
    assert bench_zoo.slowdown(tiny, clean) == {"median": 4.0, "q1": 4.0, "q3": 4.0}


def test_bench_zoo_failed_child_is_a_record_not_an_exit(tmp_path):
    config = tmp_path / "bad.toml"
    config.write_text('amp = "sometimes"\n')
    args = bench_zoo.parse_args(["--config", str(config), "--device", "cpu", "--total-iterations", "7",
                                 "--iterations", "2-4", "--keep", str(tmp_path)])
    env = bench_zoo.child_env(args, tmp_path / "cache" / "inductor")
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "cache" / "inductor")
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "cache" / "triton")  # beside it
    record = bench_zoo.run_kind("cpu_alloc", tmp_path, args, env)
    assert record["status"] == "failed" and record["stage"] == "run"
    assert record["error"] == "exit 2: Error: amp must be auto, on or off, not 'sometimes'"
    summary = bench_zoo.summarize({"cpu_alloc": record}, ["cpu_alloc", "nan_checks"], [], args)
    assert summary["missed"] == ["cpu_alloc"] and summary["recall"] == 0.0
    assert summary["failed"] == ["cpu_alloc"] and summary["pending"] == ["nan_checks"]
    assert summary["failures"][0]["error"] == record["error"]


def test_bench_zoo_json_out_keeps_what_a_killed_benchmark_finished(tmp_path, monkeypatch):
    def fake_run_kind(name, folder, args, env):  # a real record's fields, no child process
        if name == "cpu_alloc":
            raise KeyboardInterrupt  # the benchmark killed while this pattern runs
        timing = bench_zoo.timing_stats([{"iteration": 2, "env_steps": 4096, "iteration_s": 0.4}])
        return {"name": name, "status": "ok", "wall_s": 20.0, "device": "cpu", "device_type": "cpu",
                "warmup_s": 0.5, "warmup_iterations_s": 0.8, "timing": timing,
                "fired": {name: {"per_iteration": 32}} if name != "clean" else {}}
    monkeypatch.setattr(bench_zoo, "run_kind", fake_run_kind)
    out = tmp_path / "zoo.json"
    with pytest.raises(KeyboardInterrupt):
        bench_zoo.main(["--device", "cpu", "--patterns", "item_logging,cpu_alloc,nan_checks",
                        "--keep", str(tmp_path / "runs"), "--json-out", str(out)])
    kept = json.loads(out.read_text())
    assert kept["finished"] is False and kept["pending"] == ["cpu_alloc", "nan_checks"]
    assert kept["detected"] == ["item_logging"] and kept["slowdowns"] == {"item_logging": 1.0}
    assert sorted(kept["timing"]) == ["clean", "item_logging"]
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
