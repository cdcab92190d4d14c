"""The communication kernels of a trace, one row each (`comm_kernels`): which collective each ran
(its kind), what it moved (its message size) and in how large a group, read from the kernel's
args and the host ops around its launch.

A communication kernel is a kernel of category `communication` (gpu/kernels.py `comm_mask`). Its
**kind** is the collective the host called, read from the ops around its launch call: the
`Collective name` of the enclosing `record_param_comms` (or of the kernel itself, newer Kineto),
else the name of the enclosing `c10d::*` op or `nccl:*` annotation (NCCL runs an all_to_all as
SendRecv kernels: the op says all_to_all); failing both, the kernel's own name
(`ncclKernel_AllReduce_*`); else `other`.

**Message size** S (bytes) = max(`In msg nelems`, `Out msg nelems`) x the element size of
`dtype`, from the kernel's args, else from its `record_param_comms` when that op launched this one
communication kernel only (`size_source` `args`). The larger of the two counts is nccl-tests' S
for every kind (all_gather: the gathered output; reduce_scatter: the full input; the others move as
much as they take). Where no args say it (c10d before PyTorch 2.1 records none), S is read off the
shapes (`size_source` `shapes`): the largest tensor operand (`Input Dims` x the element size of its
`Input type`) of the innermost `c10d::*` op and `nccl:*` annotation holding the launch, each when
it holds this one communication kernel only (`c10d::_allgather_base_` records the gathered output,
`nccl:all_to_all` the buffer sent); an all_gather known only by its `nccl:*` input is that shard
times the group size.
**Group size** n: `Group size` from the args (`group_source` `args`); communication.py fills in
the whole job's where the ranks side by side show all of them ran the collective.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ...trace.model import Trace, comm_arg_table
from ...units import ELEMENT_BYTES
from ..gpu.kernels import comm_mask
from ..host.links import gpu_launches
from ..intervals import first_positions, occurs_once, tuple_codes
from ..iterations import iterations
from ..memo import derived
from ..tree import host_tree

# The collective the host called (`Collective name`, a c10d op, an nccl: annotation), in order.
_CALLED = (("reduce_scatter", r"reduce_?scatter"), ("all_gather", r"all_?gather"),
           ("all_reduce", r"all_?reduce"), ("all_to_all", r"all_?to_?all"),
           ("broadcast", r"broadcast"), ("send_recv", r"^(c10d::|nccl:)?_?(send|recv)"))
# NCCL/RCCL kernel names: ncclKernel_<Primitive>_..., ncclDevKernel_<Primitive>_...
_KERNEL = (("reduce_scatter", r"reducescatter"), ("all_gather", r"allgather"),
           ("all_reduce", r"allreduce"), ("all_to_all", r"alltoall"), ("broadcast", r"broadcast"),
           ("send_recv", r"sendrecv|kernel_send|kernel_recv"))
_COLLECTIVE_OP = re.compile(r"^(?:c10d::|nccl:)")
COMM_OP = "record_param_comms"

_CALL_PREFIXES = ("c10d::", "nccl:")


def has_communication(trace: Trace) -> bool:
    return not trace.gpu.empty and bool(comm_mask(trace).any())


def _first_match(texts: pd.Index, rules) -> np.ndarray:
    """For each distinct text, the kind of the first rule that matches it (None: none)."""
    compiled = [(kind, re.compile(p, re.IGNORECASE)) for kind, p in rules]
    return np.array([next((k for k, p in compiled if p.search(str(t))), None) for t in texts],
                    dtype=object)


def _kinds_of(values: pd.Series, rules) -> np.ndarray:
    """_first_match of each value, tested once per distinct value (None where missing)."""
    codes, uniques = pd.factorize(values.astype(object))
    kinds = np.append(_first_match(pd.Index(uniques), rules), None)
    return kinds[codes].astype(object)  # code -1 (missing): the appended None


def comm_kernels(trace: Trace) -> pd.DataFrame:
    """_comm_kernels of the trace, built once per trace (memo.py) (communication and the rank
    tables both read it)."""
    return derived(trace, "comm_kernels", _comm_kernels)


def _comm_kernels(trace: Trace) -> pd.DataFrame:
    """One row per communication kernel: rank, device, ts, end, dur, kind, bytes (S; NaN when
    unknown), size_source (`args`, `shapes`; None), shard_bytes (an all_gather's input when only
    that is known, else NaN), group_size (NaN when unknown), group_source (`args`; None),
    process_group (its `Process Group Name`, None when
    not recorded), launch_ts (its launch call's start; NaN without one) and iteration (N of the
    `ProfilerStep#N` holding that launch call; -1: none), launch_node (the host tree node holding
    the launch call; -1: none)."""
    mask = comm_mask(trace)
    gpu = trace.gpu.iloc[np.flatnonzero(mask)]
    links = gpu_launches(trace).iloc[np.flatnonzero(mask)]
    launched = links["launch_row"].to_numpy() >= 0
    launch_ts = np.where(launched, links["launch_ts"].to_numpy(float), np.nan)
    iteration = np.full(len(links), -1, dtype=np.int64)
    iteration[launched] = iterations(trace, links["rank"].to_numpy()[launched], launch_ts[launched])
    nodes = _launch_nodes(trace, mask)
    args = _kernel_args(trace, mask, nodes)
    called = _called_kind(trace, nodes)
    own = _kinds_of(gpu["name"], _KERNEL)
    from_args = _kinds_of(args["collective"], _CALLED)
    kind = np.where(pd.notna(from_args), from_args, np.where(pd.notna(called), called, own))
    kind = np.where(pd.notna(kind), kind, "other").astype(object)
    size = _element_bytes(args["dtype"]) * np.fmax(args["in_nelems"].to_numpy(),
                                                   args["out_nelems"].to_numpy())
    group = args["group_size"].to_numpy(float)
    op_bytes, note_bytes = _call_bytes(trace, nodes)
    gathered = kind == "all_gather"
    shard = np.where(gathered & np.isnan(op_bytes), note_bytes, np.nan)  # a gather's own input
    from_shapes = np.where(gathered & np.isnan(op_bytes), shard * group, np.fmax(op_bytes, note_bytes))
    source = np.where(~np.isnan(size), "args", np.where(~np.isnan(from_shapes), "shapes", None))
    return pd.DataFrame({"rank": gpu["rank"].to_numpy(), "device": gpu["device"].to_numpy(),
                         "ts": gpu["ts"].to_numpy(), "end": gpu["end"].to_numpy(),
                         "dur": gpu["dur"].to_numpy(), "kind": kind,
                         "bytes": np.where(np.isnan(size), from_shapes, size),
                         "shard_bytes": shard, "size_source": source.astype(object),
                         "group_size": group,
                         "group_source": np.where(np.isnan(group), None, "args").astype(object),
                         "process_group": args["process_group"].to_numpy(dtype=object),
                         "launch_ts": launch_ts, "iteration": iteration, "launch_node": nodes})


def _call_bytes(trace: Trace, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per launch node, the largest tensor operand in bytes of the innermost `c10d::*` op and of
    the innermost `nccl:*` annotation (or op) holding it, each only when it holds this one
    communication kernel; NaN where none is sized."""
    out = (np.full(len(nodes), np.nan), np.full(len(nodes), np.nan))
    if not (nodes >= 0).any():
        return out
    tree = host_tree(trace)
    names = tree.texts
    ev = trace.events
    for i, prefix in enumerate(_CALL_PREFIXES):
        call = tree.climb_to(nodes, np.array([n.startswith(prefix) for n in names], dtype=bool)[tree.name])
        alone = occurs_once(call)
        if not alone.any():
            continue
        rows = ev.index.get_indexer(tree.row[call[alone]])
        out[i][alone] = _operand_bytes(ev["input_types"], ev["input_dims"], rows)
    return out


