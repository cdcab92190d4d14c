"""The loaded trace: one columnar table of complete events plus what we know about the ranks.

`Trace.events` has one row per complete (`ph: X`) event, sorted by (rank, ts):

| column | dtype | meaning |
| --- | --- | --- |
| rank | int32 | rank the event belongs to |
| pid, tid | int64 | process / thread (string ids are mapped to stable negative ints) |
| ts, dur, end | float64 | start, duration, end in microseconds (trace clock) |
| name | category | event name (interned) |
| cat | category | category, normalised to current Kineto spelling (`Kernel` -> `kernel`, ...) |
| device | int64 | GPU index for GPU activity (args.device, else pid; full width: 2^32 stays 2^32, a negative id or one beyond int64 makes the event malformed, skipped and counted); -1 otherwise |
| stream | int64 | GPU stream for GPU activity (as `device`: full width, negative or beyond int64 malformed); -1 otherwise |
| correlation | int64 | launch <-> GPU activity link; -1 when absent |
| external_id | int64 | op <-> launch link (`External id`); -1 when absent |
| bytes | float64 | bytes moved by a memcpy/memset; NaN when absent |
| input_types | category | a cpu op's or `nccl:*` annotation's `Input type` (record_shapes): the list joined by `, ` (`c10::BFloat16, c10::BFloat16, , Scalar`; a non-string entry is blank); NaN when absent, not a list or string, or on another row |
| comm_args | category | what a collective moves, on `record_param_comms` cpu ops and NCCL/RCCL kernels that record it: `Collective name`, `In msg nelems`, `Out msg nelems`, `Group size`, `dtype`, `Process Group Name` joined by `|` (`allreduce|2873320|2873320|8|BFloat16|0`; an absent or unusable value is blank; `comm_arg_table` splits them); NaN elsewhere |
| input_dims | category | the `Input Dims` (record_shapes) of a cpu op, or of an `nccl:*` annotation (a collective's buffers: analysis/ranks/communication.py): each input's sizes joined by `x`, inputs joined by `, ` (`141x512, 512x512, , `: blank for a scalar or 0-d tensor, `?` for a tensor list or an odd entry); NaN when absent or not a list, and on every other row |
| concrete_inputs | category | the `Concrete Inputs` of a cpu op named in SHAPED_OPS (newer torch: the scalar arguments as text) joined by `|` (`, , , [2, 2], [1, 1], [1, 1], False, [0, 0], 1` becomes `|||[2, 2]|[1, 1]|[1, 1]|False|[0, 0]|1`; a non-string entry is blank); NaN when absent and on every other row |
| flops | float64 | a cpu op's `flops` (the profiler's own estimate, `with_flops=True`); NaN when absent |
| wait_on_stream | int32 | on a `cuda_sync` event that waits on a CUDA event (`Stream Wait Event`, `Event Sync`): the stream the event was recorded on (Kineto's `wait_on_stream`, which it writes as an int32); -1 when absent, negative or beyond int32, and on every other row |
| wait_on_correlation | int32 | on such a `cuda_sync` event: the correlation id of the `cudaEventRecord` call that recorded the event (Kineto's `wait_on_cuda_event_record_corr_id`, an int32 too); -1 as `wait_on_stream` |

Python stack frames (`python_function` events of `with_stack` traces) are usually most of a
trace's events but matter only around sync points, so they live apart in `Trace.frames`: plain
numpy columns, names as Python strings (not interned: that would hash a million names for the
few that become sync sites), and without torch's own frames (NEVER_USER_FRAMES) except those
of the packages in KEPT_TORCH_FRAMES.

`Trace.memory` has one row per `[memory]` instant (`ph: i`, written with profile_memory=True:
one per allocation and one per free by torch's allocators), sorted by (rank, ts), document order
on ties (MEMORY_COLUMNS):

| column | dtype | meaning |
| --- | --- | --- |
| rank | int32 | rank the event belongs to |
| pid, tid | int64 | the thread that allocated or freed (as in `events`) |
| ts | float64 | when, in microseconds (trace clock) |
| device_type | int32 | c10 DeviceType: 0 CPU (the host), 1 CUDA, 6 HIP; -1 when absent |
| device | int64 | `Device Id`: the GPU index (full width); -1 for the host |
| bytes | float64 | `Bytes`: > 0 an allocation of that size, < 0 a free; NaN when absent |
| total_allocated | float64 | `Total Allocated` after the event: bytes in live tensors on the device; NaN when absent (2021-era traces) |
| total_reserved | float64 | `Total Reserved` after the event: bytes the caching allocator holds from the driver (live and cached); 0 on the host, which has no caching allocator; NaN when absent |
| addr | int64 | `Addr` of the block; -1 when absent |
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

GPU_ACTIVITY_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
GPU_TID_BASE = 1_000_000_000


def merged_gpu_tid(device: int, stream: int) -> int:
    """The thread id a GPU stream gets in a merged trace (merged_trace.json: docs/DESIGN.md), where
    every rank is one process and its GPU streams become threads of it."""
    return GPU_TID_BASE + device * 1000 + stream

# 2021-era Kineto spelled categories differently; analyses only ever see the current names.
CATEGORY_ALIASES = {
    "Kernel": "kernel",
    "Memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
    "Runtime": "cuda_runtime",
    "Operator": "cpu_op",
    "Python": "python_function",
    "User annotation": "user_annotation",
    "user annotation": "user_annotation",
    "GPU user annotation": "gpu_user_annotation",
}


# Frames that can never be user code. Sync sites only ever name user-code frames (walking out
# from the innermost frame by time), so these are dropped at load: in real traces they are ~80%
# of all frames (torch's own Python and the built-in calls it makes).
NEVER_USER_FRAMES = ("torch/", "<built-in ")
# Torch's own frames kept all the same: packages whose Python code reads tensors back on the
# user's behalf (torch.distributions' argument validation: `if not valid.all():`; torch.nn.utils'
# clip_grad_norm_(error_if_nonfinite=True): `if torch.logical_or(norm.isnan(), norm.isinf()):`),
# so that a read made inside them is put on torch's function and the user's line that called it
# (analysis/host/sites.py). Not torch/utils/: on the real traces (TraceLens) nearly all its frames
# around reads are `_device.py` __torch_function__, which only passes the user's own ops through
# `with torch.device(...)`; the rest is one DataLoader seed `.item()` per iterator. torch/profiler/:
# the profiler synchronizes the device itself when a window starts or stops (`prof.step()`,
# `stop()`: TraceLens's traces show the two `cudaDeviceSynchronize` calls in the user's
# `run_torch_profiler`), which is the profiler's cost, not a sync the user's code makes.
KEPT_TORCH_FRAMES = ("torch/distributions/", "torch/nn/utils/", "torch/profiler/")

MEMORY_COLUMNS = ("rank", "pid", "tid", "ts", "device_type", "device", "bytes", "total_allocated",
                  "total_reserved", "addr")


def empty_memory() -> pd.DataFrame:
    """A memory table with no rows (MEMORY_COLUMNS, their dtypes)."""
    dtypes = {"rank": np.int32, "pid": np.int64, "tid": np.int64, "ts": np.float64,
              "device_type": np.int32, "device": np.int64, "bytes": np.float64,
              "total_allocated": np.float64, "total_reserved": np.float64, "addr": np.int64}
    return pd.DataFrame({c: np.empty(0, dtype=dtypes[c]) for c in MEMORY_COLUMNS})


FRAME_COLUMNS = ("rank", "pid", "tid", "ts", "dur", "end", "name", "python_id", "python_parent_id")


@dataclass
class Frames:
    """Python frames, one array per column (FRAME_COLUMNS), sorted by (rank, ts)."""

    columns: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.columns["ts"])

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def take(self, index: np.ndarray) -> "Frames":
        return Frames({k: v[index] for k, v in self.columns.items()})

    @classmethod
    def empty(cls) -> "Frames":
        dtypes = {"ts": np.float64, "dur": np.float64, "end": np.float64, "name": object,
                  "rank": np.int32}
        return cls({c: np.empty(0, dtype=dtypes.get(c, np.int64)) for c in FRAME_COLUMNS})

    @classmethod
    def concat(cls, parts: list["Frames"], sort: bool = True) -> "Frames":
        parts = [p for p in parts if len(p)] or [cls.empty()]
        cols = {c: np.concatenate([p.columns[c] for p in parts]) for c in FRAME_COLUMNS}
        out = cls(cols)
        if sort and len(out) and not is_sorted(cols["rank"], cols["ts"]):
            out = out.take(np.lexsort((cols["ts"], cols["rank"])))
        return out


COMM_ARG_FIELDS = ("collective", "in_nelems", "out_nelems", "group_size", "dtype", "process_group")
COMM_TEXT_FIELDS = ("collective", "dtype", "process_group")
# The cpu ops whose `Concrete Inputs` the loader keeps (the `concrete_inputs` column): the GEMM,
# convolution and attention ops analysis/gpu/efficiency.py computes FLOPs for. Other ops' scalars are
# skipped at load. `Input Dims` are kept for every cpu op (rules/hostthreads.py judges ops on tiny
# inputs): each distinct value is decoded once, ~0.5 us per op (13 ms for the 24k ops of the
# OWLv2 trace).
SHAPED_OPS = frozenset((
    "aten::mm", "aten::addmm", "aten::_addmm_activation", "aten::bmm", "aten::baddbmm",
    "aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::convolution", "aten::_convolution",
    "aten::conv_transpose1d", "aten::conv_transpose2d", "aten::conv_transpose3d",
    "aten::convolution_backward", "aten::scaled_dot_product_attention",
    "aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_cudnn_attention",
    "aten::_flash_attention_forward", "aten::_efficient_attention_forward"))


def comm_arg_table(labels: pd.Index) -> pd.DataFrame:
    """The `comm_args` categories split into columns (one row per label, in label order):
    `collective`, `dtype` and `process_group` (str, None when blank), `in_nelems`, `out_nelems`, `group_size`
    (float, NaN when blank)."""
    parts = [str(label).split("|") for label in labels]
    parts = [p if len(p) == len(COMM_ARG_FIELDS) else [""] * len(COMM_ARG_FIELDS) for p in parts]
    cols = list(zip(*parts)) if parts else [()] * len(COMM_ARG_FIELDS)
    out = {}
    for field_name, values in zip(COMM_ARG_FIELDS, cols):
        if field_name in COMM_TEXT_FIELDS:
            out[field_name] = pd.Series([v or None for v in values], dtype=object)
        else:
            out[field_name] = pd.Series([float(v) if v else np.nan for v in values], dtype=float)
    return pd.DataFrame(out)


def in_categories(column: pd.Series, values) -> np.ndarray:
    """Rows of a categorical column whose value is one of `values`, as a boolean mask: the few
    categories are tested, the rows are then picked by code (cheaper than Series.isin)."""
    wanted = column.cat.categories.isin(list(values))
    codes = column.cat.codes.to_numpy()
    picked = np.flatnonzero(wanted)
    if len(picked) <= 4:  # a few codes: one comparison each (cheaper than any lookup per row)
        out = np.zeros(len(codes), dtype=bool)
        for code in picked.tolist():
            out |= codes == code
        return out
    return np.append(wanted, False)[codes]  # code -1 (a missing value): False


def name_codes(events: pd.DataFrame, pattern: "re.Pattern[str]", search: bool = False) -> np.ndarray:
    """Codes of the distinct `name`s that `pattern` matches (re.match; re.search with `search`):
    each distinct name is tested once, rows are then picked by code."""
    test = pattern.search if search else pattern.match
    return np.array([i for i, n in enumerate(events["name"].cat.categories) if test(str(n))],
                    dtype=np.int64)


def rows_named(events: pd.DataFrame, pattern: "re.Pattern[str]", cats: tuple[str, ...] | None = None,
               search: bool = False) -> np.ndarray:
    """Positions of the rows whose name matches `pattern` (and whose cat is one of `cats`)."""
    codes = name_codes(events, pattern, search)
    if not len(codes):
        return np.empty(0, dtype=np.int64)
    at = np.flatnonzero(np.isin(events["name"].cat.codes.to_numpy(), codes))
    if cats is not None and len(at):
        at = at[events["cat"].iloc[at].isin(cats).to_numpy()]
    return at


def is_sorted(rank: np.ndarray, ts: np.ndarray) -> bool:
    """Whether rows are already in (rank, ts) order (Kineto writes most of them that way)."""
    if len(ts) < 2:
        return True
    dr = np.diff(rank)
    return bool((dr >= 0).all() and ((dr > 0) | (np.diff(ts) >= 0)).all())


@dataclass(frozen=True)
class LoadCost:
    """What loading took: wall time, and the peak RSS of the process and its worker processes
    (the larger of the two, bytes) when the load ended."""

    seconds: float
    peak_rss_bytes: int


@dataclass
class Trace:
    events: pd.DataFrame
    paths: list[Path]
    ranks: list[int]
    rank_source: str
    device_properties: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    skipped_events: int = 0
    warnings: list[str] = field(default_factory=list)
    frames: Frames = field(default_factory=Frames.empty)
    memory: pd.DataFrame = field(default_factory=empty_memory)
    # The job's number of ranks (distributedInfo.world_size, when every file that states one
    # agrees; None otherwise): it may exceed the ranks loaded.
    world_size: int | None = None
    # Each path's rank as the loader assigned it (None: by pid, from its `rank <r>` process
    # names); empty when not known (a Trace built by hand). The exporters read it.
    file_ranks: list = field(default_factory=list)
    load_cost: LoadCost | None = field(default=None, compare=False)  # set by trace.load.load
    # The iteration after a lite window, recorded with Python stacks (capture/hooks.py writes it to
    # attribution/ beside the trace; trace/attribution.py loads it): where the sites of this
    # trace's events come from when it has no stacks of its own. None: none was recorded.
    attribution: "Trace | None" = field(default=None, compare=False)
    # CUPTI range-profiler counters (trace/profiler_counters.py): rank, ts (of the range), counter,
    # value; None where the trace holds no `cuda_profiler_range` event
    counters: "pd.DataFrame | None" = field(default=None, compare=False)

    @cached_property
    def gpu(self) -> pd.DataFrame:
        """GPU activity: kernels, memcpys and memsets, a view of the loaded events (selected on
        first use; the events are not changed after loading)."""
        rows = np.flatnonzero(in_categories(self.events["cat"], GPU_ACTIVITY_CATS))
        return self.events.iloc[rows]

    @property
    def devices(self) -> list[tuple[int, int]]:
        """(rank, device) pairs that ran GPU activity."""
        gpu = self.gpu
        if gpu.empty:
            return []
        pairs = gpu[["rank", "device"]].drop_duplicates().sort_values(["rank", "device"])
        return [tuple(map(int, row)) for row in pairs.to_numpy()]

    def select(self, rank: int | None = None, device: int | None = None) -> "Trace":
        """The same trace narrowed to one rank and/or one device (CPU events stay with their rank)."""
        mask = np.ones(len(self.events), dtype=bool)
        if rank is not None:
            mask &= (self.events["rank"] == rank).to_numpy()
        if device is not None:
            is_gpu = in_categories(self.events["cat"], GPU_ACTIVITY_CATS)
            mask &= ~is_gpu | (self.events["device"] == device).to_numpy()
        events = self.events[mask].reset_index(drop=True)
        ranks = [r for r in self.ranks if rank is None or r == rank]
        frames = self.frames if rank is None else self.frames.take(np.flatnonzero(self.frames["rank"] == rank))
        memory = self.memory
        if rank is not None:
            memory = memory[(memory["rank"] == rank).to_numpy()].reset_index(drop=True)
        if device is not None:  # the host's memory stays with its rank, like its CPU events
            memory = memory[((memory["device"] == device) | (memory["device_type"] == 0)).to_numpy()
                            ].reset_index(drop=True)
        attribution = self.attribution.select(rank) if self.attribution is not None else None
        counters = self.counters
        if counters is not None and rank is not None:
            counters = counters[(counters["rank"] == rank).to_numpy()].reset_index(drop=True)
        return Trace(events, self.paths, ranks, self.rank_source, self.device_properties,
                     self.skipped_events, self.warnings, frames, memory, self.world_size,
                     self.file_ranks, attribution=attribution, counters=counters)
