#!/usr/bin/env python
"""Benchmark `goodhart-prof analyze` against a bare msgspec decode and against HTA.

(a) the floor: a msgspec typed decode of the big trace keeping only ph/cat/name/pid/tid/ts/dur;
(b) `goodhart-prof analyze --json` on the same file, end to end as a process, with its peak RSS
    ((a) and (b) alternate, best of 2 each);
(c) on the V100 trace: HTA's TraceAnalysis construction + temporal, idle-time and kernel
    breakdowns, against our load + analyze of the same file (each tool in processes of its own,
    alternating ours / HTA / ours / HTA, 3 runs each time; the best run of each counts).

The big trace is shared/traces/tracelens/h100_owlv2_inference.json.gz tiled N times along time
(ids shifted so correlations stay unique), written compactly once and cached. Prints a table and,
as the last line, one JSON object. Targets: (b) <= 2.0x (a); peak RSS <= 2.5 GB; ours >= 10x HTA.

`--huge` instead measures bounded-memory loading: `analyze --json` on the 586 MB trace and on a
~4 GB one (`--huge-copies` tiles, written under --cache and deleted afterwards unless
--keep-huge). Targets: the big run's peak RSS <= 0.6x its file size, its time <= 1.2x the small
run's scaled by the size ratio.

`--stages` also prints what each stage cost (the load, each analysis: analysis/timing.py, and on
the big trace the report's document) on both traces, so a regression shows where it is; the JSON
line always carries them (`stages_v100_s`, `stages_big_s`).
"""
from __future__ import annotations

import argparse
import gc
import gzip
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "traces"
H100 = SHARED / "tracelens" / "h100_owlv2_inference.json.gz"
V100 = SHARED / "hta" / "v100_ddp_rank1.json.gz"
FLOOR_RATIO = 2.0  # (b)'s target: analyze end to end within twice the bare decode
BIG_RUNS = 2  # (a) and (b): best of this many, alternating
ID_ARGS = ("correlation", "External id", "Python id", "Python parent id")


class _FloorEvent(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str | None = None
    name: str | int | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    ts: float | None = None
    dur: float | None = None


class _FloorDoc(msgspec.Struct):
    traceEvents: list[_FloorEvent]


def build_tiled(source: Path, copies: int, out: Path) -> Path:
    """Write `copies` back-to-back copies of the source trace's events as one compact JSON file."""
    doc = msgspec.json.decode(gzip.decompress(source.read_bytes()))
    events = doc.pop("traceEvents")
    timed = [e for e in events if "ts" in e]
    start = min(e["ts"] for e in timed)
    period = max(e["ts"] + e.get("dur", 0) for e in timed) - start + 1000.0
    id_step = 1 + max(max((e.get("args") or {}).get(k, 0) or 0 for e in events
                          if isinstance((e.get("args") or {}).get(k, 0), (int, float)))
                      for k in ID_ARGS)
    flow_step = 1 + max((e.get("id", 0) for e in events if isinstance(e.get("id"), int)), default=0)
    enc = msgspec.json.Encoder()
    tmp = out.with_suffix(".partial")
    with open(tmp, "wb") as fh:
        header = enc.encode(doc)[:-1]  # the header object without its closing brace
        fh.write(header + b',"traceEvents":[')
        for k in range(copies):
            if k:
                for e in events:
                    if e.get("ph") == "M":
                        continue
                    if "ts" in e:
                        e["ts"] += period
                    args = e.get("args")
                    if args:
                        for key in ID_ARGS:
                            if isinstance(args.get(key), int) and args[key] > 0:
                                args[key] += id_step
                    if isinstance(e.get("id"), int):
                        e["id"] += flow_step
            chunk = enc.encode([e for e in events if k == 0 or e.get("ph") != "M"])[1:-1]
            fh.write((b"," if k else b"") + chunk)
        fh.write(b"]}")
    os.replace(tmp, out)
    return out


def floor_decode(path: Path) -> tuple[float, int]:
    start = time.perf_counter()
    doc = msgspec.json.decode(path.read_bytes(), type=_FloorDoc)
    return time.perf_counter() - start, len(doc.traceEvents)


def analyze_process(path: Path, first: bool = True) -> tuple[float, float, dict]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "goodhart_prof.cli", "analyze", str(path), "--json"],
                          capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"analyze failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if peak_kb <= before and first:  # later runs: the peak of all children so far
        print("# warning: peak RSS of the analyze process not measurable (an earlier child was larger)")
    return seconds, peak_kb / 1024 / 1024, json.loads(proc.stdout)


def ours_in_process(path: Path) -> list:
    """[seconds, {stage: seconds}] of one load + analyze (the load and each analysis stage)."""
    from goodhart_prof.analysis import analyze
    from goodhart_prof.trace.load import load
    gc.collect()  # both sides start from a collected heap (the other side's garbage is not ours)
    start = time.perf_counter()
    trace = load(path, progress=False)
    loaded = time.perf_counter()
    result = analyze(trace)
    return [time.perf_counter() - start, {"load": loaded - start, **result.timing.seconds}]


