"""Efficiency against the hardware: FLOPs and bytes of the GEMM, batched GEMM, convolution and
attention ops whose shapes the trace records, the rate their kernels achieved, and where that
sits under the device's roofline (docs/DESIGN.md, "efficiency").

An **efficiency op** is a cpu op named in FORMULAS that no other efficiency op holds (the
outermost of a nest such as `conv2d > convolution > _convolution > cudnn_convolution`, or
`scaled_dot_product_attention > bmm`: the work is counted once, at the level whose arguments
name it). Its kernels are every kernel whose launch call it holds (GPU activity -> launch call
by correlation -> host tree), graph replays excepted; its time is their summed duration. On a
rank without GPU activity its time is its own CPU duration and its device is the CPU.
FLOPs and bytes are computed once per distinct (op, shapes, scalar arguments, types).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...trace.model import Trace
from .hardware import device_name, device_peak
from ..intervals import tuple_codes
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
COMPUTE_CATEGORIES = ("gemm", "conv", "attention")

OP_COLUMNS = ["rank", "device", "op", "dtype", "count", "flops", "bytes", "time_us", "intensity",
              "tflops", "gbps", "peak_tflops", "peak_gbps", "ridge", "bound", "pct_peak", "pct_roof"]
KERNEL_COLUMNS = ["rank", "device", "name", "op", "dtype"] + OP_COLUMNS[4:]
DEVICE_COLUMNS = ["rank", "device", "device_name", "peak_name", "time_source", "source"]


@dataclass
class Efficiency:
    """`ops`: per (rank, device, op, dtype), OP_COLUMNS; `kernels`: per (rank, device, kernel
    name, op, dtype), the compute kernels of efficiency ops, most time first; `devices`: what
    each (rank, device) is and which peak it has (DEVICE_COLUMNS; device -1 is the host CPU);
    `instances`: one row per efficiency op with known FLOPs (rank, device, op, dtype, flops,
    bytes, time_us, torch_flops, row). `unsized`: efficiency ops whose FLOPs are unknown (shapes
    or scalar arguments not recorded), per op name."""

    ops: pd.DataFrame
    kernels: pd.DataFrame
    devices: pd.DataFrame
    instances: pd.DataFrame = field(repr=False)
    unsized: dict[str, int] = field(default_factory=dict)


# -- formulas (one call per distinct op signature) -----------------------------------------------
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


# -- the trace side ------------------------------------------------------------------------------
def efficiency(trace: Trace) -> Efficiency:
    """The efficiency tables of a trace (all empty when it records no efficiency op)."""
    from ..tree import host_tree
    ev = trace.events
    tree = host_tree(trace)
    empty = Efficiency(pd.DataFrame(columns=OP_COLUMNS), pd.DataFrame(columns=KERNEL_COLUMNS),
                       pd.DataFrame(columns=DEVICE_COLUMNS), pd.DataFrame())
    if not len(tree):
        return empty
    is_formula = np.array([str(n) in FORMULAS for n in tree.names] + [False])
    mask = is_formula[tree.name] & tree.is_op
    if not mask.any():
        return empty
    outermost = tree.outermost(mask)
    nodes = np.flatnonzero(mask & (outermost == np.arange(len(mask))))
    rows = ev.index.get_indexer(tree.row[nodes])
    inst = _signatures(trace, nodes, rows)
    if not np.isfinite(inst["flops"].to_numpy(float)).any():  # no shapes recorded: nothing to time
        empty.unsized = {str(k): int(v) for k, v in inst["op"].value_counts().items() if v}
        return empty
    kernels = _op_kernels(trace, outermost)
    inst = _timed(trace, inst, kernels)
    devices = _devices(trace, inst)
    unsized = inst[~np.isfinite(inst["flops"].to_numpy(float))]
    sized = inst[np.isfinite(inst["flops"].to_numpy(float)) & (inst["time_us"] > 0)]
    ops = _rates(_group(sized, ["rank", "device", "op", "dtype"]), devices)
    per_kernel = _kernel_rows(kernels, inst)
    kernel_table = _rates(_group(per_kernel, ["rank", "device", "name", "op", "dtype"]), devices)
    return Efficiency(ops=_nones(ops[OP_COLUMNS]), kernels=_nones(kernel_table[KERNEL_COLUMNS]),
                      devices=_nones(devices[DEVICE_COLUMNS].reset_index(drop=True)),
                      instances=sized.reset_index(drop=True),
                      unsized={str(k): int(v) for k, v in unsized["op"].value_counts().items() if v})


def _signatures(trace: Trace, nodes: np.ndarray, rows: np.ndarray) -> pd.DataFrame:
    """One row per efficiency op: node, rank, op, dtype, flops, bytes, torch_flops, dur (CPU).
    FLOPs and bytes are computed once per distinct (name, dims, concrete inputs, types)."""
    from .precision import op_dtype
    ev = trace.events
    cols = {c: ev[c].cat.codes.to_numpy()[rows] for c in ("name", "input_dims", "concrete_inputs",
                                                             "input_types")}
    codes = tuple_codes(*cols.values())  # one code per distinct row (np.unique(axis=0) sorts rows)
    first = np.full(int(codes.max()) + 1 if len(codes) else 0, len(codes), dtype=np.int64)
    np.minimum.at(first, codes, np.arange(len(codes)))
    uniques = np.stack([c[first] for c in cols.values()], axis=1)
    cats = {c: ev[c].cat.categories for c in cols}
    work, dtypes = [], []
    for name, dims, concrete, types in uniques.tolist():
        dtype = op_dtype(str(cats["input_types"][types])) if types >= 0 else "unknown"
        dtypes.append(dtype)
        if dims < 0:
            work.append((np.nan, np.nan))
            continue
        work.append(op_work(str(cats["name"][name]), str(cats["input_dims"][dims]),
                            None if concrete < 0 else str(cats["concrete_inputs"][concrete]), dtype))
    flops = np.array([w[0] for w in work] + [np.nan])[codes]
    nbytes = np.array([w[1] for w in work] + [np.nan])[codes]
    names = np.asarray(cats["name"], dtype=object)[cols["name"]]
    return pd.DataFrame({"node": nodes, "row": ev.index.to_numpy()[rows],
                         "rank": ev["rank"].to_numpy()[rows], "op": names,
                         "dtype": np.array(dtypes + ["unknown"], dtype=object)[codes],
                         "flops": flops, "bytes": nbytes, "torch_flops": ev["flops"].to_numpy()[rows],
                         "cpu_us": ev["dur"].to_numpy()[rows]})


def _op_kernels(trace: Trace, outermost: np.ndarray) -> pd.DataFrame:
    """The kernels (cat `kernel`) launched inside an efficiency op: gpu position, node (the
    efficiency op), device, dur, name, category, precision dtype. Graph replays are left out."""
    from .kernels import gpu_with_category, launching_ops
    from ..host.links import gpu_launches, graph_launched
    gpu = trace.gpu
    if gpu.empty:
        return pd.DataFrame(columns=["node", "device", "dur", "name", "category", "kernel_dtype"])
    op_node = launching_ops(trace)["op_node"].to_numpy()
    launch = gpu_launches(trace)["launch_row"].to_numpy()
    ok = (op_node >= 0) & (gpu["cat"] == "kernel").to_numpy()
    at = np.flatnonzero(ok)
    ok[at[graph_launched(trace, launch[at])]] = False
    node = np.where(ok, outermost[np.maximum(op_node, 0)], -1)
    pick = np.flatnonzero(node >= 0)
    g = gpu_with_category(trace)
    out = pd.DataFrame({"gpu_row": gpu.index.to_numpy()[pick], "node": node[pick],
                        "device": gpu["device"].to_numpy()[pick], "dur": gpu["dur"].to_numpy()[pick],
                        "name": gpu["name"].astype(object).to_numpy()[pick],
                        "category": g["category"].astype(object).to_numpy()[pick]})
    return out.assign(kernel_dtype=_kernel_dtypes(trace, out["gpu_row"].to_numpy()))


def _kernel_dtypes(trace: Trace, gpu_rows: np.ndarray) -> np.ndarray:
    """precision.kernel_precision's dtype of each GEMM/conv kernel (None for the others)."""
    from .precision import kernel_precision
    table = kernel_precision(trace)
    found = pd.Series(table["dtype"].to_numpy(), index=table["gpu_row"].to_numpy())
    return found.reindex(gpu_rows).to_numpy(dtype=object)


