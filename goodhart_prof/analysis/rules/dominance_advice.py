"""What to change when one kernel (or one op's kernels) dominates GPU time: the known faster paths,
each recognised from the kernel and the ops that launched it, with the GPU time it would save where
the trace can price it. dominant_kernel's advice (rules/dominance.py)."""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..gpu.kernels import layout_transposes, op_categories
from .base import Context, Rule
from .precision import amp_advice, compute_capabilities

# fp32 GEMMs by name: cuBLAS/MAGMA `sgemm`, TF32 and f32 xmma tiles, Tensile's single-precision
# `Cijk_*_S_B_*`/`*_SB_*`; not names that also carry a 16-bit type (`bf16bf16_bf16f32_f32` tiles
# accumulate in fp32 on bf16 inputs).
_FP32_GEMM = re.compile(r"sgemm|tf32|f32f32_f32|^cijk_\w*?_s_?b_")
_HALF = re.compile(r"bf16|f16|half|hgemm|fp8|e4m3|e5m2|fp4|e2m1|int8")
_SOFTMAX = re.compile(r"softmax", re.I)
# Ops of eager attention (Q K^T and P V): a softmax beside them is the middle of attention.
_EAGER_ATTENTION_OPS = ("aten::bmm", "aten::baddbmm", "aten::matmul")
# The library a layout transpose comes from, as its advice names it.
_CONV_LIBRARY = {"cudnn": "cuDNN", "miopen": "MIOpen"}

NO_PATH = ("no faster path is known for this work: the finding says where the time goes, not how "
           "much a change would save")


@dataclass(frozen=True)
class Advice:
    """The fix text; the faster path's name (None: none known); the GPU time it would save over
    the trace (None: not priced, `why_none` says why); evidence the path adds."""
    fix: str
    path: str | None = None
    saved_us: float | None = None
    why_none: str = NO_PATH
    evidence: dict | None = None


def faster_path(ctx: Context, rule: Rule, g: pd.DataFrame, kern: pd.DataFrame,
                mine: pd.DataFrame) -> Advice:
    """The advice for the dominant work: `rule` dominant_kernel (its thresholds), `g` all GPU
    activity (kernels.gpu_with_category), `kern` the rows of its top kernel, `mine` the rows of
    the dominant kernel or op."""
    name = str(kern["name"].iloc[0])
    if _SOFTMAX.search(name) and g["op"].isin(_EAGER_ATTENTION_OPS).any():
        return Advice("A standalone softmax between batched matmuls is eager attention: use the "
                      "fused torch.nn.functional.scaled_dot_product_attention (flash / "
                      "memory-efficient kernels), which never writes the attention matrix to "
                      "memory.", "sdpa", float(kern["dur"].sum()))
    if layout_transposes([name])[0] and _mostly_under_convolutions(kern):
        return _channels_last(g, str(kern["library"].iloc[0]))
    gemm = mine[(mine["category"] == "gemm").to_numpy()]
    if not gemm.empty:
        names = pd.Series(gemm["name"].astype(str).unique())
        fp32 = names.str.lower().map(lambda n: bool(_FP32_GEMM.search(n)) and not _HALF.search(n))
        if fp32.any():
            slow = gemm[gemm["name"].astype(str).isin(set(names[fp32.to_numpy()]))]
            caps = compute_capabilities(ctx)
            text = ("These GEMMs run in fp32. " + amp_advice(caps) if caps else
                    "These GEMMs run in fp32: run the model under torch.autocast(dtype="
                    "torch.bfloat16) (float16 on GPUs without bf16), or at least allow TF32 "
                    "(torch.set_float32_matmul_precision('high')).")
            if caps and min(caps)[0] >= 8:
                text += " At least allow TF32 (torch.set_float32_matmul_precision('high'))."
            return Advice(text, "bf16_autocast", float(slow["dur"].sum()) / 2)
        per_it = len(gemm) / ctx.iterations
        if (per_it >= rule.limit("many_gemms")
                and float(gemm["dur"].median()) < rule.limit("tiny_gemm_us")):
            return Advice("Thousands of tiny GEMMs: batch them (torch.bmm over stacked operands, "
                          "a grouped GEMM such as torch._grouped_mm, or torch.compile to fuse "
                          "them).", "batch_gemms",
                          why_none="batching saves launches and tail effects the trace cannot "
                                   "price")
    return Advice("Most GPU time goes to this work: it is where optimization pays off (look at its "
                  "shapes and dtype, or whether it needs to run this often).")


def _conv_rows(g: pd.DataFrame) -> np.ndarray:
    """Per row of g: launched by a convolution op (OP_RULES' conv: `aten::cudnn_convolution`,
    `aten::convolution_backward`, ...)."""
    ops = g["op"].cat.categories
    is_conv = np.array([c == "conv" for c in op_categories(ops)] + [False])
    return is_conv[g["op"].cat.codes.to_numpy()]


def _mostly_under_convolutions(kern: pd.DataFrame) -> bool:
    """Most of the kernel's linked time was launched by convolution ops (or no launch is linked:
    a CUDA graph replay or a GPU-only trace, where the name alone says it)."""
    linked = kern["op"].notna().to_numpy()
    if not linked.any():
        return True
    dur = kern["dur"].to_numpy()
    return float(dur[linked & _conv_rows(kern)].sum()) > float(dur[linked].sum()) / 2


def _channels_last(g: pd.DataFrame, library: str) -> Advice:
    """Layout transposes around convolutions: the tensors are NCHW and the library's kernels want
    NHWC, so it converts each input and converts the result back. The share is every layout
    transpose of the trace (kernels.LAYOUT_TRANSPOSE) but those a non-convolution op launched."""
    codes = g["name"].cat.codes.to_numpy()
    transposes = layout_transposes(g["name"].cat.categories)[codes] & (codes >= 0)
    other_op = g["op"].notna().to_numpy() & ~_conv_rows(g)
    rows = transposes & ~other_op
    total = float(g["dur"].sum())
    share = float(g["dur"].to_numpy()[rows].sum()) / total if total > 0 else 0.0
    who = _CONV_LIBRARY.get(library, "The convolution library")
    fix = (f"{who} converts the NCHW tensors to NHWC and back around each convolution: these "
           f"layout transposes take {share:.1%} of GPU time. Use the channels_last memory format "
           "for the model and its inputs: model.to(memory_format=torch.channels_last), and each "
           "input x.contiguous(memory_format=torch.channels_last), so the convolutions read and "
           "write NHWC tensors as they are.")
    return Advice(fix, "channels_last",
                  why_none="the transposes' time is measured, but which kernels the "
                           "convolutions would pick on channels_last tensors is not in the trace",
                  evidence={"layout_transposes": {
                      "share": round(share, 4), "count": int(rows.sum()),
                      "kernels": int(np.unique(codes[rows]).size)}})
