#!/usr/bin/env python
"""The anti-pattern zoo as a benchmark: does `analyze` find every planted slowdown, and only it?

Runs `goodhart-prof run` once clean and once per pattern (`--inject NAME`, one at a time, one after
the other so their timings do not disturb each other), analyzes each run's traces and prints:

* the confusion table: per zoo rule, whether it fired on its own pattern's run (detected / MISSED,
  or n/m where the device cannot show it: on the CPU the CUDA-only patterns and tiny_batch, whose
  launch-bound evidence needs GPU kernels), its evidence (count per iteration, top site), and the
  runs where it fired although that run did not plant it (false alarms: the clean run or any
  other pattern's run);
* each pattern's slowdown versus clean: clean env-steps/s / pattern env-steps/s, both from
  run.json (throughput over the untraced iterations; tiny_batch's lower figure is its point).
  Besides the profiled run, `--timing-rounds` more runs of each (`python -m trainer`, profiling
  off; clean and the patterns interleaved, the order rotating every round) give a median per
  run kind; the clean runs' min-max spread shows the noise.

recall = detected / measurable patterns; precision = true firings / all firings of zoo rules
(a firing is true when the rule is the run's own pattern). The last line printed is one JSON
object. Timings come from one run each: compare them on an idle machine (the load average and the
CPU time other processes used are printed).
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

from benchlib import ForeignLoad  # noqa: E402
from goodhart_prof.analysis import analyze  # noqa: E402
from goodhart_prof.analysis.rules import ZOO_RULES  # noqa: E402
from goodhart_prof.trace.load import load  # noqa: E402
from trainer import antipatterns  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--config", default=None, help="trainer TOML (default: the device's preset)")
    p.add_argument("--iterations", default="20-22",
                   help="traced window (default 20-22: memory_growth needs three iterations)")
    p.add_argument("--total-iterations", type=int, default=32,
                   help="iterations per run; throughput counts the untraced ones (default 32)")
    p.add_argument("--mode", choices=["lite", "full"], default="full")
    p.add_argument("--patterns", default=",".join(antipatterns.NAMES),
                   help="comma list (default: the whole zoo)")
    p.add_argument("--timing-rounds", type=int, default=2,
                   help="extra unprofiled runs of each kind for the throughput median (default 2)")
    p.add_argument("--threads", type=int, default=None,
                   help="OMP_NUM_THREADS for the runs (1 makes timings robust to other load)")
    p.add_argument("--keep", default=None, help="keep the runs in this folder (default: a temp dir)")
    p.add_argument("--json-out", default=None, help="also write the JSON summary here")
    return p.parse_args(argv)


def child_env(args) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROF_")}
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    return env


def record(name: str, out: Path, args) -> dict:
    argv = [sys.executable, "-m", "goodhart_prof.cli", "run", "--iterations", args.iterations,
            "--total-iterations", str(args.total_iterations), "--mode", args.mode,
            "--output-dir", str(out.parent), "--name", out.name, "--device", args.device, "--no-progress"]
    argv += ["--config", args.config] if args.config else []
    argv += ["--inject", name] if name != "clean" else []
    env = child_env(args)
    started = time.perf_counter()
    res = subprocess.run(argv, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"{name}: goodhart-prof run failed (exit {res.returncode}):\n{res.stderr[-3000:]}")
    run = json.loads((out / "run.json").read_text())
    analysis = analyze(load(out))
    fired = {f.rule: f.evidence for f in analysis.findings if f.rule in ZOO_RULES}
    return {"name": name, "env_steps_per_s": run["env_steps_per_s"], "device": run["device"],
            "device_type": run["device_type"], "fired": fired,
            "wall_s": round(time.perf_counter() - started, 1)}


def timed(name: str, out: Path, args) -> float:
    """env-steps/s of one unprofiled run (python -m trainer, run.json)."""
    argv = [sys.executable, "-m", "trainer", "--total-iterations", str(args.total_iterations),
            "--output-dir", str(out), "--device", args.device, "--no-progress"]
    argv += ["--config", args.config] if args.config else []
    argv += ["--inject", name] if name != "clean" else []
    env = child_env(args)
    res = subprocess.run(argv, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"{name}: python -m trainer failed (exit {res.returncode}):\n{res.stderr[-3000:]}")
    return json.loads((out / "run.json").read_text())["env_steps_per_s"]


def measurable(name: str, device_type: str) -> bool:
    return device_type == "cuda" or name in antipatterns.CPU_DETECTABLE


def evidence_text(ev: dict) -> str:
    parts = []
    if "per_iteration" in ev:
        parts.append(f"{ev['per_iteration']}/it")
    for key in ("kernels_per_step", "median_kernel_us", "low_precision_us", "backward_ops",
                "growth_per_iteration"):
        if key in ev:
            parts.append(f"{key}={ev[key]}")
    sites = ev.get("sites") or []
    if sites and "site" in sites[0]:
        parts.append(str(sites[0]["site"]))
    kept = ev.get("kept_by") or []
    if kept:
        parts.append(f"kept by {kept[0]['phase']} / {kept[0]['op']}")
    return " ".join(parts)


def main(argv=None) -> None:
    args = parse_args(argv)
    patterns = antipatterns.parse(args.patterns)
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_zoo-"))
    folder.mkdir(parents=True, exist_ok=True)
    load0, noise = os.getloadavg()[0], ForeignLoad()
    runs = {}
    for name in ("clean", *patterns):
        runs[name] = record(name, folder / name, args)
        print(f"  ran {name}: {runs[name]['env_steps_per_s']:,.0f} env-steps/s, "
              f"zoo rules fired: {sorted(runs[name]['fired']) or '-'} ({runs[name]['wall_s']} s)",
              file=sys.stderr)
    kinds = ["clean", *patterns]
    samples = {name: [runs[name]["env_steps_per_s"]] for name in kinds}
    for r in range(args.timing_rounds):
        k = r % len(kinds)
        for name in kinds[k:] + kinds[:k]:
            samples[name].append(timed(name, folder / "timing" / name, args))
        print(f"  timing round {r + 1}/{args.timing_rounds} done", file=sys.stderr)
    for name in kinds:
        runs[name]["env_steps_per_s"] = statistics.median(samples[name])
    device_type = runs["clean"]["device_type"]
    clean_sps = runs["clean"]["env_steps_per_s"]

    rows, tp, fp, detected, missed = [], 0, 0, [], []
    false_alarms: list[dict] = []
    for rule in ZOO_RULES:
        own = runs.get(rule)
        m = measurable(rule, device_type)
        if own is None:
            status, ev = "not run", ""
        elif rule in own["fired"]:
            status, ev = "detected", evidence_text(own["fired"][rule])
            tp += 1
            detected.append(rule)
        elif m:
            status, ev = "MISSED", ""
            missed.append(rule)
        else:
            status, ev = "n/m", ""
        wrong = [name for name, r in runs.items() if name != rule and rule in r["fired"]]
        fp += len(wrong)
        false_alarms += [{"rule": rule, "run": name} for name in wrong]
        rows.append((rule, "yes" if m else "no", status, ", ".join(wrong) or "-", ev))

    slowdowns = {name: round(clean_sps / r["env_steps_per_s"], 3)
                 for name, r in runs.items() if name != "clean" and r["env_steps_per_s"]}
    n_measurable = sum(measurable(p, device_type) for p in patterns)
    recall = sum(1 for p in patterns if measurable(p, device_type) and p in detected) / n_measurable \
        if n_measurable else None
    precision = tp / (tp + fp) if tp + fp else None

    threads = f", {args.threads} thread(s) per run" if args.threads else ""
    print(f"anti-pattern zoo on {runs['clean']['device']} ({device_type}), mode {args.mode}, "
          f"iterations {args.iterations} of {args.total_iterations}{threads}; runs in {folder}")
    header = ("rule", "measurable", "own run", "false alarms on", "evidence")
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(4)]
    print("  ".join(h.ljust(w) for h, w in zip(header[:4], widths)) + "  " + header[4])
    for r in rows:
        print("  ".join(str(v).ljust(w) for v, w in zip(r[:4], widths)) + "  " + r[4])
    print()
    print(f"{'run':<20} {'env-steps/s':>12} {'slowdown vs clean':>18}  "
          f"(median of {1 + args.timing_rounds} runs each)")
    spread = f"(runs {min(samples['clean']):,.0f}-{max(samples['clean']):,.0f})"
    print(f"{'clean':<20} {clean_sps:>12,.0f} {'1.000x':>18}  {spread}")
    for name in patterns:
        r = runs[name]
        note = "" if measurable(name, device_type) else "  (not measurable here)"
        print(f"{name:<20} {r['env_steps_per_s']:>12,.0f} {slowdowns.get(name, float('nan')):>17.3f}x{note}")
    others = noise.cpus_used()
    print(f"\nrecall {recall if recall is None else round(recall, 3)} over {n_measurable} measurable "
          f"patterns, precision {precision if precision is None else round(precision, 3)} "
          f"({tp} true, {fp} false firings); load average {load0:.2f} at start, other processes "
          f"used {others if others is None else round(others, 2)} CPUs meanwhile")
    not_measurable = [p for p in patterns if not measurable(p, device_type)]
    summary = {
        "bench": "bench_zoo", "device": runs["clean"]["device"], "device_type": device_type,
        "mode": args.mode, "threads": args.threads, "iterations": args.iterations, "total_iterations": args.total_iterations,
        "recall": recall, "precision": precision,
        "measurable": [p for p in patterns if measurable(p, device_type)],
        "not_measurable": not_measurable, "detected": detected, "missed": missed,
        "false_alarms": false_alarms, "slowdowns": slowdowns,
        "env_steps_per_s": {name: r["env_steps_per_s"] for name, r in runs.items()},
        "env_steps_per_s_runs": samples, "timing_rounds": args.timing_rounds,
        "load_average": round(load0, 2), "other_cpus_used": None if others is None else round(others, 2),
    }
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