def _timed(trace: Trace, inst: pd.DataFrame, kernels: pd.DataFrame) -> pd.DataFrame:
    """Each op's device and time: its kernels' summed duration on a rank with GPU activity
    (ops that launched none there are dropped), its own CPU duration on a CPU-only rank
    (device -1). A rank that launched kernels or allocated GPU memory with no GPU activity
    recorded (gpu_time.unrecorded_gpu) is not CPU-only: its ops ran on the GPU, their host time
    is dispatch, and they are dropped (no rate). fp32 ops whose GEMM/conv kernels ran TF32 are
    `tf32`."""
    from ..host.syncs import device_ranks
    # GPU activity, CUDA/HIP runtime calls, or GPU memory where GPU activity was not recorded.
    gpu_ranks = device_ranks(trace)
    on_cpu = ~inst["rank"].isin(gpu_ranks).to_numpy()
    flagged = kernels.assign(tf32=(kernels["kernel_dtype"] == "tf32").to_numpy(bool))
    per = flagged.groupby("node").agg(time_us=("dur", "sum"), device=("device", "first"),
                                      kernels=("dur", "size"), tf32=("tf32", "max"))
    out = inst.join(per, on="node")
    out["time_us"] = np.where(on_cpu, out["cpu_us"], out["time_us"])
    out["device"] = np.where(on_cpu, -1, out["device"])
    out = out[on_cpu | out["kernels"].notna().to_numpy()].copy()
    out["device"] = out["device"].astype(np.int64)
    tf32 = out["tf32"].fillna(False).to_numpy(bool) & (out["dtype"] == "fp32").to_numpy()
    out.loc[tf32, "dtype"] = "tf32"
    return out.drop(columns=["tf32", "kernels"]).reset_index(drop=True)


