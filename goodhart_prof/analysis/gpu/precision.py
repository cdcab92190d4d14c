"""The precision of each GEMM/conv kernel: from the op that launched it, else from its name.

`kernel_precision(trace)` has one row per GEMM/conv kernel (category `gemm` or `conv`, see
kernels.py) with its `dtype` (DTYPES) and the `source` of that verdict:

- `op_input_type`: the `Input type` (record_shapes) of the cpu op that launched it: the innermost
  op holding the launch call (GPU activity -> launch call by correlation, then the host tree),
  or, when that op recorded no floating-point input, the nearest enclosing GEMM/conv op
  (`aten::mm`, `aten::addmm`, `aten::convolution`, ...). fp32 inputs whose kernel name says TF32
  (`s1688gemm`, `tf32`) are `tf32`: the op states the data, the kernel the math.
- `kernel_name`: the types the library spells in the name (KERNEL_NAME_TYPES), for traces without
  shapes and kernels replayed from a CUDA/HIP graph (the graph launch's op is not theirs).
- `unknown`: neither says.
"""
from __future__ import annotations

import functools
import re

import numpy as np
import pandas as pd

from ...trace.model import Trace, in_categories
from ..intervals import group_totals, sorted_rows
from .kernels import gpu_with_category, launching_ops
from ..host.links import gpu_launches, graph_launched
from ..tree import host_tree
from ..memo import derived

DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "fp4", "int8", "unknown")
LOW_PRECISION = ("bf16", "fp16", "fp8", "fp4", "int8")
FULL_PRECISION = ("fp64", "fp32", "tf32")
SOURCES = ("op_input_type", "kernel_name", "unknown")
MATMUL_CATEGORIES = ("gemm", "conv")
COLUMNS = ["gpu_row", "name", "category", "dur", "dtype", "source", "op"]

# PyTorch's scalar type names as `Input type` writes them (c10's ScalarType names for the
# reduced types, the C++ type for the rest: `signed char` is int8).
OP_TYPES = {
    "double": "fp64", "float": "fp32", "c10::Half": "fp16", "c10::BFloat16": "bf16",
    "c10::Float8_e4m3fn": "fp8", "c10::Float8_e5m2": "fp8", "c10::Float8_e4m3fnuz": "fp8",
    "c10::Float8_e5m2fnuz": "fp8", "c10::Float8_e8m0fnu": "fp8", "c10::Float4_e2m1fn_x2": "fp4",
    "signed char": "int8", "c10::qint8": "int8", "c10::quint8": "int8",
}
# When an op's inputs differ (fp8 operands with fp32 scales), its GEMM runs at the narrowest.
_NARROWEST_FIRST = ("fp4", "fp8", "int8", "fp16", "bf16", "fp32", "fp64")

# Ops whose inputs are the GEMM's or convolution's operands (climbed to when the innermost op
# holding the launch recorded no types).
MATMUL_OPS = re.compile(
    r"^aten::(?:_?(?:mm|addmm|bmm|baddbmm|addbmm|matmul|linear|addmv|mv|dot|einsum|_scaled_mm"
    r"|_int_mm|_addmm_activation|_scaled_grouped_mm|_grouped_mm)|.*convolution.*|conv\d?d|conv_.*"
    r"|cudnn_conv.*|miopen_conv.*|mkldnn_conv.*)$")

# Types spelled in kernel names, first match wins (tested on the name as recorded):
# - Tensile/hipBLASLt: `Cijk_A<idx>_B<idx>_` then the type letters of A (and B, D, compute):
#   S fp32, D fp64, H fp16, B bf16, X xf32 (TF32), I8 int8, F8/B8 fp8; `SB` is fp32 with beta,
#   `BBS_BH` bf16 in and out with fp32 compute, `HHS` fp16.
# - cuBLASLt's Hopper `nvjet_<a><compute><d>`: s fp32, h fp16, t bf16 (`nvjet_tst` bf16).
# - CUTLASS and cuBLAS tiles spell the math: `bf16_s16816gemm` (bf16 in, fp32 accumulate),
#   `h1688gemm`/`h16816gemm`/`fp16_s884gemm` fp16, a bare `s1688gemm`/`s16816gemm` is TF32 on fp32
#   data (sampled_128rank's A100 GEMMs), `sgemm`/`scudnn` fp32, `hgemm`/`hcudnn` fp16, xmma's
#   `gemm_bf16bf16_...`, `tf32`, and MIOpen's `igemm_fwd_gtcx3_nhwc_bf16`.
# - Templates: the first type argument (`implicit_convolve_sgemm<float, ...>`,
#   `gemmSN_TN_kernel<float, ...>`, `dgrad_engine<float, ...>`), and CK's mangled ones (_CK).
_TENSILE = re.compile(r"^Cijk_A[a-z]+_B[a-z]+_(I8|F8|B8|[SDHBXI])")
_TENSILE_TYPES = {"S": "fp32", "D": "fp64", "H": "fp16", "B": "bf16", "X": "tf32", "I8": "int8",
                  "I": "unknown", "F8": "fp8", "B8": "fp8"}
