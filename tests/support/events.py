"""Hand-made trace events for the tests: complete events of each category, a recorded `.item()`, a
`[memory]` instant event, a kernel with its launch, and a list of events written and loaded as a
trace."""
from __future__ import annotations

import json

from goodhart_prof.trace.load import load


def X(name, cat, ts, dur, pid=100, tid=100, **args) -> dict:
    """A complete event (`ph: X`) of a hand-made trace, its keyword arguments as its args."""
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


GPU_PID, STREAM = 0, 7


def op(name, ts, dur, **kw):
    return X(name, "cpu_op", ts, dur, **kw)


def rt(name, ts, dur, corr, **kw):
    return X(name, "cuda_runtime", ts, dur, correlation=corr, **kw)


def memcpy(name, ts, dur, corr):
    return X(name, "gpu_memcpy", ts, dur, pid=GPU_PID, tid=STREAM, device=0, stream=STREAM,
             correlation=corr, bytes=4)


def kernel(name, ts, dur, corr):
    return X(name, "kernel", ts, dur, pid=GPU_PID, tid=STREAM, device=0, stream=STREAM,
             correlation=corr)


def ann(name, ts, dur, **kw):
    return X(name, "user_annotation", ts, dur, **kw)


def cuda_item(ts, corr):
    """`.item()` of a CUDA tensor as Kineto records it (one device->host copy, then a wait)."""
    return [op("aten::item", ts, 50), op("aten::_local_scalar_dense", ts + 1, 48),
            rt("cudaMemcpyAsync", ts + 5, 10, corr), rt("cudaStreamSynchronize", ts + 20, 25, corr + 1),
            memcpy("Memcpy DtoH (Device -> Pageable)", ts + 30, 2, corr),
            X("Stream Sync", "cuda_sync", ts + 20, 25, pid=GPU_PID, tid=STREAM, device=0,
              stream=STREAM, correlation=corr + 1)]


def memory_event(ts, nbytes, allocated, reserved, device=0, device_type=1, addr=1, tid=100):
    """A `[memory]` instant event of profile_memory=True: `nbytes` allocated (negative: freed) at
    `addr`, with the allocator's totals after it (device_type 1: CUDA, 0: the host)."""
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 100,
            "tid": tid, "ts": ts, "args": {"Device Type": device_type, "Device Id": device,
                                           "Bytes": nbytes, "Addr": addr,
                                           "Total Allocated": allocated, "Total Reserved": reserved}}


def load_events(tmp_path, events, name="t.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"traceEvents": events}))
    return load(path)




def launch(name, ts, corr, op_name=None, cat="kernel"):
    """A kernel of 100 us at ts, its launch call, and optionally the cpu op around the launch."""
    out = [rt("cudaLaunchKernel", ts, 5, corr)]
    if op_name:
        out.append(op(op_name, ts - 1, 8))
    out.append(kernel(name, ts + 10, 100, corr) if cat == "kernel" else
               X(name, cat, ts + 10, 100, pid=0, tid=7, device=0, stream=7, correlation=corr))
    return out