def _kernel_rows(kernels: pd.DataFrame, inst: pd.DataFrame) -> pd.DataFrame:
    """Each compute kernel (category gemm/conv/attention; all of an op's kernels when it
    launched none of those) with its share of its op's FLOPs and bytes, by duration."""
    sized = inst[np.isfinite(inst["flops"].to_numpy(float))].set_index("node")
    k = kernels[kernels["node"].isin(sized.index)].copy()
    if k.empty:
        return pd.DataFrame(columns=["rank", "device", "name", "op", "dtype", "flops", "bytes", "time_us"])
    compute = k["category"].isin(COMPUTE_CATEGORIES).to_numpy()
    has_compute = pd.Series(compute).groupby(k["node"].to_numpy()).transform("any").to_numpy()
    k = k[compute | ~has_compute]
    share = k["dur"] / k.groupby("node")["dur"].transform("sum")
    op = sized.loc[k["node"].to_numpy()]
    return pd.DataFrame({"rank": op["rank"].to_numpy(), "device": k["device"].to_numpy(),
                         "name": k["name"].to_numpy(), "op": op["op"].to_numpy(),
                         "dtype": op["dtype"].to_numpy(),
                         "flops": op["flops"].to_numpy() * share.to_numpy(),
                         "bytes": op["bytes"].to_numpy() * share.to_numpy(), "time_us": k["dur"].to_numpy()})