def _operand_bytes(types: pd.Series, dims: pd.Series, rows: np.ndarray) -> np.ndarray:
    """The largest plain tensor operand (`Input Dims` sizes x its `Input type`'s element size)
    of each row, NaN where none is both shaped and typed; each distinct pair computed once."""
    t, d = types.cat.codes.to_numpy()[rows], dims.cat.codes.to_numpy()[rows]
    codes = tuple_codes(t, d)
    first = first_positions(codes)
    tl, dl = types.cat.categories, dims.cat.categories
    values = np.array([_largest(tl[a] if a >= 0 else "", dl[b] if b >= 0 else "")
                       for a, b in zip(t[first].tolist(), d[first].tolist())], dtype=float)
    return values[codes]


def _largest(types: str, dims: str) -> float:
    best = np.nan
    for t, d in zip(types.split(", "), dims.split(", ")):
        size = ELEMENT_BYTES.get(t)  # `Input type`'s C++ names (units.py)
        if size is None or not d or d == "?":
            continue
        best = np.fmax(best, float(np.prod([int(x) for x in d.split("x")], dtype=float)) * size)
    return float(best)


def _element_bytes(dtype: pd.Series) -> np.ndarray:
    return dtype.map(ELEMENT_BYTES).to_numpy(dtype=float, na_value=np.nan)  # c10 ScalarType names


