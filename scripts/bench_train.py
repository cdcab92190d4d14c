#!/usr/bin/env python
"""Env-steps per second: naive per-env Python loop vs the vectorized trainer (eager, compiled, CUDA graphs).

Measured side by side in one process, interleaved in rounds so that machine noise hits every
variant alike (medians are reported, with min-max):

* naive rollout: N separate `GoodhartGridWorld(n_envs=1)` built from the same config, stepped
  one after another in a Python loop; per env and step one batch-1 forward + sample of the SAME
  policy (`policy.act` on the eager trainer's `ActorCritic`, same instance and weights), then
  that env's own step. No buffers, no extra syncs, no extra copies.
* rollout: the same two lines over the whole batch: `trainer.act_all(trainer.policy_obs)` (the
  trainer's forward, which also values the few final observations of truncated episodes),
  `trainer.env_step(...)`, then `trainer.take_step(...)`. No buffer writes either, so the two
  rollout numbers do the same work per env step but that valuing.
* end to end: `Trainer.run_iteration(it, logger=None)` after `warm_up()`, one iteration timed
  at a time (device synchronized before each clock read), the variants alternating.
* variants (`--variants`, measured interleaved in one process): eager (compile off), compiled
  (torch.compile), cudagraphs (torch.compile with CUDA graphs, `--cudagraphs` of the trainer; on
  the CPU its one-line error is reported). A variant that fails to build or breaks while being
  measured is reported with its error and the others go on. scripts/gpu_acceptance.py runs each
  variant in a process of its own (`--variants NAME --no-naive`).
* per phase: extra iterations run with a hooks object that synchronizes the device and reads
  the wall clock around the top-level phases (rollout, gae, ppo_update, logging).

Torch's default thread count is used unless --threads is given. On a small CPU another busy
process can slow torch's OpenMP threads many times over, so the header shows the load average
and the footer how many CPUs other processes kept busy while measuring. The last line printed
is one JSON object (--json-out also writes it to a file, e.g. benchmarks/gpu/<date>-<device>.json).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as _dt
import json
import os
import platform
import statistics
import sys
import time
import traceback
from collections import defaultdict
from functools import partial
from pathlib import Path
from typing import Any, Callable

import torch

from benchlib import ForeignLoad, device_name, sync
from trainer.config import ConfigError, build_config, to_dict
from trainer.env import GoodhartGridWorld
from trainer.policy import act
from trainer.train import Trainer

TOP_PHASES = ("rollout", "gae", "ppo_update", "logging")
TARGET_RATIO = 10.0
_NULL = contextlib.nullcontext()


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def med(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


class PhaseTimer:
    """Hooks object: wall clock + device sync around the top-level phases only.

    Nested phases (policy_act, env_step, minibatch, optimizer_step) get a shared no-op context, so
    no sync lands inside the rollout or the update loop.
    """

    enabled = False
    trace_path = None

    def __init__(self, device: torch.device):
        self.device = device
        self.times: dict[str, list[float]] = defaultdict(list)

    def phase(self, name: str):
        return self._timed(name) if name in TOP_PHASES else _NULL

    @contextlib.contextmanager
    def _timed(self, name: str):
        sync(self.device)
        start = time.perf_counter()
        yield
        sync(self.device)
        self.times[name].append(time.perf_counter() - start)

    def iteration(self, it: int):
        return _NULL

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


def make_naive(cfg, trainer: Trainer, n: int):
    """N single-env worlds with the same rules as the trainer's env (same code, n_envs=1)."""
    one = dataclasses.replace(cfg, n_envs=1)
    envs = [GoodhartGridWorld.from_config(one, trainer.device, trainer.env.obs_dtype)
            for _ in range(n)]
    states, obs = [], []
    for env in envs:
        s, o = env.reset()
        states.append(s)
        obs.append(o)
    return envs, states, obs


def _act_autocast(trainer: Trainer, obs: torch.Tensor):
    """The policy's batch-1 forward under the trainer's autocast, as its own rollout runs it
    (with bf16 observations on CUDA, a forward outside autocast meets float32 weights)."""
    with trainer.autocast():
        return act(trainer.policy, obs)


def naive_steps(act_fn: Callable, envs, states, obs, steps: int) -> None:
    for _ in range(steps):
        for i, env in enumerate(envs):
            out = act_fn(obs[i])                    # batch-1 forward + sample, same policy
            res = env.step(states[i], out.action)   # that env's own step
            states[i], obs[i] = res.state, res.obs


