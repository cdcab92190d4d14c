"""Kernel categories and the per-kernel / per-category time tables.

Categories follow DESIGN.md: the first rule whose pattern matches the (demangled) name wins,
case-insensitively; memcpy and memset events are `memcpy` / `memset` whatever their name.
Rules are applied once per distinct name, then spread to rows through the categorical codes.
"""
from __future__ import annotations

import math
import re

from typing import Iterable

import numpy as np
import pandas as pd

from ..trace.model import Trace

# The rules, in DESIGN.md's order: (category, pattern, unless). A name matches a rule when it
# matches `pattern` and does not match `unless`. Patterns run on the whole demangled name,
# template arguments included, which is deliberate: cuBLAS helpers such as
# `splitKreduce_kernel<..., cublasSplitKParams>`, `dot_kernel<..., cublasDotParams>` or
# `epilogue::impl::globalKernel<..., cublasLtEpilogue_t>` only say they belong to a GEMM there.
#
# Why each pattern is what it is:
# - gemm: `(?<!fb)gemm` because fbgemm_gpu's embedding and quantisation kernels are not GEMMs;
#   `gemv` for cuBLAS matrix-vector kernels (gemv2T_kernel_val, gemvx); `Cijk_` only at a name
#   start, as ROCm Tensile / hipBLASLt spell GEMMs.
#   `unless`: a GEMM-shaped kernel that computes attention or a convolution is reported as what it
#   computes. Flash attention kernels carry `cutlass::bfloat16_t` in their template arguments,
#   xformers' memory-efficient attention is `fmha_cutlassF_*`, and cuDNN's convolutions are
#   implicit GEMMs (`implicit_convolve_sgemm`, `sm80_xmma_fprop_implicit_gemm_*`,
#   `cutlass__5x_cudnn::Kernel<cutlass_tensorop_*_fprop_*>`). Inductor names its kernels after the
#   ops they fuse, so a `triton_*` name is never taken for a GEMM here either.
# - attention / conv: `unless triton` for the same reason: `triton_poi_fused_convolution_relu_0` is
#   the pointwise epilogue Inductor fused after a convolution, not a convolution.
# - conv: `conv` but not `convert`; cuDNN's convolution algorithms and their helper kernels are
#   named by algorithm (`fprop`, `dgrad`, `wgrad`, `winograd`, `im2col`, `scudnn`/`hcudnn` tiles,
#   `cask_cudnn::*Offsets*` set-up kernels) and cuDNN's layout transposes (`nchwToNhwcKernel`,
#   `nhwcToNchwKernel`) run around convolutions.
# - scatter_gather: `(?<!with_)index` because `elementwise_kernel_with_index` is arange/linspace
#   writing its own index, not an indexing op; `index` covers index_select, index_put and
#   `indexing_backward`. `embedding` adds the TorchRec/fbgemm embedding lookups
#   (`split_embedding_*`), which are gathers (forward) and scatters (backward).
# - reduction: `norm(?!al)` keeps random `normal_` kernels out; `bn_fw`/`bn_bw` are cuDNN's batch
#   norm; `moments` and `GammaBeta` are layer norm's statistics and weight-gradient kernels.
# - elementwise: PyTorch's TensorIterator kernels (`elementwise_kernel`,
#   `vectorized_elementwise_kernel`, `unrolled_elementwise_kernel`) and the foreach kernels of
#   fused optimizers (`multi_tensor_apply`). Scatter/gather and index kernels are also built on
#   `*_elementwise_kernel` templates, which is why this rule comes after scatter_gather.
# - memcpy / memset: by name only for kernels that copy or fill (ROCm's `__amd_rocclr_copyBuffer`
#   / `fillBuffer` blits); memcpy and memset events take these categories from their event
#   category.
RULES: tuple[tuple[str, str, str | None], ...] = (
    ("communication", r"nccl|rccl", None),
    ("gemm", r"(?<!fb)gemm|gemv|cutlass|cublas|nvjet|xmma|^Cijk_",
     r"flash|fmha|sdpa|attention|conv(?!ert)|fprop|dgrad|wgrad|winograd|^triton_"),
    ("attention", r"flash|fmha|sdpa|attention", r"^triton_"),
    ("conv", r"conv(?!ert)|fprop|dgrad|wgrad|winograd|im2col|[sh]cudnn|cask_cudnn"
             r"|nchwToNhwc|nhwcToNchw", r"^triton_"),
    ("triton", r"^triton_(?:poi|red|per|tem)_|^triton__", None),
    ("scatter_gather", r"scatter|gather|(?<!with_)index|embedding", None),
    ("reduction", r"reduce|softmax|norm(?!al)|bn_fw|bn_bw|moments|gammabeta", None),
    ("elementwise", r"elementwise|multi_tensor_apply", None),
    ("memcpy", r"memcpy|rocclr_copy", None),
    ("memset", r"memset|rocclr_fill", None),
)
CATEGORIES = tuple(c for c, _, _ in RULES) + ("other",)

# Demangled names often open with a return type (`void `, `std::enable_if<...>::type `), which
# would hide a `^` anchor; the rules look at the name with that prefix removed.
_RETURN_TYPE = r"^(?:void|std::enable_if<.*?>::type)\s+"


# Case-insensitive by lowering both sides once (3x faster than re.I on long template names).
_COMPILED_RULES = tuple((c, re.compile(p.lower()), re.compile(u.lower()) if u else None)
                        for c, p, u in RULES)