# CK's kernels are recorded mangled; its GridwiseGemm templates open with the element types as
# builtin codes (`ttft`: A, B bf16 (CK's bhalf_t is an unsigned short), accumulate float, ...).
_CK = re.compile(r"^_ZN2ck.*?(?:I|E|_)(t|DF16_|f|a|d)(?:t|f|a|d|DF16_){2,}(?:N|L)")
_CK_TYPES = {"t": "bf16", "DF16_": "fp16", "f": "fp32", "a": "int8", "d": "fp64"}
_NVJET = re.compile(r"nvjet_([sht])")
_NVJET_TYPES = {"s": "fp32", "h": "fp16", "t": "bf16"}
KERNEL_NAME_TYPES: tuple[tuple[str, "re.Pattern[str]"], ...] = tuple(
    (dtype, re.compile(pattern, re.I)) for dtype, pattern in (
        ("fp8", r"e4m3|e5m2|fp8|f8f6f4"),
        ("fp4", r"mxfp4|nvfp4|e2m1|fp4"),
        ("bf16", r"bf16|bfloat16|bhalf"),
        ("fp16", r"fp16|f16|half|h884|h1688|h16816|hmma|hgemm|hcudnn|DF16_"),
        ("tf32", r"tf32|xf32|(?<![a-z0-9])s(?:1688|16816)gemm"),
        ("int8", r"int8|i8816|imma|<signed char"),
        ("fp32", r"sgemm|scudnn|fp32|<float\b|f32f32_f32"),
        ("fp64", r"dgemm|<double\b"),
    ))


@functools.lru_cache(maxsize=1 << 16)  # a pure function of the name: remembered per process
def kernel_name_dtype(name: str) -> str:
    """The precision a GEMM/conv kernel's name spells (module comment above), else `unknown`."""
    name = re.sub(r"^(?:void|std::enable_if<.*?>::type)\s+", "", name, count=1)
    tensile = _TENSILE.match(name)
    if tensile:
        return _TENSILE_TYPES[tensile.group(1)]
    ck = _CK.match(name)
    if ck:
        return _CK_TYPES[ck.group(1)]
    nvjet = _NVJET.search(name)
    if nvjet:
        return _NVJET_TYPES[nvjet.group(1)]
    for dtype, pattern in KERNEL_NAME_TYPES:
        if pattern.search(name):
            return dtype
    return "unknown"


def op_dtype(input_types: str) -> str:
    """The precision an op's `Input type` label states (the narrowest floating-point or int8
    input), else `unknown` (no typed inputs, only integer or bool ones)."""
    found = {OP_TYPES[t] for t in input_types.split(", ") if t in OP_TYPES}
    return next((d for d in _NARROWEST_FIRST if d in found), "unknown")


def kernel_precision(trace: Trace) -> pd.DataFrame:
    """One row per GEMM/conv kernel (COLUMNS; `gpu_row` is its row label in trace.events, `op`
    the launching op's name or ""). Built once per trace (memo.py)."""
    return derived(trace, "kernel_precision", _kernel_precision)


