"""FLOPs and bytes of one GEMM, batched GEMM, convolution or attention op from its recorded
signature: the operands' shapes (`Input Dims`), its scalar arguments (`Concrete Inputs`: stride,
padding, dilation, groups; causal) and its dtype. `op_work` answers one signature; FORMULAS names
the ops it knows (analysis/gpu/efficiency.py applies it to a trace's ops, once per distinct
signature). An op whose arguments the trace does not record is unsized (NaN), never guessed.
"""
from __future__ import annotations

import re

import numpy as np

from ...units import ELEMENT_BYTES

# op name -> formula kind. `mm` etc. take the shapes of their operands; `conv` the input, weight
# and stride/padding/dilation/groups (positions per schema in CONV_ARGS); `conv_bwd`
# convolution_backward's; `attention` SDPA-style (batch, heads, length, head dim) operands, or
# `attention_blhd` for the flash/efficient kernels' (batch, length, heads, head dim).
# The loader keeps shapes for trace.model.SHAPED_OPS only: the same names (tests/analysis/gpu/test_efficiency.py).
FORMULAS = {
    "aten::mm": "mm", "aten::addmm": "addmm", "aten::_addmm_activation": "addmm",
    "aten::bmm": "bmm", "aten::baddbmm": "baddbmm",
    "aten::conv1d": "conv", "aten::conv2d": "conv", "aten::conv3d": "conv",
    "aten::convolution": "conv", "aten::_convolution": "conv",
    "aten::conv_transpose1d": "conv", "aten::conv_transpose2d": "conv", "aten::conv_transpose3d": "conv",
    "aten::convolution_backward": "conv_bwd",
    "aten::scaled_dot_product_attention": "attention",
    "aten::_scaled_dot_product_flash_attention": "attention",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "attention",
    "aten::_scaled_dot_product_efficient_attention": "attention",
    "aten::_scaled_dot_product_cudnn_attention": "attention",
    "aten::_flash_attention_forward": "attention_blhd",
    "aten::_efficient_attention_forward": "attention_blhd",
}
# (stride, padding, dilation, transposed, output_padding, groups) argument positions; None: the
# schema has no such argument (transposed then comes from the op name).
CONV_ARGS = {
    "aten::convolution": (3, 4, 5, 6, 7, 8), "aten::_convolution": (3, 4, 5, 6, 7, 8),
    "aten::convolution_backward": (4, 5, 6, 7, 8, 9),
}
_CONV_ND = (3, 4, 5, None, None, 6)            # conv1d/2d/3d(input, weight, bias, stride, padding, dilation, groups)
_CONV_T = (3, 4, 7, None, 5, 6)                # conv_transposeNd(input, weight, bias, stride, padding, output_padding, groups, dilation)
# is_causal position per attention schema (flash/efficient forward: see `_causal`)
CAUSAL_ARG = {"aten::scaled_dot_product_attention": 5, "aten::_scaled_dot_product_flash_attention": 4,
              "aten::_scaled_dot_product_flash_attention_for_cpu": 4,
              "aten::_scaled_dot_product_efficient_attention": 6,
              "aten::_scaled_dot_product_cudnn_attention": 6, "aten::_flash_attention_forward": 8,
              "aten::_efficient_attention_forward": 9}


def parse_dims(label: str) -> list[list[int] | None]:
    """An `input_dims` label -> one size list per input ([] for a scalar, None for `?`)."""
    out: list[list[int] | None] = []
    for part in str(label).split(", "):
        if part == "?":
            out.append(None)
        else:
            out.append([int(x) for x in part.split("x")] if part else [])
    return out


def _ints(text: str | None) -> list[int] | None:
    """`[2, 2]` or `1` -> [2, 2] / [1]; None when not integers."""
    if text is None:
        return None
    found = re.fullmatch(r"\s*\[?\s*(-?\d+(?:\s*,\s*-?\d+)*)?\s*\]?\s*", text)
    if not found or found.group(1) is None:
        return None
    return [int(x) for x in found.group(1).split(",")]


