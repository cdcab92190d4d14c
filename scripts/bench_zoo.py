#!/usr/bin/env python
"""The anti-pattern zoo as a benchmark: does `analyze` find every planted slowdown, and only it?

Runs `goodhart-prof run` once clean and once per pattern (`--inject NAME`, one at a time, one after
the other so their timings do not disturb each other, in the order `--patterns` gives: the priority
order), analyzes each run's traces and prints:

* the confusion table: per zoo rule, whether it fired on its own pattern's run (detected / MISSED,
  n/m where the device cannot show it: on the CPU the CUDA-only patterns and tiny_batch, whose
  launch-bound evidence needs GPU kernels; FAILED when the run or its analysis failed; "not run
  (budget)"), its evidence (count per iteration, top site), and the runs where it fired although
  that run did not plant it (false alarms: the clean run or any other pattern's run);
* each run's iteration time: per-iteration times from the run's metrics.jsonl (the trainer's
  AsyncLogger: `iteration_s`, device time on CUDA), leaving out the first `--warmup-iterations`
  (compiles, caches, allocator) and the iterations a profiler touched (the one before the window,
  the window, the one after it, which writes the trace), then the first `--timed-iterations` of
  those that remain. `--timing-rounds` more unprofiled runs of each kind (`python -m trainer`,
  right after that kind's profiled run) add their iterations to the same pool. Reported: median,
  min..max and IQR per run. slowdown = (pattern's median seconds per env-step) / (clean's median
  seconds per env-step), i.e. clean env-steps/s over the pattern's: per env-step, since tiny_batch
  steps fewer envs per iteration; its IQR divides the pattern's quartiles by the clean median.

Every pattern runs even when one fails: a failed run is recorded with its one-line error (the tail
of its stderr in the JSON), shown as FAILED, counted as missed when measurable, and the script
exits 1 at the end (after printing everything). `--budget-s` stops starting patterns when the time
left is under the clean run's wall time (the clean run always runs); those are listed as "not run
(budget)". `--json-out` is rewritten (atomically) after each run finishes, so a killed benchmark
keeps what it finished (`"finished": false` and the `pending` patterns until the end).

The children share one compile cache (TORCHINDUCTOR_CACHE_DIR=<cache-dir>, default <runs
folder>/cache/inductor, and TRITON_CACHE_DIR beside it: <cache-dir>/../triton), so only the first
run compiles cold; each run's warm-up time is printed (the trainer's warm-up iteration, which
compiles, and the `--warmup-iterations` left out of the timing).

Layout of the runs folder (`--keep DIR`; without it a temporary folder, removed at the end):

    DIR/<name>/run.json, metrics.jsonl,   the profiled run of <name> (clean or a pattern):
        rank-0.pt.trace.json.gz           `goodhart-prof run --output-dir DIR --name <name>`
                                          (what `goodhart-prof analyze DIR/<name>` reads)
    DIR/latest                            a link to the last profiled run (goodhart-prof run's)
    DIR/timing/<round>/<name>/...         the unprofiled timing runs (--timing-rounds), round 1..N
    DIR/cache/inductor, DIR/cache/triton  the shared compile caches (unless --cache-dir)

A second benchmark into the same DIR replaces the runs of the names it runs (the others stay).

The JSON summary: recall, precision, measurable / not_measurable / detected / missed (patterns),
false_alarms ({rule, run}), failed and failed_patterns (names; failed includes clean if it failed),
failures ({name, stage, error, stderr_tail}), not_run (budget), pending (not reached yet: only
while `finished` is false), slowdowns ({pattern: median}), slowdown_spread ({pattern: [q1, q3]}),
env_steps_per_s and timing ({run: iterations, iteration_s_median/_q1/_q3/_min/_max,
env_steps_per_s, warmup_s, warmup_iterations_s, wall_s}), the arguments, the command.

recall = detected / measurable patterns that ran (failed ones count as missed); precision = true
firings / all firings of zoo rules (a firing is true when the rule is the run's own pattern). The
last line printed is one JSON object. Compare timings on an idle machine (the load average and the
CPU time other processes used are printed).
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

from benchlib import ForeignLoad  # noqa: E402
from goodhart_prof.analysis import analyze  # noqa: E402
from goodhart_prof.analysis.rules import ZOO_RULES  # noqa: E402
from goodhart_prof.fileio import write_json  # noqa: E402 (atomic: a temp file, then os.replace)
from goodhart_prof.capture.settings import parse_iterations  # noqa: E402
from goodhart_prof.trace.load import load  # noqa: E402
from trainer import zoo  # noqa: E402

STDERR_TAIL = 3000  # characters of a failed child's stderr kept in the JSON


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--config", default=None, help="trainer TOML (default: the device's preset)")
    p.add_argument("--iterations", default="20-22",
                   help="traced window (default 20-22: memory_growth needs three iterations)")
    p.add_argument("--total-iterations", type=int, default=32,
                   help="iterations per run (default 32)")
    p.add_argument("--warmup-iterations", type=int, default=2,
                   help="first iterations of each run left out of the timing (default 2)")
    p.add_argument("--timed-iterations", type=int, default=16,
                   help="iterations timed per run, the first ones after the warm-up that no "
                        "profiler touched (default 16)")
    p.add_argument("--mode", choices=["lite", "full"], default="full")
    p.add_argument("--patterns", default=",".join(zoo.NAMES),
                   help="comma list, run in this order (default: the whole zoo, zoo order)")
    p.add_argument("--timing-rounds", type=int, default=0,
                   help="extra unprofiled runs of each kind, pooled into its timing (default 0)")
    p.add_argument("--threads", type=int, default=None,
                   help="OMP_NUM_THREADS for the runs (1 makes timings robust to other load)")
    p.add_argument("--budget-s", type=float, default=None,
                   help="start no pattern when less time is left than the clean run took")
    p.add_argument("--cache-dir", default=None,
                   help="TORCHINDUCTOR_CACHE_DIR of every run, TRITON_CACHE_DIR beside it "
                        "(default: <runs folder>/cache/inductor)")
    p.add_argument("--keep", default=None, help="keep the runs in this folder (default: a temp dir)")
    p.add_argument("--json-out", default=None,
                   help="also write the JSON summary here (rewritten after each run)")
    args = p.parse_args(argv)
    args.command = shlex.join(["python", "scripts/bench_zoo.py",
                               *(sys.argv[1:] if argv is None else argv)])
    try:
        args.window = parse_iterations(args.iterations)
        args.order = pattern_order(args.patterns)
    except ValueError as exc:
        p.error(str(exc))
    if args.warmup_iterations < 0 or args.timed_iterations < 1:
        p.error("--warmup-iterations must be >= 0 and --timed-iterations >= 1")
    if not timed_iterations(args.total_iterations, args.warmup_iterations, args.timed_iterations,
                            args.window):
        p.error(f"no iteration left to time: {args.total_iterations} iterations, "
                f"{args.warmup_iterations} warm-up, window {args.iterations}")
    return args


def pattern_order(text: str) -> list[str]:
    """`b,a` -> ['b', 'a']: the order given (the priority order), each once; unknown names fail."""
    zoo.parse(text)  # the one-line error on an unknown name
    out: list[str] = []
    for name in (n.strip() for n in text.split(",")):
        if name and name not in out:
            out.append(name)
    return out


# -- timing ------------------------------------------------------------------------------------------
def timed_iterations(total: int, warmup: int, count: int,
                     window: tuple[int, int] | None) -> list[int]:
    """The iterations a run's timing uses: after the first `warmup`, none a profiler touched (the
    one before the window, the window, the one after it, which writes the trace), the first
    `count` of those."""
    touched: set[int] = set()
    if window is not None:
        first, last = window
        touched = set(range(max(first - 1, 0), last + 2))
    return [i for i in range(warmup, total) if i not in touched][:count]


def iteration_samples(run_dir: Path, iterations: list[int]) -> list[dict[str, float]]:
    """Those iterations' rows of the run's metrics.jsonl: iteration, seconds, env-steps."""
    wanted = set(iterations)
    out = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row["iteration"] in wanted and row.get("iteration_s"):
            out.append({"iteration": row["iteration"], "iteration_s": row["iteration_s"],
                        "env_steps": row["env_steps"]})
    return out


def _quartiles(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def timing_stats(samples: list[dict[str, float]]) -> dict[str, Any] | None:
    """Median, IQR and min..max of the iteration times, and of the seconds per env-step."""
    if not samples:
        return None
    its = [s["iteration_s"] for s in samples]
    per_step = [s["iteration_s"] / s["env_steps"] for s in samples]
    q1, q3 = _quartiles(its)
    s1, s3 = _quartiles(per_step)
    median_step = statistics.median(per_step)
    return {"iterations": len(samples), "iteration_s_median": round(statistics.median(its), 6),
            "iteration_s_q1": round(q1, 6), "iteration_s_q3": round(q3, 6),
            "iteration_s_min": round(min(its), 6), "iteration_s_max": round(max(its), 6),
            "s_per_env_step_median": median_step, "s_per_env_step_q1": s1, "s_per_env_step_q3": s3,
            "env_steps_per_s": round(1.0 / median_step, 1)}


def slowdown(pattern: dict[str, Any], clean: dict[str, Any]) -> dict[str, float]:
    """Pattern vs clean, per env-step: the medians' ratio, and the pattern's quartiles over the
    clean median (>1: the pattern is slower)."""
    ref = clean["s_per_env_step_median"]
    return {"median": round(pattern["s_per_env_step_median"] / ref, 3),
            "q1": round(pattern["s_per_env_step_q1"] / ref, 3),
            "q3": round(pattern["s_per_env_step_q3"] / ref, 3)}


# -- running one kind ----------------------------------------------------------------------------------
def child_env(args, cache_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROF_")}
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    env["TORCHINDUCTOR_CACHE_DIR"] = str(cache_dir)
    env["TRITON_CACHE_DIR"] = str(cache_dir.parent / "triton")
    return env


def one_line_error(stderr: str, returncode: int) -> str:
    """The child's error as one line: its last stderr line that is not profiler chatter."""
    lines = [ln.strip() for ln in stderr.splitlines()
             if ln.strip() and not ln.startswith(("USDT:", "[W", "  warnings.warn"))]
    return f"exit {returncode}: {lines[-1] if lines else '(no error output)'}"