_RETURN_TYPE_RE = re.compile(_RETURN_TYPE)


def categorize_names(names: Iterable[str]) -> np.ndarray:
    """Category of each distinct name (run it on unique names; `categorize` does rows): the
    first rule whose pattern is found (and whose `unless` is not)."""
    out = []
    for n in names:
        text = _RETURN_TYPE_RE.sub("", str(n), count=1).lower()
        for category, pattern, unless in _COMPILED_RULES:
            if pattern.search(text) and not (unless and unless.search(text)):
                out.append(category)
                break
        else:
            out.append("other")
    return np.array(out, dtype=object)


def categorize(names, cats=None) -> np.ndarray:
    """Category of each row: `names` (a column, categorical or not) and optionally the event
    categories `cats`, where `gpu_memcpy` / `gpu_memset` rows become `memcpy` / `memset`."""
    series = names if isinstance(names, pd.Series) else pd.Series(names)
    if isinstance(series.dtype, pd.CategoricalDtype):
        series = series.cat.remove_unused_categories()
        codes, uniques = series.cat.codes.to_numpy(), series.cat.categories
    else:
        codes, uniques = pd.factorize(series, use_na_sentinel=True)
    table = np.append(categorize_names(uniques), "other")  # code -1 (missing name) -> other
    out = table[codes]
    if cats is not None:
        cats = cats if isinstance(cats, pd.Series) else pd.Series(cats)
        for cat, category in (("gpu_memcpy", "memcpy"), ("gpu_memset", "memset")):
            out[(cats == cat).to_numpy(dtype=bool)] = category
    return out


KERNEL_COLUMNS = ["name", "category", "count", "total_us", "mean_us", "min_us", "max_us", "pct"]
CATEGORY_COLUMNS = ["category", "count", "total_us", "pct"]


def _gpu_with_category(trace: Trace) -> pd.DataFrame:
    """GPU activity with its category; built once per trace (both tables use it)."""
    cached = trace.cache.get("gpu_with_category")
    if cached is None:
        gpu = trace.gpu
        cached = trace.cache["gpu_with_category"] = pd.DataFrame(
            {"name": gpu["name"].cat.remove_unused_categories(),
             "category": categorize(gpu["name"], gpu["cat"]), "dur": gpu["dur"].to_numpy()})
    return cached


def kernel_table(trace: Trace) -> pd.DataFrame:
    """All GPU activity (kernels, memcpys, memsets) grouped by name, most total time first.

    `pct` is the share of all GPU activity time (sum of durations), in percent.
    """
    g = _gpu_with_category(trace)
    if g.empty:
        return pd.DataFrame(columns=KERNEL_COLUMNS)
    cat_codes, cat_names = pd.factorize(g["category"].to_numpy())
    key = g["name"].cat.codes.to_numpy().astype(np.int64) * len(cat_names) + cat_codes
    groups = _groups(key, g["dur"].to_numpy())
    names = g["name"].cat.categories
    out = pd.DataFrame({
        "name": np.array([str(names[k // len(cat_names)]) for k in groups["key"]], dtype=object),
        "category": cat_names[groups["key"] % len(cat_names)].astype(object),
        "count": groups["count"], "total_us": groups["sum"],
        "mean_us": groups["sum"] / groups["count"], "min_us": groups["min"], "max_us": groups["max"]})
    total = g["dur"].sum()
    out["pct"] = 100.0 * out["total_us"] / total if total > 0 else 0.0
    out = out.sort_values(["total_us", "name"], ascending=[False, True], kind="stable")
    return out[KERNEL_COLUMNS].reset_index(drop=True)


def category_table(trace: Trace) -> pd.DataFrame:
    """GPU activity time per category, most total time first; `pct` in percent of all of it."""
    g = _gpu_with_category(trace)
    if g.empty:
        return pd.DataFrame(columns=CATEGORY_COLUMNS)
    codes, cat_names = pd.factorize(g["category"].to_numpy())
    groups = _groups(codes, g["dur"].to_numpy())
    out = pd.DataFrame({"category": cat_names[groups["key"]].astype(object),
                        "count": groups["count"], "total_us": groups["sum"]})
    total = g["dur"].sum()
    out["pct"] = 100.0 * out["total_us"] / total if total > 0 else 0.0
    out = out.sort_values(["total_us", "category"], ascending=[False, True], kind="stable")
    return out[CATEGORY_COLUMNS].reset_index(drop=True)


def _groups(key: np.ndarray, values: np.ndarray) -> dict[str, np.ndarray]:
    """Per distinct key, in order of first appearance: the key, count, exactly rounded sum
    (math.fsum), min and max of values."""
    uniq, inverse = np.unique(key, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    bounds = np.concatenate(([0], np.cumsum(np.bincount(inverse, minlength=len(uniq)))))
    ordered = values[order]
    as_list = ordered.tolist()
    sums = np.array([math.fsum(as_list[a:b]) for a, b in zip(bounds[:-1], bounds[1:])])
    appear = np.argsort(order[bounds[:-1]], kind="stable")  # groups by their first row
    return {"key": uniq[appear], "count": np.diff(bounds)[appear], "sum": sums[appear],
            "min": np.minimum.reduceat(ordered, bounds[:-1])[appear],
            "max": np.maximum.reduceat(ordered, bounds[:-1])[appear]}
