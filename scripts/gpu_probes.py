#!/usr/bin/env python
"""The measurements scripts/gpu_acceptance.py runs in processes of their own, one JSON line each.

* `env`: the machine (GPU name, driver, torch, triton, CUDA) and the roofline's denominators
  measured in a few seconds: peak bf16 matrix-product TFLOP/s, device-to-device copy GB/s
  (bytes read + written) and host-to-device GB/s from pinned and from pageable memory.
* `smoke`: one trainer (`--config`, else the device's preset) built and warmed up, the first
  call's compile timed cold (the inductor cache given by TORCHINDUCTOR_CACHE_DIR is filled for
  the steps after), then one iteration under `torch.cuda.set_sync_debug_mode("error")`: a clean
  loop makes no host sync, and a sync that does happen is named with where in our code it is.

`python scripts/gpu_probes.py env|smoke [--device D] [--config TOML]`; the last line
printed is the result as one JSON object. On the CPU the same code runs at small sizes
and says what it could not measure there.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import torch

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def _timed(device: torch.device, fn: Callable[[], Any], reps: int, warm: int = 2) -> float:
    """Median seconds of one call of fn (CUDA events on a GPU, perf_counter on the CPU)."""
    for _ in range(warm):
        fn()
    times = []
    for _ in range(reps):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1000.0)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def _matmul_seconds(device: torch.device, n: int, dtype: torch.dtype, reps: int) -> float:
    """Median seconds of one n x n x n matrix product on random data (freed on return)."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    return _timed(device, lambda: torch.mm(a, b), reps=reps)


