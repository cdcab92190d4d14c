#!/usr/bin/env python
"""Cost of the profiler hooks: seconds per training iteration, four variants in one process.

(Plus an A/A control; see below.)

* nohook: a copy of `Trainer.run_iteration` (and of `ppo_update`) defined below with every
  `with hooks.iteration/phase(...)` line removed; it calls the same trainer functions
  (act_all, env_step, gae_fn, loss_fn, optimizer) in the same order. At start the script checks
  that it is the same computation: from one snapshot, one `nohook` iteration and one
  `run_iteration` with `NoHooks` must give bitwise the same weights (on CUDA, whose kernels
  are not bitwise deterministic, the difference is only reported).
* off: `Trainer.run_iteration` with `make_hooks(ProfSettings(enabled=False))`, i.e. `NoHooks`,
  the production path when profiling is off.
* lite / full: `ProfilerHooks` in that mode, tracing every iteration of the variant's block
  (a window like the default 50-55). Each block first runs the window's warm-up iteration
  (first - 1: the profiler is set up and records nothing), untimed for s/iter: the warm-up is
  not a traced iteration. Its own time is reported apart, as `warmup_ratio` (warm-up iteration
  / nohook's median s/iter). Recording starts inside the first traced iteration and counts;
  stopping the profiler and writing the trace happen when the window closes and are taken out
  of the per-iteration time (the device is synchronized first, so queued device work still
  counts) and reported separately.

A fifth variant, nohook2, runs the no-hook loop again as an A/A control: its ratio to nohook
shows how far apart two identical variants land on this machine. "off" passes when it is no
further from 1 than max(nohook's relative IQR, |A/A ratio - 1|).

The variants run interleaved in rounds (nohook, nohook2, off, lite, full, then nohook2, off,
lite, full, nohook, ...: the order rotates every round) after one untimed round of
one-iteration blocks; each round times a block of `--window` iterations per variant (device
synchronized before each clock read). Reported: the median over rounds of seconds per
iteration, min/max and IQR, and ratios to nohook (median of the per-round paired ratios).
Traces go to a temporary folder (or --keep-traces). Torch's default thread count is used unless
--threads is given. The last line printed is one JSON object.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

import goodhart_prof.capture.hooks as prof_hooks
from goodhart_prof.capture.hooks import ProfilerHooks, ProfSettings, make_hooks
from benchlib import ForeignLoad, device_name, sync
from trainer.config import ConfigError, build_config, to_dict
from trainer.env import GoodhartGridWorld
from trainer.ppo import N_UPDATE_STATS, Minibatch, clip_grad_norm_no_sync
from trainer.train import Trainer, sum_across_ranks

VARIANTS = ("nohook", "nohook2", "off", "lite", "full")  # nohook2: A/A control, same code
TARGETS = {"lite": 1.10, "full": 1.30}  # issue 13: the profiled iteration within 10% / 30%


# -- the iteration without any hook code ------------------------------------------------------
def ppo_update_nohook(loss_fn, params, optimizer, buf, advantages, returns, epochs, minibatches,
                      max_grad_norm):
    """trainer.ppo.ppo_update without the `with phase(...)` lines."""
    flat = Minibatch(buf.obs.flatten(0, 1), buf.actions.flatten(0, 1), buf.logprobs.flatten(0, 1),
                     advantages.flatten(0, 1), returns.flatten(0, 1), buf.values.flatten(0, 1))
    batch = flat.actions.shape[0]
    size = batch // minibatches
    totals = torch.zeros(N_UPDATE_STATS, device=advantages.device)
    for _ in range(epochs):
        order = torch.randperm(batch, device=advantages.device)
        for k in range(minibatches):
            idx = order[k * size:(k + 1) * size]
            mb = Minibatch(*(t.index_select(0, idx) for t in flat))
            loss, stats = loss_fn(mb)
            loss.backward()
            clip_grad_norm_no_sync(params, max_grad_norm)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            totals += stats
    return totals / (epochs * minibatches)


def run_iteration_nohook(tr: Trainer, it: int, logger=None) -> None:
    """Trainer.run_iteration without the `with hooks.iteration/phase(...)` lines."""
    cfg, buf = tr.cfg, tr.buf
    for t in range(cfg.rollout_steps):
        out, final_values = tr.act_all(tr.policy_obs)
        res = tr.env_step(tr.state, out.action)
        tr.store_step(t, out, res, final_values)
    out, final_values = tr.act_all(tr.policy_obs)
    last_value = out.value
    tr.finish_rollout(final_values)
    advantages, returns = tr.gae_fn(buf.rewards, buf.values, buf.terminated, buf.truncated,
                                    buf.final_values, last_value)
    tr.policy.value_head.update_stats(returns, sum_across_ranks)
    update_stats = ppo_update_nohook(tr.loss_fn, tr.params, tr.optimizer, buf, advantages, returns,
                                     cfg.epochs, cfg.minibatches, cfg.max_grad_norm)
    tr.state, episode = GoodhartGridWorld.drain_stats(tr.state)
    if logger is not None:
        logger.submit(it, tr.steps_per_iteration, tr._metrics(episode, update_stats))
    tr.iteration = it + 1


# -- profiler hooks that time their own window close ------------------------------------------
class ExportTimer:
    """While active, times every trace write the loop waits for: `start_write` (the JSON export
    and the start of the child that compresses it off the loop; ProfilerHooks._finish looks the
    name up in its module, so wrapping the module attribute catches it; restored on exit).
    Before the compression moved off the loop (2026-11-27) the hooks called
    `write_profiler_trace`, which compressed in the loop: this timer then timed that."""

    NAME = "start_write" if hasattr(prof_hooks, "start_write") else "write_profiler_trace"

    def __init__(self):
        self.times: list[float] = []
        self._original = None

    def __enter__(self) -> "ExportTimer":
        self._original = original = getattr(prof_hooks, self.NAME)

        def timed_write(prof, path):
            start = time.perf_counter()
            result = original(prof, path)
            self.times.append(time.perf_counter() - start)
            return result

        setattr(prof_hooks, self.NAME, timed_write)
        return self

    def __exit__(self, *exc) -> None:
        setattr(prof_hooks, self.NAME, self._original)


class TimedProfilerHooks(ProfilerHooks):
    """ProfilerHooks whose window close (profiler stop + trace export) is timed, not changed."""

    finish_s = 0.0

    def _finish(self) -> None:
        sync(torch.device(self.device_type))  # device work queued by the iteration is its own
        start = time.perf_counter()
        super()._finish()
        self.finish_s += time.perf_counter() - start


# -- statistics -------------------------------------------------------------------------------
def quartiles(xs: list[float]) -> tuple[float, float]:
    if len(xs) < 2:
        return xs[0], xs[0]
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], q[2]


def summary(xs: list[float]) -> dict[str, float]:
    q1, q3 = quartiles(xs)
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "q1": q1, "q3": q3}


def check_same_computation(tr: Trainer) -> str:
    """One iteration each way from the same snapshot: the weights must agree."""
    snap = tr.snapshot()
    saved = tr.hooks
    tr.hooks = make_hooks(ProfSettings(enabled=False))
    tr.run_iteration(tr.iteration, None)
    a = [p.detach().clone() for p in tr.params]
    tr.restore(snap)
    run_iteration_nohook(tr, tr.iteration)
    b = [p.detach().clone() for p in tr.params]
    tr.restore(snap)
    tr.hooks = saved
    if all(torch.equal(x, y) for x, y in zip(a, b)):
        return "identical"
    worst = max((x.float() - y.float()).abs().max().item() for x, y in zip(a, b))
    if tr.device.type == "cuda":
        # cuDNN/atomics are not bitwise deterministic and Adam turns tiny gradient differences
        # into steps of up to lr, so on CUDA only report how close the two came.
        return f"not bitwise equal on CUDA (max abs weight diff {worst:.2e}; lr {tr.cfg.lr})"
    raise SystemExit(f"bench_hooks: the no-hook copy of run_iteration no longer matches "
                     f"Trainer.run_iteration (max abs weight diff {worst:.3e}); update the copy")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="Seconds per training iteration with no hook code, hooks off (NoHooks), "
                    "lite and full profiling, interleaved in rounds. Prints a table; the last "
                    "line is one JSON object.")
    ap.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                    help="auto: CUDA when available (default: %(default)s)")
    ap.add_argument("--config", default=None, help="optional TOML config (as for python -m trainer)")
    ap.add_argument("--n-envs", type=int, default=None,
                    help="batch size of the env (default: the device preset's)")
    ap.add_argument("--compile", choices=("auto", "on", "off"), default="auto",
                    help="torch.compile as in the config (auto: on for CUDA; default: %(default)s)")
    ap.add_argument("--rounds", type=int, default=7,
                    help="timed rounds; each runs every variant once (default: %(default)s)")
    ap.add_argument("--window", type=int, default=6,
                    help="iterations per variant per round = traced window length "
                         "(default: %(default)s, like PROF_ITERATIONS=50-55)")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch.set_num_threads (default: leave torch's default)")
    ap.add_argument("--keep-traces", default=None,
                    help="write traces into this folder instead of a temporary one")
    ap.add_argument("--json-out", default=None, help="also write the final JSON object to this file")
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.window < 1:
        ap.error("--rounds and --window must be >= 1")
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        cfg = build_config(args.config, device=args.device, n_envs=args.n_envs,
                           compile=args.compile, progress=False, warmup=True)
    except ConfigError as exc:
        ap.error(str(exc))
    device = torch.device(cfg.device)
    load_start = os.getloadavg()
    foreign = ForeignLoad()
    bench_start = time.perf_counter()
    print(f"# bench_hooks: device={cfg.device} ({device_name(device)}), torch {torch.__version__}, "
          f"threads={torch.get_num_threads()}, n_envs={cfg.n_envs}, rollout_steps={cfg.rollout_steps}, "
          f"compile={cfg.compile}, window={args.window}, rounds={args.rounds}, "
          f"loadavg={load_start[0]:.2f}", flush=True)

    tr = Trainer(cfg)
    warm_s = tr.warm_up()
    same = check_same_computation(tr)
    print(f"# warm_up {warm_s:.2f} s; nohook copy vs run_iteration: {same}", flush=True)

    tmp_ctx = tempfile.TemporaryDirectory(prefix="bench_hooks-")
    trace_root = Path(args.keep_traces) if args.keep_traces else Path(tmp_ctx.name)

    def block(variant: str, window: int) -> tuple[float, float, float, int | None, float | None]:
        """Run one block of `window` iterations; (s/iteration, finish_s, export_s, trace bytes,
        seconds of the warm-up iteration before it (lite/full only), untimed for s/iteration)."""
        hooks, warmup = None, None
        if variant in ("lite", "full"):
            first = tr.iteration + 1  # tr.iteration is the warm-up iteration
            settings = ProfSettings(enabled=True, first=first, last=first + window - 1,
                                    mode=variant, output_dir=trace_root / variant)
            hooks = TimedProfilerHooks(settings, tr.rank, device.type)
            tr.hooks = hooks
            sync(device)
            start = time.perf_counter()
            tr.run_iteration(settings.warmup_iteration, None)
            sync(device)
            warmup = time.perf_counter() - start
        elif variant == "off":
            hooks = make_hooks(ProfSettings(enabled=False), tr.rank, device.type)
        tr.hooks = hooks
        first = tr.iteration
        last = first + window - 1
        n_export = len(export_timer.times)
        sync(device)
        start = time.perf_counter()
        if variant.startswith("nohook"):
            for it in range(first, last + 1):
                run_iteration_nohook(tr, it)
        else:
            for it in range(first, last + 1):
                tr.run_iteration(it, None)
        sync(device)
        total = time.perf_counter() - start
        finish = getattr(hooks, "finish_s", 0.0)
        export = sum(export_timer.times[n_export:])
        size = None
        if isinstance(hooks, ProfilerHooks):
            hooks.close()
            size = hooks.trace_path.stat().st_size if hooks.trace_path.is_file() else None
        tr.hooks = make_hooks(ProfSettings(enabled=False))
        gc.collect()  # untimed, after every block alike: no variant inherits another's garbage
        return (total - finish) / window, finish, export, size, warmup

    per_it: dict[str, list[float]] = {v: [] for v in VARIANTS}
    finish_s: dict[str, list[float]] = {"lite": [], "full": []}
    export_s: dict[str, list[float]] = {"lite": [], "full": []}
    trace_bytes: dict[str, int | None] = {"lite": None, "full": None}
    warmup_s: dict[str, list[float]] = {"lite": [], "full": []}
    with tmp_ctx, ExportTimer() as export_timer:
        for v in VARIANTS:  # untimed round: first profiler start in a process, allocator, caches
            block(v, 1)
        print(f"{'round':<6} " + " ".join(f"{v:>11}" for v in VARIANTS) + "   order")
        for rnd in range(args.rounds):
            # Rotate the order every round so no variant always follows the same one.
            order = VARIANTS[rnd % len(VARIANTS):] + VARIANTS[:rnd % len(VARIANTS)]
            for v in order:
                s, fin, exp, size, warm = block(v, args.window)
                per_it[v].append(s)
                if v in finish_s:
                    finish_s[v].append(fin)
                    export_s[v].append(exp)
                    trace_bytes[v] = size
                    warmup_s[v].append(warm)
            print(f"{rnd:<6} " + " ".join(f"{per_it[v][-1]:>11.4f}" for v in VARIANTS)
                  + "   " + ",".join(order), flush=True)

    stats = {v: summary(per_it[v]) for v in VARIANTS}
    paired = {v: [x / y for x, y in zip(per_it[v], per_it["nohook"])] for v in VARIANTS}
    ratio = {v: statistics.median(paired[v]) for v in VARIANTS}
    base = stats["nohook"]
    rel_iqr = (base["q3"] - base["q1"]) / base["median"]
    # "Indistinguishable": off is no further from nohook than nohook is from itself (the A/A
    # control) or than nohook's own round-to-round spread (relative IQR).
    noise = max(rel_iqr, abs(ratio["nohook2"] - 1.0))
    off_pass = abs(ratio["off"] - 1.0) <= noise
    verdict = {
        "off": off_pass,
        "lite": ratio["lite"] <= TARGETS["lite"],
        "full": ratio["full"] <= TARGETS["full"],
    }

    print()
    print(f"{'variant':<8} {'s/iter median':>13} {'min':>9} {'max':>9} {'IQR':>19} "
          f"{'ratio':>7} {'ratio min..max':>15}  target")
    print("-" * 106)
    for v in VARIANTS:
        s, p = stats[v], paired[v]
        if v == "nohook":
            target = f"baseline; spread (rel. IQR) {rel_iqr:.3f}"
        elif v == "nohook2":
            target = "A/A control: same code as nohook"
        elif v == "off":
            target = (f"|r-1| <= max(spread, |A/A-1|) = {noise:.3f}: "
                      f"{'PASS' if verdict['off'] else 'FAIL'}")
        else:
            target = f"<= {TARGETS[v]:.2f}x: {'PASS' if verdict[v] else 'FAIL'}"
        print(f"{v:<8} {s['median']:>13.4f} {s['min']:>9.4f} {s['max']:>9.4f} "
              f"{'[' + format(s['q1'], '.4f') + ', ' + format(s['q3'], '.4f') + ']':>19} "
              f"{ratio[v]:>6.3f}x {format(min(p), '.3f') + '..' + format(max(p), '.3f'):>15}  {target}")
    print("-" * 106)
    stop_s = {v: [f - e for f, e in zip(finish_s[v], export_s[v])] for v in finish_s}
    warmup_ratio = {v: statistics.median(w / base["median"] for w in warmup_s[v]) for v in warmup_s}
    for v in ("lite", "full"):
        print(f"{v} warm-up iteration (before the window, not in s/iter): median "
              f"{statistics.median(warmup_s[v]):.4f} s = {warmup_ratio[v]:.3f}x nohook's s/iter")
    for v in ("lite", "full"):
        fin, exp, stop = (statistics.median(x[v]) for x in (finish_s, export_s, stop_s))
        size = trace_bytes[v]
        print(f"{v} window close, {args.window} traced iterations (median, not in s/iter): "
              f"stop {stop:.3f} s + export {exp:.3f} s = {fin:.3f} s; trace "
              f"{'?' if size is None else format(size / 1e6, '.2f')} MB (gz)")
    load_end = os.getloadavg()
    other = foreign.cpus_used()
    print(f"# loadavg start {load_start[0]:.2f}, end {load_end[0]:.2f}; other processes kept "
          f"{'?' if other is None else format(other, '.2f')} of {os.cpu_count()} CPUs busy; "
          f"total benchmark time {time.perf_counter() - bench_start:.1f} s")

    def r(x: float, nd: int = 6) -> float:
        return round(x, nd)

    result: dict[str, Any] = {
        "benchmark": "bench_hooks",
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "device": device_name(device),
        "device_type": device.type,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "config": to_dict(cfg),
        "n_envs": cfg.n_envs,
        "compiled": tr.compiled,
        "rounds": args.rounds,
        "window": args.window,
        "nohook_s": r(stats["nohook"]["median"]),
        "off_s": r(stats["off"]["median"]),
        "lite_s": r(stats["lite"]["median"]),
        "full_s": r(stats["full"]["median"]),
        "off_ratio": r(ratio["off"], 4),
        "lite_ratio": r(ratio["lite"], 4),
        "full_ratio": r(ratio["full"], 4),
        "spread": r(rel_iqr, 4),
        "spread_definition": "relative IQR of nohook s/iter over rounds: (q3-q1)/median",
        "aa_ratio": r(ratio["nohook2"], 4),
        "off_tolerance": r(noise, 4),
        "ratio_range": {v: [r(min(paired[v]), 4), r(max(paired[v]), 4)] for v in VARIANTS[1:]},
        "per_variant": {v: {k: r(x) for k, x in stats[v].items()} for v in VARIANTS},
        "stop_s": {v: r(statistics.median(stop_s[v]), 4) for v in stop_s},
        "export_s": {v: r(statistics.median(export_s[v]), 4) for v in export_s},
        "warmup_s": {v: r(statistics.median(warmup_s[v]), 4) for v in warmup_s},
        "warmup_ratio": {v: r(warmup_ratio[v], 4) for v in warmup_ratio},
        "trace_bytes": trace_bytes,
        "pass": verdict,
        "nohook_check": same,
        "loadavg": [round(load_start[0], 2), round(load_end[0], 2)],
        "other_cpus_busy": None if other is None else round(other, 3),
    }
    if args.json_out:
        out = Path(args.json_out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, separators=(",", ":")), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