def vector_rollout(trainer: Trainer, steps: int) -> None:
    """The trainer's rollout without the buffer writes: its forward (which also values the few
    final observations of truncated envs), its env step, then `take_step` (copies into fixed
    addresses with CUDA graphs, whose replays overwrite the outputs of the one before)."""
    for _ in range(steps):
        out, _ = trainer.act_all(trainer.policy_obs)
        trainer.take_step(trainer.env_step(trainer.state, out.action))


def timed(device: torch.device, fn: Callable[[], Any]) -> float:
    sync(device)
    start = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - start


def fmt(x: float | None, spec: str = ",.0f") -> str:
    return "null" if x is None else format(x, spec)


def spread(xs: list[float], spec: str = ",.0f") -> str:
    return "" if len(xs) < 2 else f"[{format(min(xs), spec)} .. {format(max(xs), spec)}]"


VARIANTS = ("eager", "compiled", "cudagraphs")


def build_variant(cfg, name: str) -> Trainer:
    """The trainer of one variant: eager (compile off), compiled (torch.compile), cudagraphs
    (torch.compile with CUDA graphs, trainer/step_functions.py; a one-line ConfigError off CUDA)."""
    if name == "eager":
        return Trainer(cfg)
    if name == "compiled":
        return Trainer(dataclasses.replace(cfg, compile="on"))
    return Trainer(dataclasses.replace(cfg, compile="on", cudagraphs=True).validate())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="Env-steps/s of a naive per-env Python loop vs the vectorized trainer "
                    "(eager, torch.compile, CUDA graphs). Prints a table; the last line is one JSON object.")
    ap.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                    help="auto: CUDA when available (default: %(default)s)")
    ap.add_argument("--config", default=None, help="optional TOML config (as for python -m trainer)")
    ap.add_argument("--n-envs", type=int, default=None,
                    help="batch size of the vectorized env (default: the device preset's)")
    ap.add_argument("--variants", default="eager,compiled",
                    help=f"comma list of {', '.join(VARIANTS)}, measured interleaved in this process "
                         "(default: %(default)s)")
    ap.add_argument("--no-naive", action="store_true",
                    help="skip the naive per-env loop (the rollout-vs-naive ratio is then null)")
    ap.add_argument("--iterations", type=int, default=8,
                    help="timed end-to-end iterations per variant (default: %(default)s)")
    ap.add_argument("--phase-iterations", type=int, default=3,
                    help="extra iterations per variant timed phase by phase (default: %(default)s)")
    ap.add_argument("--rounds", type=int, default=5,
                    help="interleaved rollout measurement rounds (default: %(default)s)")
    ap.add_argument("--naive-steps", type=int, default=4,
                    help="naive loop: steps of every naive env per round (default: %(default)s)")
    ap.add_argument("--naive-envs", type=int, default=None,
                    help="naive loop: number of single-env worlds (default: n_envs, at most 256; "
                         "the naive rate does not depend on it)")
    ap.add_argument("--no-compile", action="store_true",
                    help="drop the compiled and cudagraphs variants (same as --variants eager)")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch.set_num_threads (default: leave torch's default)")
    ap.add_argument("--json-out", default=None, help="also write the final JSON object to this file")
    args = ap.parse_args(argv)
    for name in ("iterations", "rounds", "naive_steps", "phase_iterations"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or not variants:
        ap.error(f"--variants: unknown {unknown[0]!r}; valid: {', '.join(VARIANTS)}" if unknown
                 else "--variants: name at least one")
    if args.no_compile:
        variants = ["eager"]
    variants = list(dict.fromkeys(variants))

    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        cfg = build_config(args.config, device=args.device, n_envs=args.n_envs, compile="off",
                           progress=False, warmup=True)
    except ConfigError as exc:
        ap.error(str(exc))
    device = torch.device(cfg.device)
    naive_on = not args.no_naive
    n_naive = args.naive_envs or min(cfg.n_envs, 256)
    steps_per_it = cfg.n_envs * cfg.rollout_steps
    bench_start = time.perf_counter()
    print(f"# bench_train: device={cfg.device} ({device_name(device)}), torch {torch.__version__}, "
          f"threads={torch.get_num_threads()}, n_envs={cfg.n_envs}, rollout_steps={cfg.rollout_steps}, "
          f"variants={','.join(variants)}, naive_envs={n_naive if naive_on else 'off'}, "
          f"loadavg={os.getloadavg()[0]:.2f}", flush=True)

    # -- build and warm up (compiles, autotunes, CUDA graph recording: never timed) ----------
    trainers: dict[str, Trainer] = {}
    errors: dict[str, str] = {}
    warm: dict[str, float] = {}
    for name in variants:
        if name != "eager":
            print(f"# building {name} (torch.compile, first call of each function; may take a while) ...",
                  flush=True)
        try:
            tr = build_variant(cfg, name)
            warm[name] = tr.warm_up()
            # The rollout loop alone calls act_fn/env_step outside run_iteration: warm it too.
            vector_rollout(tr, 2)
            sync(device)
            trainers[name] = tr
        except Exception as exc:  # noqa: BLE001 - report it, measure the others
            errors[name] = one_line(exc)
            if not isinstance(exc, ConfigError):
                traceback.print_exc(limit=3, file=sys.stderr)
    naive_act = None
    if naive_on:
        base = trainers.get("eager") or Trainer(cfg)
        envs, states, obs = make_naive(cfg, base, n_naive)
        naive_act = partial(_act_autocast, base)
        naive_steps(naive_act, envs, states, obs, 1)   # warm the batch-1 path
        sync(device)

    def measured(name: str, fn: Callable[[], Any]) -> Any:
        """fn() for a variant still standing; an error drops the variant and is reported."""
        if name not in trainers:
            return None
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001
            errors[name] = "during measurement: " + one_line(exc)
            del trainers[name]
            return None

    # -- rollout rounds: naive and the variants interleaved ------------------------------------
    foreign = ForeignLoad()  # from here on no compile workers should be busy
    naive_sps: list[float] = []
    roll: dict[str, list[float]] = {v: [] for v in variants}
    for _ in range(args.rounds):
        if naive_act is not None:
            dt = timed(device, lambda: naive_steps(naive_act, envs, states, obs, args.naive_steps))
            naive_sps.append(n_naive * args.naive_steps / dt)
        for name in variants:
            dt = measured(name, lambda: timed(device, lambda: vector_rollout(trainers[name], cfg.rollout_steps)))
            if dt is not None:
                roll[name].append(steps_per_it / dt)

    # -- end to end: one iteration at a time, the variants alternating -------------------------
    its: dict[str, list[float]] = {v: [] for v in variants}
    for _ in range(args.iterations):
        for name in variants:
            dt = measured(name, lambda: timed(device, lambda: trainers[name].run_iteration(
                trainers[name].iteration, None)))
            if dt is not None:
                its[name].append(dt)

    # -- per phase: wall clock + sync around the top-level phases ----------------------------
    def phases(tr: Trainer) -> dict[str, float]:
        timer, saved = PhaseTimer(device), tr.hooks
        tr.hooks = timer
        try:
            for _ in range(args.phase_iterations):
                tr.run_iteration(tr.iteration, None)
        finally:
            tr.hooks = saved
        return {k: statistics.median(timer.times[k]) for k in TOP_PHASES if timer.times[k]}

    phase_s = {name: measured(name, lambda: phases(trainers[name])) for name in variants}
    other = foreign.cpus_used()

    # -- results -----------------------------------------------------------------------------
    def r(x: float | None, nd: int = 1) -> float | None:
        return None if x is None else round(x, nd)

    naive = med(naive_sps)
    per_variant: dict[str, dict[str, Any]] = {}
    for name in variants:
        it_s = its[name]
        per_variant[name] = {
            "rollout_sps": r(med(roll[name])),
            "sps": r(steps_per_it / statistics.median(it_s)) if it_s else None,
            "iteration_s": r(statistics.median(it_s), 6) if it_s else None,
            "phase_s": {k: r(v, 6) for k, v in phase_s[name].items()} if phase_s.get(name) else None,
            "warmup_s": r(warm.get(name), 3),
            "error": errors.get(name),
            "spread": {"rollout_sps": [r(min(roll[name])), r(max(roll[name]))] if roll[name] else None,
                       "sps": [r(steps_per_it / max(it_s)), r(steps_per_it / min(it_s))] if it_s else None},
            "timed_iterations": len(it_s),
        }
    eager = per_variant.get("eager", {})
    compiled = per_variant.get("compiled", {})
    rollout = eager.get("rollout_sps")
    ratio = rollout / naive if rollout and naive else None
    passed = ratio is not None and ratio >= TARGET_RATIO

    rows = []
    if naive_on:
        rows.append(("naive per-env loop, rollout", naive, naive_sps,
                     f"{n_naive} envs x {args.naive_steps} steps x {args.rounds} rounds"))
    for name in variants:
        v, it_s = per_variant[name], its[name]
        note = errors.get(name)
        rows.append((f"{name}, rollout", v["rollout_sps"], roll[name],
                     note or f"{cfg.rollout_steps} steps x {len(roll[name])} rounds"))
        rows.append((f"{name}, end to end", v["sps"], [steps_per_it / t for t in it_s],
                     note or f"{len(it_s)} iterations after warm-up"))
    print()
    print(f"{'variant':<30} {'env-steps/s (median)':>21}  {'min .. max':<26} note")
    print("-" * 100)
    for name, value, xs, note in rows:
        print(f"{name:<30} {fmt(value):>21}  {spread(xs):<26} {note}")
    print("-" * 100)
    if naive_on and "eager" in variants:
        verdict = "PASS" if passed else "FAIL"
        print(f"{'rollout vs naive (eager)':<30} {fmt(ratio, '.1f') + 'x':>21}  target >= "
              f"{TARGET_RATIO:.0f}x on the 2-core CPU: {verdict}")
    print()
    print(f"{'phase (s / iteration, median)':<30} " + " ".join(f"{v:>12}" for v in variants))
    for k in TOP_PHASES:
        label = "rollout (+ buffer writes)" if k == "rollout" else k
        print(f"{label:<30} " + " ".join(
            f"{fmt((per_variant[v]['phase_s'] or {}).get(k), '.4f'):>12}" for v in variants))
    print(f"{'iteration (end to end)':<30} " + " ".join(
        f"{fmt(per_variant[v]['iteration_s'], '.4f'):>12}" for v in variants))
    print(f"{'warm_up (compile incl.)':<30} " + " ".join(
        f"{fmt(per_variant[v]['warmup_s'], '.2f'):>12}" for v in variants))
    print(f"# warm-up iterations (compile, autotune, graph recording) are not timed; "
          f"during measurement other processes kept {'?' if other is None else format(other, '.2f')}"
          f" of {os.cpu_count()} CPUs busy; loadavg now {os.getloadavg()[0]:.2f}; "
          f"total benchmark time {time.perf_counter() - bench_start:.1f} s")

    result: dict[str, Any] = {
        "benchmark": "bench_train",
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "device": device_name(device),
        "device_type": device.type,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "preset": "cuda" if device.type == "cuda" else "cpu",
        "config": to_dict(cfg),
        "n_envs": cfg.n_envs,
        "rollout_steps": cfg.rollout_steps,
        "variants": per_variant,
        "naive_envs": n_naive if naive_on else None,
        "naive_env_steps_timed": n_naive * args.naive_steps * args.rounds if naive_on else 0,
        "rounds": args.rounds,
        "iterations": args.iterations,
        "naive_rollout_sps": r(naive),
        "rollout_sps": rollout,
        "sps": eager.get("sps"),
        "compiled_rollout_sps": compiled.get("rollout_sps"),
        "compiled_sps": compiled.get("sps"),
        "compile_error": errors.get("compiled") or (None if "compiled" in variants else "not measured"),
        "rollout_vs_naive": r(ratio, 2),
        "rollout_vs_naive_target": TARGET_RATIO,
        "rollout_vs_naive_pass": passed,
        "phase_s": eager.get("phase_s"),
        "compiled_phase_s": compiled.get("phase_s"),
        "iteration_s": eager.get("iteration_s"),
        "compiled_iteration_s": compiled.get("iteration_s"),
        "warmup_s": eager.get("warmup_s"),
        "compiled_warmup_s": compiled.get("warmup_s"),
        "other_cpus_busy": None if other is None else round(other, 3),
        "spread": {"naive_rollout_sps": [r(min(naive_sps)), r(max(naive_sps))] if naive_sps else None,
                   **{f"{v}_{k}": val for v in variants
                      for k, val in per_variant[v]["spread"].items()}},
    }
    line = json.dumps(result, separators=(",", ":"))
    if args.json_out:
        out = Path(args.json_out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")
    print(line, flush=True)
    return 0 if trainers else 1


if __name__ == "__main__":
    sys.exit(main())