def _failure(record: dict[str, Any], stage: str, error: str, stderr: str) -> dict[str, Any]:
    record.update(status="failed", stage=stage, error=error, stderr_tail=stderr[-STDERR_TAIL:])
    return record


def _kind_argv(name: str, args) -> list[str]:
    argv = ["--total-iterations", str(args.total_iterations), "--device", args.device, "--no-progress"]
    argv += ["--config", args.config] if args.config else []
    argv += ["--inject", name] if name != "clean" else []
    return argv


def clear_run(folder: Path) -> None:
    """Remove an earlier benchmark's run of this name (`goodhart-prof run` refuses a name that
    exists, and metrics.jsonl is appended to): only a folder that is a run or empty, so anything
    else makes the run fail with its one-line error instead."""
    if folder.is_dir() and not folder.is_symlink() and (
            not any(folder.iterdir()) or (folder / "run.json").exists()
            or (folder / "metrics.jsonl").exists()):
        shutil.rmtree(folder)


def run_kind(name: str, folder: Path, args, env: dict[str, str]) -> dict[str, Any]:
    """Record, analyze and time one kind (clean or a pattern): its profiled run in folder/<name>,
    then `--timing-rounds` unprofiled runs in folder/timing/<round>/<name>; an earlier run of
    that name there is replaced. Never raises for a child that fails or a trace that cannot be
    analyzed: the record says `status: failed`, the one-line `error`, and the `stderr_tail`."""
    out = folder / name
    clear_run(out)
    started = time.perf_counter()
    record: dict[str, Any] = {"name": name, "status": "ok", "fired": {}}
    argv = [sys.executable, "-m", "goodhart_prof.cli", "run", "--iterations", args.iterations,
            "--mode", args.mode, "--output-dir", str(folder), "--name", name, *_kind_argv(name, args)]
    res = subprocess.run(argv, env=env, capture_output=True, text=True)
    record["wall_s"] = round(time.perf_counter() - started, 1)
    if res.returncode != 0:
        return _failure(record, "run", one_line_error(res.stderr, res.returncode), res.stderr)
    try:
        run = json.loads((out / "run.json").read_text())
        record.update(device=run["device"], device_type=run["device_type"], warmup_s=run.get("warmup_s"))
        record["fired"] = {f.rule: f.evidence for f in analyze(load(out)).findings if f.rule in ZOO_RULES}
        its = timed_iterations(args.total_iterations, args.warmup_iterations, args.timed_iterations,
                               args.window)
        samples = iteration_samples(out, its)
        record["warmup_iterations_s"] = round(sum(s["iteration_s"] for s in iteration_samples(
            out, list(range(args.warmup_iterations)))), 3)
    except Exception as exc:  # a trace we cannot read is this run's failure, not the benchmark's
        return _failure(record, "analyze", f"analyze: {type(exc).__name__}: {exc}".splitlines()[0],
                        res.stderr)
    plain = timed_iterations(args.total_iterations, args.warmup_iterations, args.timed_iterations, None)
    for r in range(1, args.timing_rounds + 1):
        where = folder / "timing" / str(r)
        clear_run(where / name)
        res = subprocess.run([sys.executable, "-m", "trainer", "--output-dir", str(where / name),
                              *_kind_argv(name, args)], env=env, capture_output=True, text=True)
        if res.returncode != 0:
            record["wall_s"] = round(time.perf_counter() - started, 1)
            return _failure(record, f"timing round {r}", one_line_error(res.stderr, res.returncode),
                            res.stderr)
        samples += iteration_samples(where / name, plain)
    record["timing"] = timing_stats(samples)
    record["wall_s"] = round(time.perf_counter() - started, 1)
    return record