def hta_in_process(path: Path) -> float | str:
    try:
        from hta.trace_analysis import TraceAnalysis
    except ImportError as exc:
        return f"HTA not installed ({exc}); pip install -e '.[hta]'"
    with tempfile.TemporaryDirectory() as folder:
        os.symlink(path.resolve(), Path(folder) / path.name)
        gc.collect()
        start = time.perf_counter()
        analyzer = TraceAnalysis(trace_dir=folder)
        analyzer.get_temporal_breakdown(visualize=False)
        analyzer.get_idle_time_breakdown(ranks=sorted(analyzer.t.traces), visualize=False)
        analyzer.get_gpu_kernel_breakdown(visualize=False)
        return time.perf_counter() - start


def timed_runs(side: str, runs: int) -> list:
    """(c), one side: `runs` timings of ours or of HTA, in this (fresh) process."""
    measure = ours_in_process if side == "ours" else hta_in_process
    return [measure(V100) for _ in range(runs)]


def versus_hta(skip_hta: bool) -> tuple[list, list]:
    """(c): each tool in processes of its own (one tool's garbage slows the other: HTA's heap
    costs our next load ~7%), alternating ours, HTA, ours, HTA (3 runs each time) so that a busy
    spell on a noisy machine hits both sides; the best run of each side counts."""
    ours, hta = [], []
    for side, runs in (("ours", 3), ("hta", 3), ("ours", 3), ("hta", 3)):
        if side == "hta" and skip_hta:
            continue
        child = subprocess.run([sys.executable, __file__, "--timed", side, str(runs)],
                               capture_output=True, text=True)
        if child.returncode != 0:
            raise SystemExit(f"V100 comparison ({side}) failed: {child.stderr.strip()[-500:]}")
        (ours if side == "ours" else hta).extend(json.loads(child.stdout.strip().splitlines()[-1]))
    return ours, hta


def stage_table(v100: dict, big: dict) -> list[str]:
    """`--stages`: each stage's seconds on the V100 trace (its best run) and on the big trace."""
    names = list(dict.fromkeys(list(v100) + list(big)))
    lines = [f"{'stage':20s} {'V100 (best run)':>16s} {'big trace':>12s}", "-" * 50]
    for name in names + ["total"]:
        a = sum(v100.values()) if name == "total" else v100.get(name)
        b = sum(big.values()) if name == "total" else big.get(name)
        cell = lambda x: f"{x * 1000:,.1f} ms" if x is not None else "-"  # noqa: E731
        lines.append(f"{name:20s} {cell(a):>16s} {cell(b):>12s}")
    return lines


