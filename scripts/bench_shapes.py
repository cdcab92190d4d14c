#!/usr/bin/env python
"""Traces of one size in many shapes: is the analysis as fast per event with many entities?

Every shape holds the same units of work, so the same number of events and about the same bytes;
only how the events spread over entities changes:

  few      4 host threads, 1 rank, 1 GPU, 4 streams, ~40 distinct names (the reference)
  threads  the units spread over `--threads` host threads (default 100,000)
  ranks    one merged trace of `--ranks` ranks (default 20,000; `process_name` "rank N", GPU
           streams as goodhart_prof/trace/merge.py writes them)
  names    every kernel a distinct name (`--units` of them)
  ops      every cpu op a distinct name
  streams  the kernels spread over 10,000 streams
  gpus     the kernels spread over 1,000 GPUs (one process each)
  frames   four Python frames per unit (no op, launch or kernel), on 10,000 threads (the frames replace the
           units' own events, so this shape is the same size too)

A unit is a Python frame (`python_function`), a cpu op inside it, the launch call inside the op and
the kernel it launched (correlated); every 50th op is `aten::item` with a stream synchronize
instead of a launch (a sync point), every 100th kernel an NCCL all-reduce (communication), and each
rank's main thread has two `ProfilerStep#N` annotations (phases).

For each shape the script runs `goodhart-prof` as a process per command (`analyze`, `analyze
--json`, `analyze --html`, `export` to .pftrace) and prints the seconds and the ratio to the `few`
shape's time for the same command, measured in this one run. Last line: one JSON object.
`--check-json DIR` writes each shape's `--json` output (for comparing before and after a change).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgspec

SHAPES = ("few", "threads", "ranks", "names", "ops", "streams", "gpus", "frames")
COMMANDS = {"analyze": ["analyze"], "json": ["analyze", "--json"], "html": ["analyze", "--html", "{out}.html"],
            "export": ["export", "-o", "{out}.pftrace"]}
GPU_TID_BASE = 1_000_000_000
OPS = ("aten::mm", "aten::add", "aten::relu", "aten::copy_", "aten::mul", "aten::sum", "aten::cat",
       "aten::softmax")
KERNELS = ("sm90_xmma_gemm_bf16bf16_bf16f32", "void at::native::vectorized_elementwise_kernel<4>",
           "void at::native::reduce_kernel<512, 1>", "triton_poi_fused_add_relu_0",
           "void at::native::(anonymous namespace)::CatArrayBatchedCopy", "triton_red_fused_sum_1",
           "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm>", "void at::native::softmax_warp_forward")
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"


def _entities(shape: str, units: int, threads: int, ranks: int):
    """Per unit: (rank, host thread, gpu, stream)."""
    for i in range(units):
        if shape == "threads":
            yield 0, 1 + i % threads, 0, 7 + i % 4
        elif shape == "ranks":
            yield i % ranks, 1 + (i // ranks) % 2, 0, 7 + i % 4
        elif shape == "streams":
            yield 0, 1 + i % 4, 0, 7 + i % 10_000
        elif shape == "gpus":
            yield 0, 1 + i % 4, i % 1000, 7 + i % 4
        elif shape == "frames":
            yield 0, 1 + i % 10_000, 0, 7 + i % 4
        else:
            yield 0, 1 + i % 4, 0, 7 + i % 4


def events(shape: str, units: int, threads: int, ranks: int) -> list[dict]:
    """The shape's events (see the module docstring)."""
    out: list[dict] = []
    merged = shape == "ranks"
    host_pid = 100_000  # a process id no GPU uses
    cursor: dict[tuple[int, int], float] = {}
    gpu_pids: set[int] = set()
    rank_span: dict[int, list[float]] = {}
    for i, (rank, tid, gpu, stream) in enumerate(_entities(shape, units, threads, ranks)):
        pid = rank if merged else host_pid
        key = (pid, tid)
        t = cursor.get(key, 1_000.0)
        cursor[key] = t + 40.0
        span = rank_span.setdefault(rank, [t, t + 40.0])
        span[0], span[1] = min(span[0], t), max(span[1], t + 40.0)
        if shape == "frames":
            for depth in range(4):
                out.append({"ph": "X", "cat": "python_function", "name": f"model.py({10 + depth}): f{depth}",
                            "pid": pid, "tid": tid, "ts": t + depth, "dur": 30.0 - 2 * depth,
                            "args": {"Python id": 4 * i + depth + 1,
                                     "Python parent id": 4 * i + depth if depth else 0}})
            continue
        out.append({"ph": "X", "cat": "python_function", "name": "t.py(4): s", "pid": pid,
                    "tid": tid, "ts": t, "dur": 30.0, "args": {"Python id": i + 1, "Python parent id": 0}})
        corr = i + 1
        if i % 50 == 49:
            out.append({"ph": "X", "cat": "cpu_op", "name": "aten::item", "pid": pid, "tid": tid,
                        "ts": t + 1, "dur": 25.0, "args": {"External id": corr}})
            out.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": pid,
                        "tid": tid, "ts": t + 2, "dur": 20.0, "args": {"External id": corr, "correlation": corr}})
            out.append({"ph": "X", "cat": "cpu_op", "name": "aten::_local_scalar_dense", "pid": pid,
                        "tid": tid, "ts": t + 23, "dur": 1.0, "args": {"External id": corr}})
            continue
        op = f"aten::op_{i}" if shape == "ops" else OPS[i % len(OPS)]
        kernel = (NCCL if i % 100 == 0 else f"kernel_{i}" if shape == "names" else KERNELS[i % len(KERNELS)])
        out.append({"ph": "X", "cat": "cpu_op", "name": op, "pid": pid, "tid": tid, "ts": t + 1,
                    "dur": 20.0, "args": {"External id": corr}})
        out.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": pid, "tid": tid,
                    "ts": t + 3, "dur": 5.0, "args": {"External id": corr, "correlation": corr}})
        gpid, gtid = (rank, GPU_TID_BASE + 1000 * gpu + stream) if merged else (gpu, stream)
        gpu_pids.add(gpid)
        out.append({"ph": "X", "cat": "kernel", "name": kernel, "pid": gpid, "tid": gtid, "ts": t + 9,
                    "dur": 12.0, "args": {"device": gpu, "stream": stream, "correlation": corr,
                                          "External id": corr}})
    for rank, (lo, hi) in sorted(rank_span.items()):
        pid = rank if merged else host_pid
        mid = (lo + hi) / 2
        if merged:
            out.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"rank {rank}"}})
        for step, (a, b) in enumerate(((lo - 1, mid), (mid, hi + 20))):
            out.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": pid,
                        "tid": 1, "ts": a, "dur": b - a})
    return out