def _kernel_precision(trace: Trace) -> pd.DataFrame:
    gpu = trace.gpu
    cats = gpu_with_category(trace)["category"]  # the taxonomy, launching op included
    pick = in_categories(cats, MATMUL_CATEGORIES)
    if not pick.any():
        return pd.DataFrame({c: pd.Series(dtype=object if c != "dur" else float) for c in COLUMNS})
    # by name: once per distinct name, spread through the categorical codes
    name_codes = gpu["name"].cat.codes.to_numpy()[pick]
    distinct, inverse = np.unique(name_codes, return_inverse=True)
    # str objects, one per distinct name, shared by the rows (no fixed-width copy per row)
    distinct_names = np.array([str(n) for n in np.asarray(gpu["name"].cat.categories, dtype=object)[distinct]],
                              dtype=object)
    names = distinct_names[inverse]
    name_dtype = np.array([kernel_name_dtype(n) for n in distinct_names], dtype=object)[inverse]
    ev = trace.events
    # by the launching op: only where some cpu op recorded its input types
    typed_trace = "input_types" in ev and len(ev["input_types"].cat.categories) > 0
    op_rows = (_launching_ops(trace, np.flatnonzero(pick)) if typed_trace
               else np.full(len(names), -1, dtype=np.int64))
    has_op = op_rows >= 0
    op_name = np.full(len(names), "", dtype=object)
    op_type = np.full(len(names), "unknown", dtype=object)
    if has_op.any():
        at = ev.index.get_indexer(op_rows[has_op])
        names_of = np.asarray(ev["name"].cat.categories, dtype=object)  # not a string per row
        op_codes, op_inverse = np.unique(ev["name"].cat.codes.to_numpy()[at], return_inverse=True)
        op_name[has_op] = np.array([str(n) for n in names_of[op_codes]], dtype=object)[op_inverse.ravel()]
        op_type[has_op] = _dtypes_of(ev["input_types"].iloc[at])
    from_op = op_type != "unknown"
    dtype = np.where(from_op, op_type, name_dtype)
    dtype[from_op & (op_type == "fp32") & (name_dtype == "tf32")] = "tf32"
    source = np.where(from_op, "op_input_type", np.where(name_dtype != "unknown", "kernel_name", "unknown"))
    text = {"name": names, "category": np.asarray(cats.cat.categories, dtype=object)[
                cats.cat.codes.to_numpy()[pick]], "dtype": dtype, "source": source, "op": op_name}
    # object columns as they are (pandas would otherwise convert every string to its str dtype)
    return pd.DataFrame({"gpu_row": gpu.index.to_numpy()[pick], "dur": gpu["dur"].to_numpy()[pick],
                         **{k: pd.Series(v, dtype=object, copy=False) for k, v in text.items()}}
                        )[COLUMNS]


def _dtypes_of(types: pd.Series) -> np.ndarray:
    """op_dtype of each row of an `input_types` column, decided once per distinct label."""
    codes = types.cat.codes.to_numpy()
    table = np.array([op_dtype(str(t)) for t in types.cat.categories] + ["unknown"], dtype=object)
    return table[codes]  # code -1 (no types recorded) -> the appended "unknown"


def _launching_ops(trace: Trace, picked: np.ndarray) -> np.ndarray:
    """Row label of the op whose types describe each picked GPU activity (positions in
    trace.gpu): the innermost op holding its launch call (kernels.launching_ops) when that op
    states a type, else the nearest enclosing GEMM/conv op; -1 when there is none, and for graph
    replays."""
    innermost = launching_ops(trace)["op_node"].to_numpy()[picked]
    launch = gpu_launches(trace)["launch_row"].to_numpy()[picked]
    ok = innermost >= 0
    if ok.any():
        ok[np.flatnonzero(ok)[graph_launched(trace, launch[ok])]] = False
    out = np.full(len(picked), -1, dtype=np.int64)
    if not ok.any():
        return out
    tree = host_tree(trace)
    innermost = innermost[ok]
    typed, matmul = _node_flags(trace, tree)
    chosen = np.where(typed[innermost], innermost, -1)
    climb = np.flatnonzero(chosen < 0)
    if len(climb):
        nearest_matmul = tree.nearest(matmul & typed)
        start = innermost[climb]
        chosen[climb] = np.where(matmul[start] & typed[start], start, nearest_matmul[start])
    found = chosen >= 0
    rows = np.full(len(chosen), -1, dtype=np.int64)
    rows[found] = tree.row[chosen[found]]
    out[ok] = rows
    return out


def _node_flags(trace: Trace, tree) -> tuple[np.ndarray, np.ndarray]:
    """Per tree node: whether it is an op whose `Input type` states a precision, and whether
    its name is a GEMM/conv op (MATMUL_OPS)."""
    types = trace.events["input_types"]
    codes = types.cat.codes.to_numpy()[trace.events.index.get_indexer(tree.row)]
    stated = np.array([op_dtype(str(t)) != "unknown" for t in types.cat.categories] + [False])
    typed = stated[codes] & tree.is_op
    is_matmul = np.array([bool(MATMUL_OPS.match(str(n))) for n in tree.names] + [False])
    matmul = is_matmul[tree.name] & tree.is_op if len(tree.name) else np.zeros(0, dtype=bool)
    return typed, matmul


def precision_summary(table: pd.DataFrame) -> pd.DataFrame:
    """GEMM/conv kernel time per (dtype, source): columns dtype, source, count, total_us; most
    time first."""
    out = group_totals(table, ["dtype", "source"])
    return sorted_rows(out, ["total_us", "dtype"], [False, True])