# -- the summary -----------------------------------------------------------------------------------------
def measurable(name: str, device_type: str) -> bool:
    return device_type == "cuda" or name in zoo.CPU_DETECTABLE


def summarize(runs: dict[str, dict[str, Any]], order: list[str], not_run: list[str],
              args) -> dict[str, Any]:
    """Everything the benchmark found so far (runs: clean and the patterns that ran, in order)."""
    ok = {n: r for n, r in runs.items() if r["status"] == "ok"}
    first_ok = next(iter(ok.values()), {})
    device_type = first_ok.get("device_type", "cuda" if args.device == "cuda" else "cpu")
    started = [p for p in order if p in runs]
    detected = [p for p in started if p in runs[p]["fired"]]
    failed = [n for n in runs if runs[n]["status"] == "failed"]
    missed = [p for p in started if measurable(p, device_type) and p not in detected]
    false_alarms = [{"rule": rule, "run": n} for rule in ZOO_RULES for n, r in ok.items()
                    if n != rule and rule in r["fired"]]
    n_measurable = sum(measurable(p, device_type) for p in started)
    tp, fp = len(detected), len(false_alarms)
    clean = ok.get("clean", {}).get("timing")
    slowdowns = {p: slowdown(ok[p]["timing"], clean) for p in started
                 if clean and p in ok and ok[p].get("timing")}
    timing = {n: {**{k: v for k, v in (r.get("timing") or {}).items() if not k.startswith("s_per")},
                  "warmup_s": r.get("warmup_s"), "warmup_iterations_s": r.get("warmup_iterations_s"),
                  "wall_s": r.get("wall_s")} for n, r in ok.items()}
    return {
        "bench": "bench_zoo", "finished": False, "command": args.command,
        "device": first_ok.get("device"), "device_type": device_type, "mode": args.mode,
        "threads": args.threads, "iterations": args.iterations, "total_iterations": args.total_iterations,
        "warmup_iterations": args.warmup_iterations, "timed_iterations": args.timed_iterations,
        "timing_rounds": args.timing_rounds, "budget_s": args.budget_s,
        "recall": round(len([p for p in detected if measurable(p, device_type)]) / n_measurable, 3)
        if n_measurable else None,
        "precision": round(tp / (tp + fp), 3) if tp + fp else None,
        "measurable": [p for p in started if measurable(p, device_type)],
        "not_measurable": [p for p in started if not measurable(p, device_type)],
        "detected": detected, "missed": missed, "false_alarms": false_alarms,
        "failed": failed, "failed_patterns": [n for n in failed if n != "clean"],
        "failures": [{"name": n, "stage": runs[n]["stage"], "error": runs[n]["error"],
                      "stderr_tail": runs[n]["stderr_tail"]} for n in failed],
        "not_run": list(not_run), "pending": [p for p in order if p not in runs and p not in not_run],
        "slowdowns": {p: s["median"] for p, s in slowdowns.items()},
        "slowdown_spread": {p: [s["q1"], s["q3"]] for p, s in slowdowns.items()},  # the IQR
        "env_steps_per_s": {n: t["env_steps_per_s"] for n, t in timing.items() if "env_steps_per_s" in t},
        "timing": timing,
    }