def _arg(concrete: list[str] | None, i: int | None) -> str | None:
    if concrete is None or i is None or i >= len(concrete) or concrete[i] == "":
        return None
    return concrete[i]


def _prod(values) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out


def op_work(op: str, dims_label: str, concrete_label: str | None, dtype: str) -> tuple[float, float]:
    """(FLOPs, bytes) of one call of `op` with these shapes; NaN where they cannot be known."""
    kind = FORMULAS.get(op)
    dims = parse_dims(dims_label)
    concrete = None if concrete_label is None else str(concrete_label).split("|")
    size = ELEMENT_BYTES.get(dtype)
    try:
        if kind in ("mm", "addmm", "bmm", "baddbmm"):
            flops, elements = _gemm(kind, dims)
        elif kind == "conv":
            flops, elements = _conv(op, dims, concrete)
        elif kind == "conv_bwd":
            flops, elements = _conv_bwd(dims, concrete)
        elif kind in ("attention", "attention_blhd"):
            flops, elements = _attention(op, kind, dims, concrete)
        else:
            return np.nan, np.nan
    except (TypeError, ValueError, IndexError, ZeroDivisionError):
        return np.nan, np.nan  # shapes that do not fit the schema (a None, a short list)
    return float(flops), float(elements * size) if size and flops == flops else np.nan


def _gemm(kind: str, dims) -> tuple[float, int]:
    """mm: A (M, K) x B (K, N): 2*M*N*K FLOPs (one multiply and one add per term; torch's
    convention), bytes = A + B + C; addmm/baddbmm also read the added tensor (their add and
    scaling are not counted, as torch does not); bmm/baddbmm: times the batch."""
    a, b = (dims[1], dims[2]) if kind in ("addmm", "baddbmm") else (dims[0], dims[1])
    rank = 3 if kind in ("bmm", "baddbmm") else 2
    if len(a) != rank or len(b) != rank or a[-1] != b[-2] or (rank == 3 and a[0] != b[0]):
        return np.nan, 0
    batch = a[0] if rank == 3 else 1
    m, k, n = a[-2], a[-1], b[-1]
    elements = _prod(a) + _prod(b) + batch * m * n
    if kind in ("addmm", "baddbmm"):
        elements += _prod(dims[0])
    return 2 * batch * m * n * k, elements


def _conv_params(op: str, concrete, spatial: int):
    at = CONV_ARGS.get(op) or (_CONV_T if "transpose" in op else _CONV_ND)
    stride, padding, dilation = (_ints(_arg(concrete, i)) for i in at[:3])
    text = _arg(concrete, at[1])
    transposed = "transpose" in op if at[3] is None else _arg(concrete, at[3])
    if isinstance(transposed, str):
        transposed = {"True": True, "False": False}.get(transposed)
    out_pad = [0] if at[4] is None else _ints(_arg(concrete, at[4]))
    groups = _ints(_arg(concrete, at[5]))
    if text in ("same", "valid"):  # conv2d(padding="same"/"valid"): output = input / 0 padding
        padding = text
    if None in (stride, padding, dilation, transposed, out_pad, groups):
        raise ValueError("scalar arguments not recorded")

    def per_dim(values):
        return values * spatial if len(values) == 1 else values
    if padding not in ("same", "valid"):
        padding = per_dim(padding)
    return per_dim(stride), padding, per_dim(dilation), transposed, per_dim(out_pad), groups[0]