def _launch_nodes(trace: Trace, mask: np.ndarray) -> np.ndarray:
    """The host tree node holding each communication kernel's launch call (-1: none)."""
    links = gpu_launches(trace).iloc[np.flatnonzero(mask)]
    node = np.full(len(links), -1, dtype=np.int64)
    has = links["launch_row"].to_numpy() >= 0
    tree = host_tree(trace)
    if has.any() and len(tree):
        node[has] = tree.enclosing(*(links[c].to_numpy()[has] for c in
                                     ("rank", "pid", "tid", "launch_ts", "launch_end")))
    return node


def _called_kind(trace: Trace, nodes: np.ndarray) -> np.ndarray:
    """The kind named by the innermost c10d:: op or nccl: annotation around each launch."""
    if not (nodes >= 0).any():
        return np.full(len(nodes), None, dtype=object)
    tree = host_tree(trace)
    names = tree.texts
    is_collective = np.array([bool(_COLLECTIVE_OP.search(n)) for n in names], dtype=bool)[tree.name]
    op = tree.climb_to(nodes, is_collective)
    kinds = _first_match(names, _CALLED)
    return np.where(op >= 0, kinds[tree.name[np.maximum(op, 0)]], None)


def _kernel_args(trace: Trace, mask: np.ndarray, nodes: np.ndarray) -> pd.DataFrame:
    """comm_arg_table columns for each communication kernel: its own args, else those of the
    record_param_comms holding its launch when that op launched no other communication kernel."""
    ev = trace.events
    codes = ev["comm_args"].cat.codes.to_numpy()
    table = comm_arg_table(ev["comm_args"].cat.categories)
    own = codes[ev.index.get_indexer(trace.gpu.index[mask])]
    from_op = _op_arg_codes(trace, nodes)
    pick = np.where(own >= 0, own, from_op)
    out = table.reindex(np.where(pick >= 0, pick, len(table))).reset_index(drop=True)
    return out


def _op_arg_codes(trace: Trace, nodes: np.ndarray) -> np.ndarray:
    """The comm_args code of the record_param_comms holding each launch node, when that op
    launched only this one communication kernel (its size is then this kernel's); -1 otherwise."""
    out = np.full(len(nodes), -1, dtype=np.int64)
    if not (nodes >= 0).any():
        return out
    tree = host_tree(trace)
    is_op = np.array([n == COMM_OP for n in tree.texts], dtype=bool)[tree.name]
    op = tree.climb_to(nodes, is_op)
    alone = occurs_once(op)
    ev = trace.events
    rows = ev.index.get_indexer(tree.row[op[alone]])
    out[alone] = ev["comm_args"].cat.codes.to_numpy()[rows]
    return out