def confusion_rows(summary: dict[str, Any], runs: dict[str, dict[str, Any]]) -> list[tuple]:
    rows = []
    for rule in ZOO_RULES:
        m = measurable(rule, summary["device_type"])
        own = runs.get(rule)
        ev = ""
        if own is None:
            status = "not run (budget)" if rule in summary["not_run"] else "not run"
        elif own["status"] == "failed":
            status, ev = "FAILED", own["error"]
        elif rule in own["fired"]:
            status, ev = "detected", evidence_text(own["fired"][rule])
        else:
            status = "MISSED" if m else "n/m"
        wrong = [a["run"] for a in summary["false_alarms"] if a["rule"] == rule]
        rows.append((rule, "yes" if m else "no", status, ", ".join(wrong) or "-", ev))
    return rows


def _num(x) -> str:
    return str(int(x)) if isinstance(x, float) and x.is_integer() else str(x)


def evidence_text(ev: dict) -> str:
    parts = []
    if "per_iteration" in ev:
        parts.append(f"{_num(ev['per_iteration'])}/it")
    for key in ("kernels_per_step", "median_kernel_us", "low_precision_us", "backward_ops",
                "growth_per_iteration"):
        if key in ev:
            parts.append(f"{key}={_num(ev[key])}")
    sites = ev.get("sites") or []
    if sites and "site" in sites[0]:
        parts.append(str(sites[0]["site"]))
    kept = ev.get("kept_by") or []
    if kept:
        parts.append(f"kept by {kept[0]['phase']} / {kept[0]['op']}")
    return " ".join(parts)