def huge(args) -> None:
    """Bounded memory: the 586 MB trace, then a ~4 GB one; peak RSS and time against size."""
    small = args.cache / f"h100_owlv2_x{args.copies}.json"
    big = args.cache / f"h100_owlv2_x{args.huge_copies}.json"
    for path, copies in ((small, args.copies), (big, args.huge_copies)):
        if not path.exists():
            t = time.perf_counter()
            build_tiled(H100, copies, path)
            print(f"# built {path} in {time.perf_counter() - t:.1f} s")
    try:
        rows = []
        for path in (small, big):  # smaller first: RUSAGE_CHILDREN keeps the largest child's peak
            seconds, peak_gb, doc = analyze_process(path)
            rows.append({"trace": path.name, "file_gb": path.stat().st_size / 1e9,
                         "events": doc["trace"]["events"], "analyze_s": seconds, "peak_rss_gb": peak_gb,
                         "load_s": doc["trace"]["load"]["seconds"],
                         "load_peak_rss_gb": doc["trace"]["load"]["peak_rss_bytes"] / 2**30})
    finally:
        if not args.keep_huge:
            big.unlink(missing_ok=True)
    a, b = rows
    rss_ratio = b["peak_rss_gb"] * 2**30 / 1e9 / b["file_gb"]
    linear = a["analyze_s"] * b["file_gb"] / a["file_gb"]
    time_ratio = b["analyze_s"] / linear
    print(f"{'trace':28s} {'file':>8s} {'events kept':>12s} {'time':>8s} {'load':>8s} {'peak RSS':>9s} {'RSS/file':>8s}")
    for r in rows:
        print(f"{r['trace']:28s} {r['file_gb']:6.2f} GB {r['events']:12,d} {r['analyze_s']:6.1f} s "
              f"{r['load_s']:6.1f} s {r['peak_rss_gb']:6.2f} GiB {r['peak_rss_gb'] * 2**30 / 1e9 / r['file_gb']:7.2f}x")
    print(f"big run: peak RSS {rss_ratio:.2f}x the file (target <= 0.6x): {'PASS' if rss_ratio <= 0.6 else 'FAIL'}; "
          f"time {time_ratio:.2f}x linear from the small run ({linear:.1f} s; target <= 1.2x): "
          f"{'PASS' if time_ratio <= 1.2 else 'FAIL'}")
    print(json.dumps({"benchmark": "bench_analyze_huge", "runs": rows, "rss_vs_file": round(rss_ratio, 3),
                      "time_vs_linear": round(time_ratio, 3)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=18, help="tiles of the H100 trace (default 18)")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "goodhart-bench",
                        help="folder for the tiled trace (reused between runs)")
    parser.add_argument("--skip-hta", action="store_true")
    parser.add_argument("--stages", action="store_true",
                        help="also print each stage's time (load, each analysis, report) on both traces")
    parser.add_argument("--huge", action="store_true",
                        help="only the bounded-memory run: the default trace and a ~4 GB one")
    parser.add_argument("--huge-copies", type=int, default=123, help="tiles of the huge trace (123: ~4 GB)")
    parser.add_argument("--keep-huge", action="store_true", help="keep the huge trace for the next run")
    parser.add_argument("--timed", nargs=2, metavar=("SIDE", "RUNS"),
                        help="internal: time ours or hta RUNS times on the V100 trace, print JSON")
    args = parser.parse_args()
    if args.timed:
        print(json.dumps(timed_runs(args.timed[0], int(args.timed[1]))))
        return
    if not H100.exists():
        raise SystemExit(f"{H100}: shared traces not found")
    args.cache.mkdir(parents=True, exist_ok=True)
    if args.huge:
        huge(args)
        return
    big = args.cache / f"h100_owlv2_x{args.copies}.json"
    if not big.exists():
        t = time.perf_counter()
        build_tiled(H100, args.copies, big)
        print(f"# built {big} in {time.perf_counter() - t:.1f} s")
    size_mb = big.stat().st_size / 1e6

    # (a) and (b) alternate, best of BIG_RUNS each: one cold or busy run (a page cache miss on the
    # 586 MB file) moved their ratio between 2.0x and 3.2x from run to run
    floors, ours = [], []
    for _ in range(BIG_RUNS):
        floors.append(floor_decode(big))
        gc.collect()
        ours.append(analyze_process(big, first=not ours))
    floor_s, n_events = min(floors)
    ours_s, peak_gb, doc = min(ours, key=lambda run: run[0])
    peak_gb = max(run[1] for run in ours)
    ratio = ours_s / floor_s
    rows = [("(a) msgspec typed decode (floor)", f"{floor_s:.2f} s", f"{n_events:,} events, {size_mb:,.0f} MB"),
            ("(b) goodhart-prof analyze --json", f"{ours_s:.2f} s",
             f"{ratio:.2f}x the floor (target <= {FLOOR_RATIO}x): {'PASS' if ratio <= FLOOR_RATIO else 'FAIL'}"),
            ("    peak RSS", f"{peak_gb:.2f} GB", f"target <= 2.5 GB: {'PASS' if peak_gb <= 2.5 else 'FAIL'}")]
    result = {"benchmark": "bench_analyze", "trace_mb": round(size_mb, 1), "events": n_events,
              "floor_s": round(floor_s, 3), "analyze_s": round(ours_s, 3),
              "analyze_vs_floor": round(ratio, 3), "peak_rss_gb": round(peak_gb, 3),
              "busy_us": doc["gpu"][next(iter(doc["gpu"]))]["busy_us"] if doc.get("gpu") else None}
    if V100.exists():
        # Fresh processes: this one's heap is full of the big trace's decode by now.
        ours_runs, hta_runs = versus_hta(args.skip_hta)
        best = min(ours_runs, key=lambda run: run[0])
        ours_v, v100_stages = best[0], best[1]
        ours_runs = [run[0] for run in ours_runs]
        result["stages_v100_s"] = {k: round(v, 4) for k, v in v100_stages.items()}
        result["ours_v100_s"] = round(ours_v, 3)
        rows.append(("(c) ours on V100 (load + analyze)", f"{ours_v:.2f} s",
                     f"best of {len(ours_runs)}, in a process of its own"))
        if not args.skip_hta:
            failed = [h for h in hta_runs if isinstance(h, str)]
            hta = failed[0] if failed else min(hta_runs)
            if isinstance(hta, str):
                rows.append(("    HTA", "n/a", hta))
                result["hta_v100_s"] = None
            else:
                speedup = hta / ours_v
                rows.append(("    HTA (construct + 3 breakdowns)", f"{hta:.2f} s", f"best of {len(hta_runs)}; "
                             f"ours {speedup:.1f}x faster (target >= 10x): {'PASS' if speedup >= 10 else 'FAIL'}"))
                result.update(hta_v100_s=round(hta, 3), speedup_vs_hta=round(speedup, 2))
    print(f"{'measurement':38s} {'time':>10s}  note")
    print("-" * 100)
    for name, value, note in rows:
        print(f"{name:38s} {value:>10s}  {note}")
    timing = doc.get("timing") or {}
    big_stages = {"load": timing.get("load_s") or 0.0, **(timing.get("analysis_s") or {}),
                  "report": timing.get("report_s") or 0.0}
    result["stages_big_s"] = big_stages
    if args.stages:
        print()
        for line in stage_table(result.get("stages_v100_s", {}), big_stages):
            print(line)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