def _group(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    if frame.empty:
        return pd.DataFrame(columns=keys + ["count", "flops", "bytes", "time_us"])
    out = frame.assign(unsized=frame["bytes"].isna().to_numpy()).groupby(keys, sort=False, dropna=False).agg(
        count=("time_us", "size"), flops=("flops", "sum"), bytes=("bytes", "sum"), time_us=("time_us", "sum"),
        unsized=("unsized", "max")).reset_index()
    out["bytes"] = out["bytes"].where(~out["unsized"].astype(bool))  # bytes of every call, or none
    return out.drop(columns=["unsized"])


def _devices(trace: Trace, inst: pd.DataFrame) -> pd.DataFrame:
    """One row per (rank, device) the ops ran on, with its name and peak (None: unknown)."""
    rows = []
    for rank, device in sorted(set(zip(inst["rank"].tolist(), inst["device"].tolist()))):
        if device < 0:
            rows.append({"rank": rank, "device": device, "device_name": "CPU", "peak": None,
                         "time_source": "cpu_op"})
            continue
        name = device_name(trace.device_properties, rank, device)
        rows.append({"rank": rank, "device": device, "device_name": name, "peak": device_peak(name),
                     "time_source": "kernels"})
    out = pd.DataFrame(rows, columns=["rank", "device", "device_name", "peak", "time_source"])
    out["peak_name"] = [p.name if p else None for p in out["peak"]]
    out["source"] = [p.source if p else None for p in out["peak"]]
    return out


def _nones(frame: pd.DataFrame) -> pd.DataFrame:
    """Text columns with None where a value is missing (pandas' string dtype stores NaN, which
    reads as true and as a float to the reports)."""
    out = frame.copy()
    for c in ("bound", "device_name", "peak_name", "source"):
        if c in out:
            out[c] = pd.Series([v if isinstance(v, str) else None for v in out[c]], index=out.index,
                               dtype=object)
    return out


def _rates(groups: pd.DataFrame, devices: pd.DataFrame) -> pd.DataFrame:
    """Intensity, achieved rates and, where the device's peak for the dtype is known, the roofs:
    pct_peak = achieved / peak FLOP/s, pct_roof = achieved / min(peak, intensity x bandwidth),
    bound = compute when intensity >= ridge else memory."""
    if groups.empty:
        return pd.DataFrame(columns=OP_COLUMNS + ["name"])
    peaks = {(r, d): p for r, d, p in devices[["rank", "device", "peak"]].itertuples(index=False)}
    g = groups.copy()
    flops, nbytes, t = (g[c].to_numpy(float) for c in ("flops", "bytes", "time_us"))
    with np.errstate(divide="ignore", invalid="ignore"):
        g["intensity"] = np.where(nbytes > 0, flops / nbytes, np.nan)
        g["tflops"] = flops / t / 1e6       # FLOPs per us -> TFLOP/s: x 1e6 / 1e12
        g["gbps"] = nbytes / t / 1e3        # bytes per us -> GB/s: x 1e6 / 1e9
    peak = [peaks.get((r, d)) for r, d in zip(g["rank"], g["device"])]
    g["peak_tflops"] = [p.tflops.get(dt, np.nan) if p else np.nan for p, dt in zip(peak, g["dtype"])]
    g["peak_gbps"] = [p.bandwidth_gbps if p else np.nan for p in peak]
    pf, pb = g["peak_tflops"].to_numpy(float), g["peak_gbps"].to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        ridge = pf * 1e12 / (pb * 1e9)
        roof = np.minimum(pf, g["intensity"].to_numpy(float) * pb / 1e3)  # TFLOP/s
        g["ridge"] = ridge
        g["pct_peak"] = 100 * g["tflops"].to_numpy(float) / pf
        g["pct_roof"] = 100 * g["tflops"].to_numpy(float) / roof
    known = np.isfinite(ridge) & np.isfinite(g["intensity"].to_numpy(float))
    g["bound"] = np.where(known, np.where(g["intensity"].to_numpy(float) >= ridge, "compute", "memory"),
                          None)
    return g.sort_values(["time_us"], ascending=False, kind="stable").reset_index(drop=True)
