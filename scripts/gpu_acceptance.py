#!/usr/bin/env python
"""GPU acceptance in one command: everything a lent GPU must show, under one time budget.

    python scripts/gpu_acceptance.py --out DIR [--budget-s 480] [--only STEP,...] [--dry-run]

Steps, in this order, each under a deadline taken from the budget (its share, plus whatever the
steps before it left unused); each step's result is written into DIR as soon as it is known, so
a run killed at its limit loses only the steps it had not reached:

1. env: GPU, driver, torch, triton, CUDA; peak bf16 matrix-product TFLOP/s and copy GB/s
   (scripts/gpu_probes.py env).
2. smoke: the preset trainer warmed up (the cold compile timed; the inductor cache it fills
   serves every later step), then one iteration under torch.cuda.set_sync_debug_mode("error")
   (scripts/gpu_probes.py smoke).
3. bench: scripts/bench_train.py, one process per (env count, variant): env-steps/s end to end
   and per phase, compiled, eager and with CUDA graphs; warm-up iterations excluded.
4. zoo: scripts/bench_zoo.py on the clean run and each planted pattern, in priority order until
   its deadline: recall, precision, each pattern's slowdown (median and spread of timed
   iterations after warm-up); its traced runs (full mode) are kept for step 5.
5. traces: short lite traces of the clean run and each pattern (budget allowing), the clean run
   once more with PROF_COUNTERS=default (CUPTI counters per kernel: what its `cupti_counters`
   section says is in results.json), then `goodhart-prof analyze --json` of every kept trace;
   traces and analyses go into traces.tar.

What DIR holds (the device tool brings back at most 8 files of 16 MiB): results.json (every
step's result), summary.md (one table per step, ready for docs/gpu.md), acceptance.log (the
children's output), traces.tar (gzipped traces and their analyses, filled in priority order up
to 15 MiB; what did not fit is listed in results.json). Scratch files (runs, caches, installed
wheels) live in --work (default: a folder under /tmp kept between calls on the same machine, so
a second call reuses the compile cache).

Wheels: the GPU image lacks msgspec, isal, perfetto and plotly and reaches no registry. When
`.whl/` holds wheels (scripts/gpu_wheels.sh made them here; the device call carries `.whl`) and
one of those packages is missing, they are installed first with `pip --no-index --target` into
the work folder, which every child then has on its PYTHONPATH.

--dry-run: the same steps on the CPU at tiny sizes, with a 90 s budget (tests/e2e/test_gpu_acceptance.py
runs it, so the script cannot rot between GPU draws). docs/gpu.md has the plan's estimate, what
each figure means and where the results go.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "scripts"
sys.path.insert(0, str(SCRIPTS))

from gpu_summary import write_summary  # noqa: E402

STEPS = ("env", "smoke", "bench", "zoo", "traces")
# Zoo patterns by priority: the host syncs and copies the seed reports are about first, then
# the CUDA-only ones, then the costly ones.
ZOO_PRIORITY = ("item_logging", "sync_grad_clip", "pageable_htod", "nan_checks", "cpu_alloc",
                "branchy_value_head", "unfused_adam", "no_amp", "eager_update", "memory_growth",
                "tiny_batch")
TAR_LIMIT = 15 << 20   # the device tool brings back files of at most 16 MiB
PACKAGES = ("msgspec", "isal", "perfetto", "plotly")
TINY = "n_envs = 16\nrollout_steps = 8\nminibatches = 2\nepochs = 1\nhidden = 32\nchannels = 8\n"


@dataclass
class Plan:
    """What each step runs: the GPU plan, or the tiny CPU one of --dry-run."""

    device: str
    config: str | None               # TOML for every trainer run (None: the device's preset)
    bench: list[tuple[int, str]]     # (n_envs, variant) in priority order
    bench_args: list[str]
    zoo_args: list[str]
    lite_iterations: str
    lite_total: int
    min_start_s: float               # no child starts with less time than this left
    estimate_s: dict[str, float] = field(default_factory=dict)


def gpu_plan() -> Plan:
    bench = [(8192, "compiled"), (8192, "eager"), (8192, "cudagraphs"), (2048, "compiled"),
             (32768, "compiled"), (2048, "cudagraphs"), (32768, "cudagraphs"), (2048, "eager"),
             (32768, "eager")]
    return Plan("cuda", None, bench,
                ["--iterations", "6", "--phase-iterations", "2", "--rounds", "3"],
                ["--iterations", "3-5", "--total-iterations", "16", "--mode", "full",
                 "--timing-rounds", "0"],
                "3-4", 6, min_start_s=15.0,
                # docs/gpu.md gives the parts of each estimate; the budget is shared in proportion.
                estimate_s={"env": 15, "smoke": 75, "bench": 205, "zoo": 150, "traces": 30})


def dry_plan(work: Path) -> Plan:
    toml = work / "tiny.toml"
    toml.write_text(TINY)
    bench = [(16, "eager"), (16, "cudagraphs"), (32, "eager"), (64, "eager")]
    return Plan("cpu", str(toml), bench,
                ["--iterations", "2", "--phase-iterations", "1", "--rounds", "2"],
                ["--iterations", "1-3", "--total-iterations", "7", "--warmup-iterations", "0", "--mode", "full",
                 "--timing-rounds", "0"],
                "1-2", 3, min_start_s=3.0,
                estimate_s={"env": 5, "smoke": 12, "bench": 12, "zoo": 41, "traces": 20})


class Run:
    """The results folder: results.json and summary.md rewritten after each step, the log."""

    def __init__(self, out: Path, budget_s: float, plan: Plan, steps: list[str], dry_run: bool,
                 earlier: dict[str, Any] | None = None):
        self.out, self.plan, self.steps = out, plan, steps
        self.earlier = (earlier or {}).get("steps", {})  # --resume: what an earlier call finished
        self.t0 = time.monotonic()
        self.budget_s = budget_s
        self.results: dict[str, Any] = {
            "schema": "goodhart-prof/gpu-acceptance/v1", "dry_run": dry_run,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "budget_s": budget_s,
            "device": plan.device, "steps_asked": steps, "estimate_s": plan.estimate_s,
            "steps": {},
        }
        self.log = open(out / "acceptance.log", "a", buffering=1)

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def deadline(self, step: str) -> float:
        """Seconds since start by which `step` must end. The asked steps share the budget in
        proportion to the plan's estimates, cumulatively: time a step leaves unused flows on."""
        asked = [s for s in STEPS if s in self.steps]
        share = self.plan.estimate_s
        upto = sum(share[s] for s in asked[:asked.index(step) + 1])
        return self.budget_s * upto / sum(share[s] for s in asked)

    def record(self, step: str, result: dict[str, Any]) -> None:
        self.results["steps"][step] = result
        self.results["elapsed_s"] = round(self.elapsed(), 1)
        write_atomic(self.out / "results.json", json.dumps(self.results, indent=1) + "\n")
        write_atomic(self.out / "summary.md", write_summary(self.results))

    def child(self, argv: list[str], env: dict[str, str], limit_s: float, label: str
              ) -> tuple[int | None, str, float]:
        """Run one child in its own process group; (exit code or None on timeout, stdout, s)."""
        self.log.write(f"\n### {label} (limit {limit_s:.0f} s): {' '.join(argv)}\n")
        start = time.monotonic()
        proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                stderr=self.log, text=True, start_new_session=True)
        try:
            stdout, _ = proc.communicate(timeout=max(1.0, limit_s))
            code: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            stdout, _ = proc.communicate()
            code = None
        seconds = time.monotonic() - start
        self.log.write(stdout[-4000:] if stdout else "")
        self.log.write(f"\n### {label}: {'timed out' if code is None else f'exit {code}'} "
                       f"after {seconds:.1f} s\n")
        return code, stdout or "", seconds