def write_shape(shape: str, units: int, threads: int, ranks: int, out: Path) -> Path:
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],
           "traceEvents": events(shape, units, threads, ranks)}
    out.write_bytes(msgspec.json.encode(doc))
    return out


def run_command(command: str, path: Path, scratch: Path) -> float:
    argv = [a.format(out=scratch / f"{path.stem}.{command}") for a in COMMANDS[command]]
    for a in argv:
        if a.startswith(str(scratch)):
            Path(a).unlink(missing_ok=True)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "goodhart_prof.cli", argv[0], str(path), *argv[1:]],
                          capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{command} on {path.name} failed ({proc.returncode}): {proc.stderr.strip()[-800:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=100_000, help="units of work per shape (default 100,000)")
    parser.add_argument("--threads", type=int, default=100_000)
    parser.add_argument("--ranks", type=int, default=20_000)
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated subset (few is always run)")
    parser.add_argument("--commands", default=",".join(COMMANDS), help="comma-separated subset of "
                        + ", ".join(COMMANDS))
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "goodhart-shapes")
    parser.add_argument("--check-json", type=Path, help="write each shape's --json output into this folder")
    parser.add_argument("--build-only", action="store_true")
    args = parser.parse_args()
    shapes = ["few"] + [s for s in args.shapes.split(",") if s and s != "few"]
    commands = [c for c in args.commands.split(",") if c]
    args.cache.mkdir(parents=True, exist_ok=True)
    paths = {}
    for shape in shapes:
        path = args.cache / f"{shape}_u{args.units}_t{args.threads}_r{args.ranks}.json"
        if not path.exists():
            write_shape(shape, args.units, args.threads, args.ranks, path)
        paths[shape] = path
    if args.check_json:
        args.check_json.mkdir(parents=True, exist_ok=True)
        for shape, path in paths.items():
            proc = subprocess.run([sys.executable, "-m", "goodhart_prof.cli", "analyze", str(path), "--json"],
                                  capture_output=True, text=True, check=True)
            (args.check_json / f"{shape}.json").write_text(proc.stdout)
    if args.build_only or args.check_json:
        for shape, path in paths.items():
            print(f"{shape:8s} {path} {path.stat().st_size / 1e6:.1f} MB")
        return
    times: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for shape in shapes:
            times[shape] = {c: run_command(c, paths[shape], Path(scratch)) for c in commands}
            print(f"# {shape}: " + ", ".join(f"{c} {s:.2f} s" for c, s in times[shape].items()), flush=True)
    print(f"{'shape':8s} {'MB':>6s} " + " ".join(f"{c + ' s':>10s} {'ratio':>6s}" for c in commands))
    result = {"benchmark": "bench_shapes", "units": args.units, "shapes": {}}
    for shape in shapes:
        mb = paths[shape].stat().st_size / 1e6
        ratios = {c: times[shape][c] / times["few"][c] for c in commands}
        print(f"{shape:8s} {mb:6.1f} " + " ".join(f"{times[shape][c]:10.2f} {ratios[c]:6.2f}" for c in commands))
        result["shapes"][shape] = {"mb": round(mb, 1), "seconds": {c: round(times[shape][c], 3) for c in commands},
                                   "ratio": {c: round(ratios[c], 2) for c in commands}}
    worst = max(r for s in result["shapes"].values() for r in s["ratio"].values())
    print(f"worst ratio {worst:.2f} (target <= 3): {'PASS' if worst <= 3 else 'FAIL'}")
    result["worst_ratio"] = round(worst, 2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
