#!/usr/bin/env python3
"""Soak test: does a long training run keep its memory flat? `python scripts/soak_train.py`

Two runs of `python -m trainer` (CPU preset unless --config), the process's resident memory
(VmRSS) sampled every --interval seconds together with the iteration it is at (the rows of its
metrics.jsonl):

1. --iterations (default 1000) with profiling off. After the warm-up (the first 10% of the
   iterations) the memory must not grow: the median RSS of the last 10% of the iterations is
   within --max-growth (5%) of the median over iterations 10%-20%.
2. One window profiled (--window, default 50-55, --mode lite), then --after-window (default
   1000) more iterations once the trace is written (in the iteration after the window). What
   users need is no growth after the window: the RSS must stay flat over those iterations, the
   median over their last 10% within --max-growth (5%) of the median over their first 10%.
   (Not the distance from the RSS before the window: the window's peak may leave the heap
   somewhat larger, which costs a bounded few MB and stays put; GOODHART_HEAP_GUARD=1 narrows
   it, goodhart_prof/capture/heap_guard.py. It is printed, not judged. --heap-guard runs with it.)

Prints a table of RSS by progress for each run and, as its last line, one JSON object with the
figures and the verdicts. Exit code 1 when a verdict fails. Timings do not matter here, so a
busy machine only makes it slower (the trainer runs one torch thread unless --threads says
otherwise: two spinning OpenMP threads on a shared core run many times slower).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def count_rows(path: Path) -> int:
    try:
        with open(path, "rb") as fh:
            return sum(1 for _ in fh)
    except FileNotFoundError:
        return 0


def run_sampled(iterations: int, out: Path, config: str | None, interval: float,
                prof: dict[str, str] | None, threads: int) -> list[tuple[float, int, float]]:
    """Run the trainer; (seconds, iteration, rss MB) samples until it exits."""
    argv = [sys.executable, "-m", "trainer", "--total-iterations", str(iterations), "--output-dir",
            str(out), "--no-progress", "--device", "cpu"]
    if config:
        argv += ["--config", str(Path(config).resolve())]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROF_")}
    env.update(prof or {})
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    samples, started = [], time.monotonic()
    metrics = out / "metrics.jsonl"
    while proc.poll() is None:
        rss = rss_mb(proc.pid)
        if rss is not None:
            samples.append((time.monotonic() - started, count_rows(metrics), rss))
        time.sleep(interval)
    _, stderr = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"trainer failed ({proc.returncode}): {stderr[-2000:]}")
    return samples


def median_rss(samples, lo: float, hi: float) -> float | None:
    """Median RSS of the samples taken while iterations lo..hi (exclusive) ran."""
    values = [rss for _, it, rss in samples if lo <= it < hi]
    return round(statistics.median(values), 1) if values else None


def table(title: str, samples, total: int) -> list[str]:
    lines = [title, f"{'progress':>10} {'iteration':>10} {'seconds':>9} {'RSS MB':>9}"]
    for pct in range(0, 101, 10):
        target = total * pct / 100
        s = min(samples, key=lambda x: abs(x[1] - target))
        lines.append(f"{pct:>9}% {s[1]:>10} {s[0]:>9.1f} {s[2]:>9.1f}")
    peak = max(samples, key=lambda x: x[2])
    lines.append(f"{'peak':>10} {peak[1]:>10} {peak[0]:>9.1f} {peak[2]:>9.1f}")
    return lines


def growth(before: float | None, after: float | None) -> float | None:
    return None if not before or after is None else round(after / before - 1, 4)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iterations", type=int, default=1000, help="Iterations of the unprofiled run.")
    ap.add_argument("--after-window", type=int, default=1000,
                    help="Iterations after the one that writes the trace, over which the RSS must "
                         "stay flat (0: skip the profiled run).")
    ap.add_argument("--heap-guard", action="store_true",
                    help="Run the profiled run with GOODHART_HEAP_GUARD=1.")
    ap.add_argument("--window", default="50-55", help="The profiled window (PROF_ITERATIONS).")
    ap.add_argument("--mode", default="lite", choices=["lite", "full"])
    ap.add_argument("--config", default=None, help="Trainer config (TOML); default: the CPU preset.")
    ap.add_argument("--interval", type=float, default=0.5, help="Seconds between samples.")
    ap.add_argument("--max-growth", type=float, default=0.05, help="Allowed growth (0.05 = 5%%).")
    ap.add_argument("--threads", type=int, default=1,
                    help="Torch threads of the trainer (default 1: the pace then survives other "
                         "processes on the machine; 0: torch's default).")
    args = ap.parse_args(argv)
    first, last = (int(x) for x in (args.window.split("-") + [args.window])[:2])
    result: dict = {"iterations": args.iterations, "config": args.config or "CPU preset",
                    "threads": args.threads or "torch default", "max_growth": args.max_growth}
    lines: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        started = time.monotonic()
        off = run_sampled(args.iterations, Path(tmp) / "off", args.config, args.interval, None,
                          args.threads)
        n = args.iterations
        base, end = median_rss(off, 0.1 * n, 0.2 * n), median_rss(off, 0.9 * n, n + 1)
        result["off"] = {"seconds": round(time.monotonic() - started, 1), "samples": len(off),
                         "rss_after_warmup_mb": base, "rss_end_mb": end,
                         "rss_peak_mb": round(max(s[2] for s in off), 1), "growth": growth(base, end)}
        result["off"]["ok"] = result["off"]["growth"] is not None and \
            result["off"]["growth"] < args.max_growth
        lines += table(f"profiling off, {n} iterations", off, n)
        if args.after_window:
            written = last + 1  # the iteration after the window stops the profiler, writes the trace
            m = written + 1 + args.after_window
            started = time.monotonic()
            env = {"PROF_ENABLED": "1", "PROF_ITERATIONS": f"{first}-{last}", "PROF_MODE": args.mode}
            if args.heap_guard:
                env["GOODHART_HEAP_GUARD"] = "1"
            prof = run_sampled(m, Path(tmp) / "prof", args.config, args.interval, env, args.threads)
            tenth = max(1, args.after_window // 10)
            # A sample with r rows in metrics.jsonl was taken while iteration r ran (or later:
            # the logger writes asynchronously), so r >= written + 1 means the trace is written.
            lo = written + 1
            before = median_rss(prof, max(0, first - max(5, first // 2)), first)
            during = round(max((s[2] for s in prof if first <= s[1] <= written), default=0), 1)
            after_start = median_rss(prof, lo, lo + tenth)
            after_end = median_rss(prof, m + 1 - tenth, m + 1)
            result["profiled"] = {"iterations": m, "window": [first, last], "mode": args.mode,
                                  "heap_guard": args.heap_guard, "after_window": args.after_window,
                                  "seconds": round(time.monotonic() - started, 1),
                                  "samples": len(prof), "rss_before_window_mb": before,
                                  "rss_window_peak_mb": during,
                                  "rss_after_window_start_mb": after_start,
                                  "rss_after_window_end_mb": after_end,
                                  "growth": growth(after_start, after_end),
                                  "vs_before_window": growth(before, after_end)}
            result["profiled"]["ok"] = result["profiled"]["growth"] is not None and \
                result["profiled"]["growth"] < args.max_growth
            lines += [""] + table(f"profiling window {first}-{last} ({args.mode}), {m} iterations",
                                  prof, m)
    print("\n".join(lines))
    print()
    off = result["off"]
    print(f"profiling off: RSS {off['rss_after_warmup_mb']} MB after warm-up -> {off['rss_end_mb']} MB "
          f"at the end ({off['growth']:+.1%}): {'ok' if off['ok'] else 'FAILS'} (limit "
          f"{args.max_growth:.0%})")
    if "profiled" in result:
        p = result["profiled"]
        print(f"one window: RSS {p['rss_before_window_mb']} MB before, peak {p['rss_window_peak_mb']} MB "
              f"around it; over the {p['after_window']} iterations after the trace was written "
              f"{p['rss_after_window_start_mb']} -> {p['rss_after_window_end_mb']} MB "
              f"({'?' if p['growth'] is None else format(p['growth'], '+.1%')}): "
              f"{'ok' if p['ok'] else 'FAILS'} (limit {args.max_growth:.0%}; "
              f"{'?' if p['vs_before_window'] is None else format(p['vs_before_window'], '+.1%')} over "
              f"the RSS before the window, not judged)")
    result["ok"] = off["ok"] and result.get("profiled", {}).get("ok", True)
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