def _conv(op: str, dims, concrete) -> tuple[float, int]:
    """FLOPs = 2 x N x W0 x W1 x prod(kernel) x prod(S): W0, W1 = the weight's first two sizes
    (C_out, C_in / groups; transposed: C_in, C_out / groups) and S the spatial sizes of the side
    the kernel slides over (the output; transposed: the input). torch's convention (its conv2d
    flops). Bytes = input + weight + output (+ bias)."""
    x, w, bias = dims[0], dims[1], dims[2]
    spatial = len(x) - 2
    if spatial < 1 or len(w) != len(x):
        return np.nan, 0
    stride, padding, dilation, transposed, out_pad, groups = _conv_params(op, concrete, spatial)
    k = w[2:]
    if transposed:
        pads = [0] * spatial if padding in ("same", "valid") else padding
        out = [(i - 1) * s - 2 * p + d * (kk - 1) + op_ + 1
               for i, s, p, d, kk, op_ in zip(x[2:], stride, pads, dilation, k, out_pad)]
        c_out, slid = w[1] * groups, x[2:]
    else:
        out = _conv_out(x[2:], stride, padding, dilation, k)
        c_out, slid = w[0], out
    if min(out) < 1:
        return np.nan, 0
    flops = 2 * x[0] * w[0] * w[1] * _prod(k) * _prod(slid)
    elements = _prod(x) + _prod(w) + x[0] * c_out * _prod(out) + (_prod(bias) if bias else 0)
    return flops, elements


def _conv_out(size, stride, padding, dilation, k) -> list[int]:
    if padding == "same":
        return list(size)
    pads = [0] * len(size) if padding == "valid" else padding
    return [(i + 2 * p - d * (kk - 1) - 1) // s + 1 for i, s, p, d, kk in zip(size, stride, pads, dilation, k)]


def _conv_bwd(dims, concrete) -> tuple[float, int]:
    """convolution_backward(grad_output, input, weight, ..., output_mask): each of grad_input and
    grad_weight that output_mask asks for costs the forward's FLOPs (the same products, summed
    another way); grad_bias is a reduction and not counted. Bytes = grad_output + input + weight
    read, plus each gradient written."""
    grad_out, x, w = dims[0], dims[1], dims[2]
    mask = _arg(concrete, 10)
    transposed = _arg(concrete, 7)
    if mask is None or transposed is None:
        raise ValueError("output_mask not recorded")
    wanted = [m.strip() == "True" for m in mask.strip("[]").split(",")]
    slid = x[2:] if transposed == "True" else grad_out[2:]
    forward = 2 * x[0] * w[0] * w[1] * _prod(w[2:]) * _prod(slid)
    flops = forward * (int(wanted[0]) + int(wanted[1]))
    elements = _prod(grad_out) + _prod(x) + _prod(w) + wanted[0] * _prod(x) + wanted[1] * _prod(w)
    return flops, elements


def _attention(op: str, kind: str, dims, concrete) -> tuple[float, int]:
    """Q (B, H, Lq, D), K (B, Hk, Lk, D), V (B, Hk, Lk, Dv): 2*B*H*Lq*Lk*D for Q K^T plus
    2*B*H*Lq*Lk*Dv for P V (softmax and scaling not counted), halved when causal (only the
    lower triangle is computed: FlashAttention's convention). Bytes = Q + K + V + O."""
    q, k, v = dims[0], dims[1], dims[2]
    if len(q) != 4 or len(k) != 4 or len(v) != 4:
        return np.nan, 0  # variable-length (packed) inputs: lengths per sequence unknown
    if kind == "attention_blhd":
        q, k, v = ([t[0], t[2], t[1], t[3]] for t in (q, k, v))
    b, h, lq, d = q
    lk, dv = k[2], v[3]
    causal = _causal(op, concrete)
    flops = 2 * b * h * lq * lk * (d + dv) / (2 if causal else 1)
    return flops, _prod(q) + _prod(k) + _prod(v) + b * h * lq * dv


def _causal(op: str, concrete) -> bool:
    value = _arg(concrete, CAUSAL_ARG.get(op))
    if value is None:
        raise ValueError("is_causal not recorded")
    if op == "aten::_efficient_attention_forward":  # custom_mask_type: 0 none, 1/2 causal
        return value.strip() not in ("0",)
    return value.strip() == "True"