def _table(header: tuple, rows: list[tuple]) -> list[str]:
    """Left-aligned columns; the last column unpadded."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header) - 1)]
    return ["  ".join(str(v).ljust(w) for v, w in zip(r[:-1], widths)) + "  " + str(r[-1])
            for r in [header, *rows]]


def timing_rows(summary: dict[str, Any], runs: dict[str, dict[str, Any]], order: list[str]) -> list[tuple]:
    rows = []
    for name in ["clean", *order]:
        r, t = runs.get(name), summary["timing"].get(name, {})
        if r is None:
            state = "not run (budget)" if name in summary["not_run"] else "pending"
            rows.append((name, state, "", "", "", "", ""))
            continue
        if r["status"] == "failed":
            rows.append((name, f"FAILED ({r['stage']})", "", "", "", "", f"{r['wall_s']} s"))
            continue
        if not t.get("iterations"):
            rows.append((name, "no timed iteration", "", "", "", "", f"{r['wall_s']} s"))
            continue
        ms = (f"{1000 * t['iteration_s_median']:.1f} (IQR {1000 * t['iteration_s_q1']:.1f}-"
              f"{1000 * t['iteration_s_q3']:.1f}, {1000 * t['iteration_s_min']:.1f}.."
              f"{1000 * t['iteration_s_max']:.1f})")
        if name == "clean":
            slow = "1.000x"
        elif name in summary["slowdowns"]:
            q1, q3 = summary["slowdown_spread"][name]
            slow = f"{summary['slowdowns'][name]:.3f}x ({q1:.2f}-{q3:.2f})"
        else:
            slow = "-"
        if name != "clean" and not measurable(name, summary["device_type"]):
            slow += " n/m"
        warm = (f"{t['warmup_s']:.2f} + {t['warmup_iterations_s']:.2f}" if t.get("warmup_s") is not None
                else "-")
        rows.append((name, t["iterations"], ms, f"{t['env_steps_per_s']:,.0f}", slow, warm,
                     f"{t['wall_s']} s"))
    return rows


def print_report(summary: dict[str, Any], runs: dict[str, dict[str, Any]], order: list[str],
                 args, folder: Path, kept: bool) -> None:
    threads = f", {args.threads} thread(s) per run" if args.threads else ""
    where = f"runs in {folder}" if kept else "runs removed (--keep DIR keeps them)"
    print(f"anti-pattern zoo on {summary['device']} ({summary['device_type']}), mode {args.mode}, "
          f"iterations {args.iterations} traced of {args.total_iterations}{threads}; {where}")
    for line in _table(("rule", "measurable", "own run", "false alarms on", "evidence"),
                       confusion_rows(summary, runs)):
        print(line)
    print()
    rounds = f" and {args.timing_rounds} unprofiled run(s)" if args.timing_rounds else ""
    print(f"iteration times: up to {args.timed_iterations} iterations per run after "
          f"{args.warmup_iterations} warm-up ones, none a profiler touched, from the profiled "
          f"run{rounds}; slowdown per env-step vs clean (its IQR)")
    for line in _table(("run", "timed its", "ms/iteration median (IQR, min..max)", "env-steps/s",
                        "slowdown", "warm-up s (trainer + iterations)", "wall"),
                       timing_rows(summary, runs, order)):
        print(line)
    print(f"\nrecall {summary['recall']} over {len(summary['measurable'])} measurable patterns, "
          f"precision {summary['precision']} ({len(summary['detected'])} true, "
          f"{len(summary['false_alarms'])} false firings); load average {summary['load_average']} "
          f"at start, other processes used {summary['other_cpus_used']} CPUs meanwhile")
    if summary["not_run"]:
        print(f"not run (budget {args.budget_s} s): {', '.join(summary['not_run'])}")
    for f in summary["failures"]:
        print(f"FAILED {f['name']} ({f['stage']}): {f['error']}")


def main(argv=None) -> int:
    args = parse_args(argv)
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_zoo-"))
    folder.mkdir(parents=True, exist_ok=True)
    cache_dir = Path(args.cache_dir) if args.cache_dir else folder / "cache" / "inductor"
    env = child_env(args, cache_dir)
    load0, noise = os.getloadavg()[0], ForeignLoad()
    start = time.perf_counter()
    runs: dict[str, dict[str, Any]] = {}
    not_run: list[str] = []

    def current(finished: bool = False) -> dict[str, Any]:
        summary = summarize(runs, args.order, not_run, args)
        others = noise.cpus_used()
        summary.update(finished=finished, load_average=round(load0, 2),
                       other_cpus_used=None if others is None else round(others, 2),
                       runs_folder=str(folder) if args.keep else None, cache_dir=str(cache_dir),
                       elapsed_s=round(time.perf_counter() - start, 1))
        return summary

    for name in ["clean", *args.order]:
        left = None if args.budget_s is None else args.budget_s - (time.perf_counter() - start)
        estimate = runs["clean"]["wall_s"] if "clean" in runs else None
        if name != "clean" and left is not None and left < estimate:
            not_run.append(name)
            print(f"  not running {name}: {max(left, 0):.0f} s of the budget left, a run takes about "
                  f"{estimate:.0f} s", file=sys.stderr)
            continue
        r = runs[name] = run_kind(name, folder, args, env)
        if r["status"] == "failed":
            print(f"  {name} FAILED ({r['stage']}, {r['wall_s']} s): {r['error']}", file=sys.stderr)
        else:
            t = r.get("timing") or {}
            print(f"  ran {name}: {t.get('env_steps_per_s', 0):,.0f} env-steps/s (median of "
                  f"{t.get('iterations', 0)} iterations), zoo rules fired: {sorted(r['fired']) or '-'}, "
                  f"warm-up {r['warmup_s'] or 0:.2f} s + {r['warmup_iterations_s']:.2f} s ({r['wall_s']} s)",
                  file=sys.stderr)
        if args.json_out:
            write_json(Path(args.json_out), current())
    summary = current(finished=True)
    if args.json_out:
        write_json(Path(args.json_out), summary)
    print_report(summary, runs, args.order, args, folder, kept=bool(args.keep))
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)
    print(json.dumps(summary))
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