def write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def last_json(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                return json.loads(line)
    return None


def install_wheels(work: Path) -> dict[str, Any]:
    """Install .whl/*.whl into work/site when one of PACKAGES is missing (the GPU image)."""
    missing = [p for p in PACKAGES if importlib.util.find_spec(p) is None]
    wheels = sorted((REPO / ".whl").glob("*.whl"))
    info: dict[str, Any] = {"missing": missing, "wheels": [w.name for w in wheels]}
    if not missing:
        return info
    if not wheels:
        info["error"] = (f"{', '.join(missing)} not installed and no wheels in .whl/ "
                         "(run scripts/gpu_wheels.sh where pip works and carry .whl)")
        return info
    site = work / "site"
    res = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                          "--no-compile", "--no-cache-dir", "--upgrade", "--target", str(site),
                          *map(str, wheels)], capture_output=True, text=True)
    if res.returncode != 0:
        info["error"] = "pip install of .whl failed: " + res.stderr.strip()[-300:]
    else:
        info["site"] = str(site)
    return info


def child_env(work: Path, cache: Path, wheels: dict[str, Any]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROF_")}
    paths = [str(REPO)] + ([wheels["site"]] if wheels.get("site") else [])
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["TORCHINDUCTOR_CACHE_DIR"] = str(cache / "inductor")
    env["TRITON_CACHE_DIR"] = str(cache / "triton")
    env["PYTHONUNBUFFERED"] = "1"
    return env


# -- the steps ---------------------------------------------------------------------------------
def step_probe(run: Run, env: dict[str, str], name: str) -> dict[str, Any]:
    argv = [sys.executable, str(SCRIPTS / "gpu_probes.py"), name, "--device", run.plan.device]
    argv += ["--config", run.plan.config] if run.plan.config else []
    code, stdout, seconds = run.child(argv, env, run.deadline(name) - run.elapsed(), name)
    result = last_json(stdout) or {}
    status = "ok" if code == 0 else ("timed out" if code is None else "failed")
    return {"status": status, "seconds": round(seconds, 1), **result}


def step_bench(run: Run, env: dict[str, str], work: Path) -> dict[str, Any]:
    rows, deadline = [], run.deadline("bench")
    done = {(r["n_envs"], r["variant"]): r for r in run.earlier.get("bench", {}).get("runs", [])
            if r["status"] == "ok"}
    for n, variant in run.plan.bench:
        if (n, variant) in done:
            rows.append({**done[(n, variant)], "earlier_call": True})
            continue
        left = deadline - run.elapsed()
        if left < run.plan.min_start_s:
            rows.append({"n_envs": n, "variant": variant, "status": "not run (budget)"})
            continue
        out = work / f"bench-{n}-{variant}.json"
        out.unlink(missing_ok=True)
        argv = [sys.executable, str(SCRIPTS / "bench_train.py"), "--device", run.plan.device,
                "--n-envs", str(n), "--variants", variant, "--json-out", str(out),
                *run.plan.bench_args]
        argv += ["--config", run.plan.config] if run.plan.config else []
        # The naive per-env loop once, beside the first eager run: the vectorization's ratio.
        naive_done = any(r.get("naive_rollout_sps") for r in rows)
        if variant != "eager" or naive_done:
            argv.append("--no-naive")
        else:
            argv += ["--naive-envs", "64"]
        code, stdout, seconds = run.child(argv, env, left, f"bench {n} {variant}")
        data = last_json(stdout) or {}
        v = (data.get("variants") or {}).get(variant) or {}
        status = ("timed out" if code is None else "ok" if code == 0 and not v.get("error")
                  else "failed")
        if run.results["dry_run"] and variant == "cudagraphs" and \
                str(v.get("error")).startswith("ConfigError") and "CUDA" in str(v.get("error")):
            status = "refused on the CPU, as it must be"
        rows.append({"n_envs": n, "variant": variant, "status": status, "seconds": round(seconds, 1),
                     "sps": v.get("sps"), "rollout_sps": v.get("rollout_sps"),
                     "iteration_s": v.get("iteration_s"), "phase_s": v.get("phase_s"),
                     "warmup_s": v.get("warmup_s"), "spread": v.get("spread"),
                     "error": v.get("error") or (None if code == 0 else
                                                 f"{'timed out' if code is None else f'exit {code}'}: "
                                                 "see acceptance.log"),
                     "naive_rollout_sps": data.get("naive_rollout_sps"),
                     "rollout_steps": data.get("rollout_steps"), "device": data.get("device")})
        run.record("bench", _status(rows))
    return _status(rows)


def step_zoo(run: Run, env: dict[str, str], work: Path) -> dict[str, Any]:
    keep, out = work / "zoo", work / "zoo.json"
    out.unlink(missing_ok=True)
    left = run.deadline("zoo") - run.elapsed()
    if left < run.plan.min_start_s:
        return {"status": "not run (budget)"}
    argv = [sys.executable, str(SCRIPTS / "bench_zoo.py"), "--device", run.plan.device,
            "--patterns", ",".join(zoo_todo(run)), "--budget-s", f"{max(1.0, left - 5):.0f}",
            "--keep", str(keep), "--json-out", str(out), "--cache-dir", env["TORCHINDUCTOR_CACHE_DIR"],
            *run.plan.zoo_args]
    argv += ["--config", run.plan.config] if run.plan.config else []
    code, stdout, seconds = run.child(argv, env, left, "zoo")
    summary = None
    with contextlib.suppress(OSError, ValueError):
        summary = json.loads(out.read_text())  # rewritten after each pattern: partial on a kill
    status = "ok" if code == 0 else ("timed out" if code is None else "failed")
    return {"status": status, "seconds": round(seconds, 1), "runs_folder": str(keep),
            "summary": summary}


def zoo_todo(run: Run) -> list[str]:
    """The zoo's patterns in priority order, less those an earlier call measured (--resume); the
    clean run is always run again, so that slowdowns compare runs of one call."""
    summary = run.earlier.get("zoo", {}).get("summary") or {}
    measured = set(summary.get("slowdowns") or {}) - set(summary.get("failed_patterns") or [])
    return [p for p in ZOO_PRIORITY if p not in measured] or list(ZOO_PRIORITY[:1])


def step_traces(run: Run, env: dict[str, str], work: Path) -> dict[str, Any]:
    """analyze --json of the zoo's full traces first, then lite runs of clean and each pattern
    as time allows, each analysed too; every trace with its run.json, metrics and analysis goes
    into traces.tar in that order, up to TAR_LIMIT (what does not fit is listed)."""
    deadline = run.deadline("traces")
    names = ["clean", *ZOO_PRIORITY]
    tar_path = run.out / "traces.tar"
    packed: list[dict[str, Any]] = []
    left_out: list[dict[str, Any]] = []
    lite_rows: list[dict[str, Any]] = []
    counter_rows: list[dict[str, Any]] = []
    lite_done = {r["name"] for r in run.earlier.get("traces", {}).get("lite_runs", [])
                 if r["status"] == "ok"}
    with tarfile.open(tar_path, "w") as tar:
        def pack(mode: str, name: str, folder: Path) -> None:
            traces = sorted(folder.glob("rank-*.pt.trace.json.gz")) if folder.is_dir() else []
            if not traces:
                return
            entry: dict[str, Any] = {"name": name, "mode": mode,
                                     "trace_bytes": sum(t.stat().st_size for t in traces)}
            analysis = work / "analyses" / f"{name}-{mode}.json"
            analysis.parent.mkdir(parents=True, exist_ok=True)
            analysis.unlink(missing_ok=True)
            left = deadline - run.elapsed()
            if left >= run.plan.min_start_s / 3:
                code, stdout, _ = run.child([sys.executable, "-m", "goodhart_prof.cli", "analyze",
                                             str(folder), "--json", "--no-progress"], env, left,
                                            f"analyze {name} {mode}")
                if code == 0:
                    analysis.write_text(stdout)
                    entry["findings"] = _findings(stdout)
                entry["analysis"] = "ok" if code == 0 else ("timed out" if code is None else "failed")
            else:
                entry["analysis"] = "not run (budget)"
            size = tar_path.stat().st_size + entry["trace_bytes"] + (
                analysis.stat().st_size if analysis.exists() else 0) + 8192
            if size > TAR_LIMIT:
                left_out.append({**entry, "why": "traces.tar would pass 15 MiB"})
                return
            for t in traces:
                tar.add(t, arcname=f"{mode}/{name}/{t.name}")
            for extra in ("run.json", "metrics.jsonl"):
                if (folder / extra).is_file():
                    tar.add(folder / extra, arcname=f"{mode}/{name}/{extra}")
            if analysis.exists():
                tar.add(analysis, arcname=f"{mode}/{name}/analysis.json")
            tar.fileobj.flush()  # type: ignore[union-attr]
            packed.append(entry)

        for name in names:  # the zoo's full traces: the fixtures that matter most
            pack("full", name, work / "zoo" / name)
        lite = work / "lite"
        for name in names:
            left = deadline - run.elapsed()
            if name in lite_done:
                lite_rows.append({"name": name, "status": "ok", "earlier_call": True})
                continue
            if left < 2 * run.plan.min_start_s:
                lite_rows.append({"name": name, "status": "not run (budget)"})
                continue
            folder = lite / name
            if folder.exists():
                shutil.rmtree(folder)  # a second call on the same machine records afresh
            argv = [sys.executable, "-m", "goodhart_prof.cli", "run", "--mode", "lite",
                    "--iterations", run.plan.lite_iterations, "--total-iterations",
                    str(run.plan.lite_total), "--output-dir", str(lite), "--name", name,
                    "--device", run.plan.device, "--no-progress"]
            argv += ["--config", run.plan.config] if run.plan.config else []
            argv += ["--inject", name] if name != "clean" else []
            code, _, seconds = run.child(argv, env, left - run.plan.min_start_s / 3, f"lite {name}")
            lite_rows.append({"name": name, "status": "ok" if code == 0 else
                              ("timed out" if code is None else "failed"), "seconds": round(seconds, 1)})
            if code == 0:
                pack("lite", name, folder)
            if name == "clean" and code == 0:
                counter_rows.append(counters_run(run, env, lite, argv, deadline, pack))
    analysed = all(p.get("analysis") == "ok" for p in packed)
    status = ("ok" if packed and analysed and not left_out and
              all(r["status"] == "ok" for r in lite_rows) else "partial" if packed else "failed")
    return {"status": status, "lite_runs": lite_rows, "counter_runs": counter_rows, "packed": packed,
            "left_out": left_out, "tar_bytes": tar_path.stat().st_size}


def counters_run(run: Run, env: dict[str, str], lite: Path, clean_argv: list[str], deadline: float,
                 pack) -> dict[str, Any]:
    """The clean lite run again with PROF_COUNTERS=default (CUPTI counters per kernel: issue 36's
    check on our own recording), packed as `counters/clean`; what its analysis's
    `cupti_counters` section says (ranges, matched to launches, counters)."""
    left = deadline - run.elapsed()
    if left < 2 * run.plan.min_start_s:
        return {"name": "clean", "status": "not run (budget)"}
    folder = lite / "clean-counters"
    if folder.exists():
        shutil.rmtree(folder)
    argv = [a if a != "clean" else "clean-counters" for a in clean_argv]  # --name
    code, _, seconds = run.child(argv, {**env, "PROF_COUNTERS": "default"}, left - run.plan.min_start_s / 3,
                                 "lite clean with CUPTI counters")
    row: dict[str, Any] = {"name": "clean", "status": "ok" if code == 0 else
                           ("timed out" if code is None else "failed"), "seconds": round(seconds, 1)}
    if code != 0:
        return row
    pack("counters", "clean", folder)
    cupti = None
    analysis = lite.parent / "analyses" / "clean-counters.json"  # pack's analysis of it
    with contextlib.suppress(OSError, ValueError, AttributeError, TypeError):
        cupti = json.loads(analysis.read_text()).get("cupti_counters")
    row.update(cupti=None if cupti is None else {k: cupti.get(k) for k in ("ranges", "matched", "counters", "note")})
    return row


def _findings(stdout: str) -> list[str] | None:
    with contextlib.suppress(ValueError, AttributeError, TypeError):
        doc = json.loads(stdout)
        return sorted({f["rule"] for f in doc.get("findings", [])})
    return None


def _status(rows: list[dict[str, Any]]) -> dict[str, Any]:
    done = [r for r in rows if r["status"] == "ok" or r["status"].startswith("refused")]
    status = "ok" if len(done) == len(rows) else ("partial" if done else "failed")
    return {"status": status, "runs": rows}


# -- main ---------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="results folder (made if missing; files replaced)")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="seconds for all steps (default: 480 on a GPU, 90 with --dry-run)")
    ap.add_argument("--only", default=None, help=f"comma list of steps to run ({', '.join(STEPS)})")
    ap.add_argument("--dry-run", action="store_true", help="the CPU check: tiny sizes, 90 s")
    ap.add_argument("--resume", default=None, metavar="RESULTS_JSON",
                    help="results.json of an earlier call: what it finished is kept, not run again "
                         "(the second device call runs what the first did not reach or what failed)")
    ap.add_argument("--work", default=None,
                    help="scratch folder (default: /tmp/goodhart-acceptance, or a new temporary "
                         "folder with --dry-run)")
    args = ap.parse_args(argv)
    steps = list(STEPS) if not args.only else [s.strip() for s in args.only.split(",") if s.strip()]
    bad = [s for s in steps if s not in STEPS]
    if bad or not steps:
        print(f"gpu_acceptance: --only: unknown step {bad[0]!r}; steps: {', '.join(STEPS)}" if bad
              else "gpu_acceptance: --only: name a step", file=sys.stderr)
        return 2
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"gpu_acceptance: {out}: cannot make the results folder: {exc.strerror}", file=sys.stderr)
        return 2
    if args.work:
        work = Path(args.work)
    elif args.dry_run:
        work = Path(tempfile.mkdtemp(prefix="goodhart-acceptance-"))
    else:
        work = Path("/tmp/goodhart-acceptance")
    work.mkdir(parents=True, exist_ok=True)
    if not args.dry_run:
        import torch  # only here: the dry run's parent never needs it
        if not torch.cuda.is_available():
            print("gpu_acceptance: torch sees no CUDA device; on a CPU use --dry-run", file=sys.stderr)
            return 2
    earlier = None
    if args.resume:
        try:
            earlier = json.loads(Path(args.resume).read_text())
            if not isinstance(earlier, dict) or not isinstance(earlier.get("steps"), dict):
                raise ValueError("no steps in it")
        except (OSError, ValueError) as exc:
            print(f"gpu_acceptance: {args.resume}: not a results.json of this script: "
                  f"{getattr(exc, 'strerror', None) or exc}", file=sys.stderr)
            return 2
    plan = dry_plan(work) if args.dry_run else gpu_plan()
    budget = args.budget_s if args.budget_s is not None else (90.0 if args.dry_run else 480.0)
    run = Run(out, budget, plan, steps, args.dry_run, earlier)
    run.results["resumed_from"] = args.resume
    wheels = install_wheels(work)
    run.results["wheels"] = wheels
    env = child_env(work, work / "cache", wheels)
    print(f"gpu_acceptance: {'dry run on the CPU' if args.dry_run else 'GPU'}, budget {budget:.0f} s, "
          f"steps {', '.join(steps)}; results in {out}, scratch in {work}", flush=True)
    for step in steps:
        started = run.elapsed()
        if step in ("env", "smoke") and run.earlier.get(step, {}).get("status") == "ok":
            result = {**run.earlier[step], "earlier_call": True}
        elif step in ("env", "smoke"):
            result = step_probe(run, env, step)
        elif step == "bench":
            result = step_bench(run, env, work)
        elif step == "zoo":
            result = step_zoo(run, env, work)
        else:
            result = step_traces(run, env, work)
        result["step_s"] = round(run.elapsed() - started, 1)
        result["deadline_s"] = round(run.deadline(step), 1)
        run.record(step, result)
        print(f"  {step}: {result['status']} in {result['step_s']} s "
              f"(deadline {result['deadline_s']} s)", flush=True)
    failed = [s for s in steps if run.results["steps"][s]["status"] not in ("ok", "partial")]
    unfinished = [s for s in steps if run.results["steps"][s]["status"] != "ok"]
    print(f"gpu_acceptance: done in {run.elapsed():.0f} s; "
          + ("every step finished" if not unfinished else
             f"not finished: {', '.join(unfinished)}; a second call runs what is left with "
             f"--resume {out / 'results.json'} (a copy of it carried back)"), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