def driver_version() -> str | None:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def probe_env(device: torch.device) -> dict[str, Any]:
    try:
        import triton
        triton_version = triton.__version__
    except Exception:  # noqa: BLE001 - absent or broken: say so
        triton_version = None
    info: dict[str, Any] = {
        "python": platform.python_version(), "torch": torch.__version__,
        "triton": triton_version, "cuda": torch.version.cuda, "device_type": device.type,
        "cpu_count": os.cpu_count(), "driver": driver_version(),
    }
    cuda = device.type == "cuda"
    if cuda:
        props = torch.cuda.get_device_properties(device)
        info.update(device=props.name, capability=f"{props.major}.{props.minor}",
                    multiprocessors=props.multi_processor_count,
                    memory_gib=round(props.total_memory / 2**30, 1),
                    cudnn=torch.backends.cudnn.version())
    else:
        from benchlib import device_name
        info["device"] = device_name(device)
    # Peak matrix product: bf16 on a GPU (the trainer's autocast dtype), fp32 on the CPU.
    n = 8192 if cuda else 512
    dtype = torch.bfloat16 if cuda else torch.float32
    seconds = _matmul_seconds(device, n, dtype, reps=10 if cuda else 3)
    info["matmul"] = {"n": n, "dtype": str(dtype).removeprefix("torch."), "seconds": seconds,
                      "tflops": round(2 * n**3 / seconds / 1e12, 2)}
    # Copies: device to device (read + write counted), host to device from pinned and pageable.
    size = (1 << 30) if cuda else (64 << 20)
    src = torch.empty(size, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    seconds = _timed(device, lambda: dst.copy_(src), reps=10 if cuda else 3)
    info["copy_device"] = {"bytes": size, "gb_per_s": round(2 * size / seconds / 1e9, 1),
                           "counted": "bytes read + bytes written"}
    if cuda:
        htod = 256 << 20
        dev_buf = torch.empty(htod, dtype=torch.uint8, device=device)
        for name, host in (("pinned", torch.empty(htod, dtype=torch.uint8, pin_memory=True)),
                           ("pageable", torch.empty(htod, dtype=torch.uint8))):
            seconds = _timed(device, lambda: dev_buf.copy_(host, non_blocking=True), reps=5)
            info[f"htod_{name}"] = {"bytes": htod, "gb_per_s": round(htod / seconds / 1e9, 1)}
    else:
        info["htod_pinned"] = info["htod_pageable"] = None
        info["note"] = "on the CPU: no GPU figures; the matrix product is fp32"
    return info


def _our_frames(exc: BaseException) -> list[str]:
    """Where in this repository an exception was raised from: file:line function, innermost last."""
    frames = []
    for fr in traceback.extract_tb(exc.__traceback__):
        path = Path(fr.filename)
        try:
            rel = path.resolve().relative_to(REPO)
        except ValueError:
            continue
        frames.append(f"{rel}:{fr.lineno} {fr.name}")
    return frames[-4:]


def probe_smoke(device: torch.device, config: str | None) -> dict[str, Any]:
    from trainer.config import build_config
    from trainer.logger import AsyncLogger
    from trainer.train import METRIC_NAMES, Trainer

    cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    cache_was_empty = not cache or not any(Path(cache).glob("*"))
    cfg = build_config(config, device=device.type, progress=False)
    t0 = time.perf_counter()
    trainer = Trainer(cfg)
    build_s = time.perf_counter() - t0
    warm_s = trainer.warm_up()  # compiles (cold when the cache was empty), autotunes, then restores
    out: dict[str, Any] = {
        "n_envs": cfg.n_envs, "rollout_steps": cfg.rollout_steps, "compiled": trainer.compiled,
        "amp": trainer.amp, "build_s": round(build_s, 3), "warmup_s": round(warm_s, 3),
        "inductor_cache": cache, "cache_was_empty": cache_was_empty,
    }
    logger = AsyncLogger(METRIC_NAMES, None, trainer.device, progress=False)
    times = []
    try:
        trainer.run_iteration(trainer.iteration, logger)  # the first timed one: no compile left
        _sync(device)
        out["sync_debug"] = "error" if device.type == "cuda" else "not available on the CPU"
        if device.type == "cuda":
            torch.cuda.set_sync_debug_mode("error")
        try:
            t0 = time.perf_counter()
            trainer.run_iteration(trainer.iteration, logger)
            if device.type == "cuda":
                torch.cuda.set_sync_debug_mode(0)
            _sync(device)
            times.append(time.perf_counter() - t0)
            out["host_syncs"] = "none" if device.type == "cuda" else None
        except RuntimeError as exc:
            if device.type == "cuda":
                torch.cuda.set_sync_debug_mode(0)
            out["host_syncs"] = "found"
            out["sync_error"] = str(exc).strip().splitlines()[0][:300]
            out["sync_at"] = _our_frames(exc)
        for _ in range(2):
            t0 = time.perf_counter()
            trainer.run_iteration(trainer.iteration, logger)
            _sync(device)
            times.append(time.perf_counter() - t0)
    finally:
        try:
            logger.close()
        except RuntimeError as exc:  # its thread's error (a sync the debug mode refused, say)
            out["logger_error"] = str(exc).strip().splitlines()[0][:300]
    out["iteration_s"] = [round(t, 4) for t in times]
    steps = cfg.n_envs * cfg.rollout_steps
    out["env_steps_per_s"] = round(steps / sorted(times)[len(times) // 2], 1) if times else None
    if device.type == "cuda":
        out["max_memory_allocated_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
    return out


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("probe", choices=("env", "smoke"))
    ap.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    ap.add_argument("--config", default=None, help="trainer TOML (smoke; default: the preset)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    want = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    if want == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"error": "--device cuda: torch sees no CUDA device"}))
        return 2
    device = torch.device(want)
    try:
        result = (probe_env(device) if args.probe == "env"
                  else probe_smoke(device, args.config))
    except Exception as exc:  # noqa: BLE001 - the orchestrator records the failure and goes on
        traceback.print_exc(file=sys.stderr)
        result = {"error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}",
                  "at": _our_frames(exc)}
        print(json.dumps(result), flush=True)
        return 1
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
