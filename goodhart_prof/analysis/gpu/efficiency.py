"""Efficiency against the hardware: FLOPs and bytes of the GEMM, batched GEMM, convolution and
attention ops whose shapes the trace records, the rate their kernels achieved, and where that
sits under the device's roofline (docs/DESIGN.md, "efficiency").

An **efficiency op** is a cpu op named in FORMULAS that no other efficiency op holds (the
outermost of a nest such as `conv2d > convolution > _convolution > cudnn_convolution`, or
`scaled_dot_product_attention > bmm`: the work is counted once, at the level whose arguments
name it). Its kernels are every kernel whose launch call it holds (GPU activity -> launch call
by correlation -> host tree), graph replays excepted; its time is their summed duration. On a
rank without GPU activity its time is its own CPU duration and its device is the CPU.
FLOPs and bytes are computed once per distinct (op, shapes, scalar arguments, types), by
op_work.py's formulas.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...trace.model import Trace
from .hardware import device_name, device_peak
from .op_work import FORMULAS, op_work
from ..intervals import tuple_codes

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


ACROSS_COLUMNS = ["op", "dtype", "model", "devices", "count", "flops", "bytes", "time_us", "intensity",
                  "tflops", "tflops_low", "tflops_high", "gbps", "pct_peak", "pct_roof", "bound"]


def across_devices(eff: Efficiency) -> pd.DataFrame:
    """The ops per (op, dtype, device model) summed over the devices of that model (a many-rank
    run repeats one row per rank): counts, FLOPs, bytes and time added, rates and roofs of the
    sums, and the spread of the devices' own TFLOP/s (`tflops_low`, `tflops_high`). Empty where
    the ops ran on one device or none."""
    ops = eff.ops
    if ops.empty or len(set(zip(ops["rank"].tolist(), ops["device"].tolist()))) < 2:
        return pd.DataFrame(columns=ACROSS_COLUMNS)
    named = {(r, d): (p or n or "unnamed device") for r, d, n, p in
             eff.devices[["rank", "device", "device_name", "peak_name"]].itertuples(index=False)}
    rows = ops.assign(model=[named.get((r, d), "unnamed device") for r, d in zip(ops["rank"], ops["device"])],
                      no_bytes=ops["bytes"].isna())
    g = rows.groupby(["op", "dtype", "model"], sort=False, observed=True).agg(
        rank=("rank", "first"), device=("device", "first"), devices=("rank", "size"), count=("count", "sum"),
        flops=("flops", "sum"), bytes=("bytes", "sum"), no_bytes=("no_bytes", "any"), time_us=("time_us", "sum"),
        tflops_low=("tflops", "min"), tflops_high=("tflops", "max")).reset_index()
    g["bytes"] = g["bytes"].where(~g["no_bytes"])  # bytes of every device's calls, or none
    devices = eff.devices.assign(peak=[device_peak(n) if d >= 0 else None
                                       for d, n in zip(eff.devices["device"], eff.devices["device_name"])])
    return _nones(_rates(g.drop(columns=["no_bytes"]), devices)[ACROSS_COLUMNS])


def device_kinds(devices: pd.DataFrame) -> list[tuple[object, list[tuple[int, int]]]]:
    """The devices grouped by kind: the CPU, else (name, peak, its source); per kind its first row
    and every (rank, device) of it, in order (eight ranks of one GPU model are one kind)."""
    kinds: dict[tuple, list] = {}
    for d in devices.itertuples():
        key = ("cpu",) if d.device < 0 else (d.device_name, d.peak_name, d.source)
        kinds.setdefault(key, []).append(d)
    return [(ds[0], [(d.rank, d.device) for d in ds]) for ds in kinds.values()]
