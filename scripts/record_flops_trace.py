#!/usr/bin/env python
"""Record tests/data/ours/cpu_flops_ops.json.gz: a small CPU trace of GEMM, batched GEMM,
convolution and attention ops with shapes and torch's own FLOP estimate (`with_flops=True`), for
tests/analysis/gpu/test_efficiency.py to check our FLOP formulas against torch's `flops` arg.

    python scripts/record_flops_trace.py [OUT]

Shapes are small and odd (no two dimensions equal) so that a formula that swaps two of them fails.

torch 2.13's Chrome export does not write the `flops` arg any more (older Kineto exports did): the
profiler still computes it (`FunctionEvent.flops`, torch's `computeFlops`), so this script copies
it into the args of the exported GEMM/conv ops (mm, addmm, bmm, baddbmm, conv2d) as `flops`,
matching each op by name and shapes in start order (`aten::mul`/`aten::add`, also counted by torch,
are exported twice, a redispatch inside each, so they are left out).
"""
from __future__ import annotations

import gzip
import json
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "ours" / "cpu_flops_ops.json.gz"


def workload() -> None:
    g = torch.Generator().manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=g)

    a, b, bias = r(7, 11), r(11, 13), r(13)
    torch.mm(a, b)
    torch.addmm(bias, a, b)
    torch.bmm(r(3, 5, 6), r(3, 6, 9))
    torch.baddbmm(r(3, 5, 9), r(3, 5, 6), r(3, 6, 9))
    torch.matmul(r(2, 4, 5, 6), r(6, 3))          # -> aten::mm on the flattened batch
    torch.matmul(r(4, 5, 6), r(4, 6, 7))          # -> aten::bmm
    F.linear(r(10, 12), r(14, 12), r(14))         # -> aten::addmm
    F.linear(r(2, 3, 12), r(14, 12))              # -> aten::mm (no bias)
    x = r(2, 6, 17, 19)
    for stride, padding, dilation, groups in ((1, 0, 1, 1), (2, 1, 1, 1), (1, 2, 2, 1), (2, 0, 1, 3),
                                             (3, 1, 1, 6)):
        w = r(12, 6 // groups, 3, 5)
        with record_function(f"conv s{stride} p{padding} d{dilation} g{groups}"):
            F.conv2d(x, w, r(12), stride=stride, padding=padding, dilation=dilation, groups=groups)
    F.conv2d(x, r(4, 6, 1, 1), None, stride=(2, 3), padding=(0, 1))
    q, k, v = r(2, 3, 7, 8), r(2, 3, 9, 8), r(2, 3, 9, 10)
    F.scaled_dot_product_attention(q, k, v)
    F.scaled_dot_product_attention(r(2, 3, 9, 8), k, r(2, 3, 9, 8), is_causal=True)


COUNTED = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::conv2d")


def with_flops(doc: dict, events) -> None:
    """Write the flops of each FunctionEvent of the GEMM/conv ops torch counts (COUNTED) into the
    args of the exported op it is: same name and shapes, same place in start order."""
    def key(name, dims):
        return name, json.dumps(dims)
    exported: dict = {}
    for ev in sorted((e for e in doc["traceEvents"] if e.get("cat") == "cpu_op"), key=lambda e: e["ts"]):
        if ev["name"] in COUNTED:
            exported.setdefault(key(ev["name"], ev["args"]["Input Dims"]), []).append(ev)
    counted: dict = {}
    for fe in sorted(events, key=lambda e: e.time_range.start):
        if fe.name in COUNTED:
            counted.setdefault(key(fe.name, fe.input_shapes), []).append(fe)
    if counted.keys() != exported.keys():
        raise SystemExit("the profiler's ops and the exported ops differ")
    for k, fes in counted.items():
        if len(fes) != len(exported[k]):
            raise SystemExit(f"{k}: {len(fes)} profiler events, {len(exported[k])} exported")
        for fe, ev in zip(fes, exported[k]):
            if fe.flops:
                ev["args"]["flops"] = int(fe.flops)


def main(out: Path = OUT) -> None:
    torch.manual_seed(0)
    workload()  # warm-up: first calls allocate and pick kernels
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_flops=True) as prof:
        workload()
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(plain))
        doc = json.loads(plain.read_text())
    with_flops(doc, prof.events())
    out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.GzipFile(out, "wb", mtime=0) as dst:
        dst.write(json.dumps(doc, separators=(",", ":")).encode())
    print(f"{out} ({out.stat().st_size:,} bytes), torch {torch.__version__}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT)
