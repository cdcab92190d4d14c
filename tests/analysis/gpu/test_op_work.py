"""FLOPs and bytes of one op signature (analysis/gpu/op_work.py), worked out by hand: GEMMs by
their operands' shapes, a convolution by its shapes and scalar arguments (unsized without them)."""
from __future__ import annotations

import math

from goodhart_prof.analysis.gpu.op_work import FORMULAS, op_work


def test_gemms_by_hand():
    # (64 x 128) @ (128 x 32) in bf16 (2 bytes): 2mnk FLOPs; the three matrices read or written once
    assert op_work("aten::mm", "64x128, 128x32", None, "bf16") == (2 * 64 * 32 * 128, 2 * (64 * 128 + 128 * 32 + 64 * 32))
    flops, nbytes = op_work("aten::bmm", "4x64x128, 4x128x32", None, "bf16")
    assert (flops, nbytes) == (4 * 2 * 64 * 32 * 128, 4 * 2 * (64 * 128 + 128 * 32 + 64 * 32))
    # addmm: the bias (32) read too
    assert op_work("aten::addmm", "32, 64x128, 128x32", "||||", "bf16")[1] == 2 * (32 + 64 * 128 + 128 * 32 + 64 * 32)


def test_conv2d_by_hand_and_unsized_without_its_arguments():
    # 8x3x32x32 input, 16 3x3 filters, stride 1, padding 1, dilation 1: a 8x16x32x32 output, fp32
    flops, nbytes = op_work("aten::conv2d", "8x3x32x32, 16x3x3x3, 16", "|||[1, 1]|[1, 1]|[1, 1]|1", "fp32")
    assert flops == 2 * 8 * 16 * 32 * 32 * 3 * 3 * 3
    assert nbytes == 4 * (8 * 3 * 32 * 32 + 16 * 3 * 3 * 3 + 16 + 8 * 16 * 32 * 32)
    assert all(math.isnan(x) for x in op_work("aten::conv2d", "8x3x32x32, 16x3x3x3, 16", None, "fp32"))
    assert FORMULAS["aten::conv2d"] == "conv" and FORMULAS["aten::mm"] == "mm"
