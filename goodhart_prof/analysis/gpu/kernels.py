"""Kernel taxonomy (what each GPU activity computes, and which library it comes from) and the
per-kernel / per-category / per-library time tables.

Two columns per GPU activity, DESIGN.md "kernel categories":
- `category`: what it computes (CATEGORIES).
- `library`: where it comes from (LIBRARIES).

Precedence, for the category of one activity:
1. `gpu_memcpy` / `gpu_memset` events are `memcpy` / `memset` whatever their name.
2. The name, by the first rule in CATEGORY_RULES (kernel_rules.py, as are all the rules) whose
   pattern matches (on the demangled name with its return type removed, camelCase humps split
   by `_`, lowered: `tensorTransformGeneric` is `tensor_transform_generic`, so `(?<![a-z])`
   marks where a word starts).
3. The launching op (GPU activity -> launch call by correlation -> the innermost cpu op holding it)
   overrides the name only where the name is generic and the op says more (OP_OVERRIDES): a name
   that says nothing (`other`) takes the op's category; a GEMM-shaped kernel launched by a
   convolution or attention op is what that op computes (MIOpen/CK convolutions are GEMMs); a
   TensorIterator elementwise/reduction kernel launched by a normalization op is `norm`, and one
   launched by `aten::cat`/`pad` a layout `copy`. Names that say what they compute
   (`flash_fwd`, `nccl*`, `softmax`, `topk`, ...) are never overridden: the innermost op can be
   a wrapper (`aten::linear`) or a fallback path and is weaker evidence than the kernel's name.
   Where the trace has no link (CUDA graph replays, GPU-only traces) the name decides alone.
The library comes from the name (LIBRARY_RULES); a name no rule places that a PyTorch `aten::` op
launched is `aten` (PyTorch's own kernels outside `at::native`, such as `softmax_warp_forward`), on
all its rows: a kernel has one library, whether or not the trace links each launch to an op (the
kernels still running when tracing began were launched before it, so nothing links them).
Rules are applied once per distinct name and once per distinct op name; rows combine the two
through their codes and one lookup table.
"""
from __future__ import annotations

import functools
import math
import re

from typing import Iterable

import numpy as np
import pandas as pd

from ...trace.model import Trace
from .kernel_rules import (CATEGORIES, CATEGORY_RULES, LAYOUT_TRANSPOSE, LIBRARIES, LIBRARY_RULES,
                           OP_OVERRIDES, OP_RULES)
from ..intervals import sorted_rows
from ..memo import derived

# Demangled names often open with a return type (`void `, `std::enable_if<...>::type `), which
# would hide a `^` anchor; the rules look at the name with that prefix removed.
_RETURN_TYPE = r"^(?:void|std::enable_if<.*?>::type)\s+"

# Case-insensitive by lowering both sides once (3x faster than re.I on long template names).
_CATEGORY_RES = tuple((c, re.compile(p.lower()), re.compile(u.lower()) if u else None)
                      for c, p, u in CATEGORY_RULES)
_LIBRARY_RES = tuple((lib, re.compile(p)) for lib, p in LIBRARY_RULES)
_OP_RES = tuple((c, re.compile(p)) for c, p in OP_RULES)
_RETURN_TYPE_RE = re.compile(_RETURN_TYPE)
_HUMP_RE = re.compile(r"(?<=[a-z])(?=[A-Z])")  # a camelCase hump: lower then upper case
_LAYOUT_TRANSPOSE_RE = re.compile(LAYOUT_TRANSPOSE)
_CAT_INDEX = {c: i for i, c in enumerate(CATEGORIES)}
_LIB_INDEX = {lib: i for i, lib in enumerate(LIBRARIES)}
_NO_OP = len(CATEGORIES)  # op code: no op, or an op that says nothing
# _COMBINE[name category, op category] -> category of the row.
_COMBINE = np.array([[_CAT_INDEX[o] if o in OP_OVERRIDES.get(n, ()) else i
                      for o in CATEGORIES] + [i] for i, n in enumerate(CATEGORIES)], dtype=np.int64)


def _first(text: str, rules) -> str | None:
    for value, pattern, *unless in rules:
        if pattern.search(text) and not (unless and unless[0] and unless[0].search(text)):
            return value
    return None


def classify_names(names: Iterable[str]) -> tuple[np.ndarray, np.ndarray]:
    """Category and library of each distinct name, by name alone (run it on unique names)."""
    pairs = [_classify_name(str(n)) for n in names]
    return (np.array([c for c, _ in pairs], dtype=object), np.array([lib for _, lib in pairs], dtype=object))


@functools.lru_cache(maxsize=1 << 16)
def _classify_name(name: str) -> tuple[str, str]:
    """One name's (category, library): a pure function of the name, so remembered for the next
    trace in this process (the ranks of a job, both sides of a diff share most kernel names)."""
    text = _RETURN_TYPE_RE.sub("", name, count=1).lower()
    return _first(_words(name), _CATEGORY_RES) or "other", _first(text, _LIBRARY_RES) or "other"


def _words(name: str) -> str:
    """The name as the category rules read it: return type removed, camelCase humps split by
    `_`, lowered (`void tensorTransformGeneric<...>` -> `tensor_transform_generic<...>`)."""
    start = _RETURN_TYPE_RE.match(name.lower())
    return _HUMP_RE.sub("_", name[start.end():] if start else name).lower()


@functools.lru_cache(maxsize=1 << 16)
def _is_layout_transpose(name: str) -> bool:
    return bool(_LAYOUT_TRANSPOSE_RE.search(_words(name)))


def layout_transposes(names: Iterable[str]) -> np.ndarray:
    """Whether each name is a convolution library's layout transpose (LAYOUT_TRANSPOSE)."""
    return np.array([_is_layout_transpose(str(n)) for n in names], dtype=bool)


def op_categories(ops: Iterable[str]) -> list[str | None]:
    """The category each op name says (OP_RULES; None: the op says nothing)."""
    return [_op_category(str(o).lower()) for o in ops]


@functools.lru_cache(maxsize=1 << 16)
def _op_category(op: str) -> str | None:
    """The category an op's name says (OP rules), remembered like _classify_name."""
    return _first(op.lower(), _OP_RES)


def categorize_names(names: Iterable[str]) -> np.ndarray:
    """Category of each distinct name, by name alone."""
    return classify_names(names)[0]


def _codes(values) -> tuple[np.ndarray, pd.Index]:
    series = values if isinstance(values, pd.Series) else pd.Series(values, dtype=object)
    if isinstance(series.dtype, pd.CategoricalDtype):  # the categories used, in their order
        codes, cats = series.cat.codes.to_numpy().astype(np.int64), series.cat.categories
        used = np.flatnonzero(np.bincount(codes[codes >= 0], minlength=len(cats)))
        remap = np.full(len(cats) + 1, -1, dtype=np.int64)  # [-1]: a missing value stays -1
        remap[used] = np.arange(len(used))
        return remap[codes], cats[used]
    codes, uniques = pd.factorize(series, use_na_sentinel=True)
    return codes, pd.Index(uniques)


def classify(names, cats=None, ops=None) -> tuple[np.ndarray, np.ndarray]:
    """Category and library of each row (module docstring): `names` a column (categorical or
    not); `cats` the event categories (`gpu_memcpy`/`gpu_memset` rows become memcpy/memset);
    `ops` the launching op's name per row (missing where the trace does not link one)."""
    cat, lib = classify_codes(names, cats, ops)
    return (np.array(CATEGORIES, dtype=object)[cat], np.array(LIBRARIES, dtype=object)[lib])


def classify_codes(names, cats=None, ops=None) -> tuple[np.ndarray, np.ndarray]:
    """`classify` as positions in CATEGORIES and LIBRARIES (no strings per row)."""
    codes, uniques = _codes(names)
    name_cat, name_lib = classify_names(uniques)
    cat_idx = np.array([_CAT_INDEX[c] for c in name_cat] + [_CAT_INDEX["other"]], dtype=np.int64)
    lib_idx = np.array([_LIB_INDEX[x] for x in name_lib] + [_LIB_INDEX["other"]], dtype=np.int64)
    cat, lib = cat_idx[codes], lib_idx[codes]  # code -1 (missing name) -> other
    if ops is not None and len(cat):
        op_codes, op_names = _codes(ops)
        op_text = [str(o).lower() for o in op_names]
        op_cat = np.array([_CAT_INDEX[c] if (c := _op_category(t)) else _NO_OP
                           for t in op_text] + [_NO_OP], dtype=np.int64)
        aten = np.array([t.startswith("aten::") for t in op_text] + [False])
        cat = _COMBINE[cat, op_cat[op_codes]]
        # a name no library rule places is aten on all its rows once an aten:: op launched one
        by_aten = np.zeros(len(uniques) + 1, dtype=bool)
        by_aten[codes[aten[op_codes] & (lib == _LIB_INDEX["other"])]] = True
        by_aten[-1] = False  # code -1: no name
        lib = np.where((lib == _LIB_INDEX["other"]) & by_aten[codes], _LIB_INDEX["aten"], lib)
    if cats is not None:
        event_codes, event_cats = _codes(cats)
        for event_cat, category in (("gpu_memcpy", "memcpy"), ("gpu_memset", "memset")):
            if event_cat in event_cats:
                rows = event_codes == event_cats.get_loc(event_cat)
                cat[rows], lib[rows] = _CAT_INDEX[category], _LIB_INDEX["runtime"]
    return cat, lib


def categorize(names, cats=None, ops=None) -> np.ndarray:
    """Category of each row (`classify`)."""
    return classify(names, cats, ops)[0]


def launching_ops(trace: Trace) -> pd.DataFrame:
    """Per GPU activity (trace.gpu's row order): `op`, the innermost cpu op holding its launch
    call, and `top_op`, the outermost (categoricals; missing where the trace links none), and
    `op_node`, that innermost op's node in the host call tree (-1: none). Built once per trace."""
    return derived(trace, "launching_ops", _launching_ops)


def _launching_ops(trace: Trace) -> pd.DataFrame:
    from ..host.links import gpu_launches
    from ..tree import host_tree
    links = gpu_launches(trace)
    op_node = np.full(len(links), -1, dtype=np.int64)
    op, top = op_node.copy(), op_node.copy()
    has = links["launch_row"].to_numpy() >= 0
    names = trace.events["name"].cat.categories
    if has.any():
        tree = host_tree(trace)
        if len(tree):
            node = tree.enclosing(*(links[c].to_numpy()[has] for c in
                                    ("rank", "pid", "tid", "launch_ts", "launch_end")))
            op_node[has] = tree.climb_to(node, tree.is_op)
            op = np.where(op_node >= 0, tree.name[np.maximum(op_node, 0)], -1)
            outer = np.where(node >= 0, tree.top_op[np.maximum(node, 0)], -1)
            top[has] = np.where(outer >= 0, tree.name[np.maximum(outer, 0)], -1)
            names = tree.names
    return pd.DataFrame({"op": pd.Categorical.from_codes(op, categories=names),
                         "top_op": pd.Categorical.from_codes(top, categories=names),
                         "op_node": op_node})


KERNEL_COLUMNS = ["name", "category", "library", "count", "total_us", "mean_us", "min_us",
                  "max_us", "pct"]
CATEGORY_COLUMNS = ["category", "library", "count", "total_us", "pct"]
LIBRARY_COLUMNS = ["library", "count", "total_us", "pct"]


def gpu_with_category(trace: Trace) -> pd.DataFrame:
    """GPU activity (trace.gpu's rows) with `category`, `library` and launching `op`/`top_op`;
    built once per trace (the tables and the dominance rule use it)."""
    return derived(trace, "gpu_with_category", _gpu_with_category)


def _gpu_with_category(trace: Trace) -> pd.DataFrame:
    gpu = trace.gpu
    ops = launching_ops(trace) if not gpu.empty else pd.DataFrame(
        {"op": pd.Categorical([]), "top_op": pd.Categorical([])})
    category, library = classify_codes(gpu["name"], gpu["cat"], ops["op"])
    return pd.DataFrame(
        {"name": gpu["name"].cat.remove_unused_categories(),
         # categoricals over the fixed lists: the tables group by their codes
         "category": pd.Categorical.from_codes(category, categories=CATEGORIES),
         "library": pd.Categorical.from_codes(library, categories=LIBRARIES),
         "dur": gpu["dur"].to_numpy(),
         # launching ops as categoricals over the tree's names (a code per row, no strings)
         "op": ops["op"].array, "top_op": ops["top_op"].array}, index=gpu.index)


def comm_mask(trace: Trace) -> np.ndarray:
    """Which rows of trace.gpu are communication kernels (kernels of category `communication`)."""
    gpu = gpu_with_category(trace)
    return (gpu["category"] == "communication").to_numpy() & (trace.gpu["cat"] == "kernel").to_numpy()


def kernel_table(trace: Trace) -> pd.DataFrame:
    """All GPU activity (kernels, memcpys, memsets) grouped by name (and category and library,
    which launching ops can split), most total time first.

    `pct` is the share of all GPU activity time (sum of durations), in percent.
    """
    g = gpu_with_category(trace)
    if g.empty:
        return pd.DataFrame(columns=KERNEL_COLUMNS)
    cat_codes, cat_names = g["category"].cat.codes.to_numpy(np.int64), np.array(CATEGORIES, dtype=object)
    lib_codes, lib_names = g["library"].cat.codes.to_numpy(np.int64), np.array(LIBRARIES, dtype=object)
    n_cat, n_lib = len(cat_names), len(lib_names)
    key = (g["name"].cat.codes.to_numpy().astype(np.int64) * n_cat + cat_codes) * n_lib + lib_codes
    groups = _groups(key, g["dur"].to_numpy())
    names = g["name"].cat.categories
    k = groups["key"]
    total = g["dur"].sum()
    out = pd.DataFrame({
        "name": np.array([str(names[i]) for i in k // (n_cat * n_lib)], dtype=object),
        "category": cat_names[(k // n_lib) % n_cat].astype(object),
        "library": lib_names[k % n_lib].astype(object),
        "count": groups["count"], "total_us": groups["sum"],
        "mean_us": groups["sum"] / groups["count"], "min_us": groups["min"], "max_us": groups["max"],
        "pct": 100.0 * groups["sum"] / total if total > 0 else np.zeros(len(k))})
    return sorted_rows(out, ["total_us", "name"], [False, True])[KERNEL_COLUMNS]


def _by(trace: Trace, column: str, columns: list[str]) -> pd.DataFrame:
    g = gpu_with_category(trace)
    if g.empty:
        return pd.DataFrame(columns=columns)
    codes = g[column].cat.codes.to_numpy(np.int64)
    values = np.asarray(g[column].cat.categories, dtype=object)
    dur = g["dur"].to_numpy()
    groups = _groups(codes, dur)
    total = g["dur"].sum()
    out = {column: values[groups["key"]], "count": groups["count"], "total_us": groups["sum"],
           "pct": 100.0 * groups["sum"] / total if total > 0 else np.zeros(len(groups["key"]))}
    if "library" in columns and column != "library":  # the library with most of the time
        libs = g["library"].cat.codes.to_numpy(np.int64)
        n_lib = len(LIBRARIES)
        per_pair = np.bincount(codes * n_lib + libs, weights=dur, minlength=len(values) * n_lib)
        best = per_pair.reshape(len(values), n_lib).argmax(axis=1)
        out["library"] = np.array(LIBRARIES, dtype=object)[best[groups["key"]]]
    return sorted_rows(pd.DataFrame(out), ["total_us", column], [False, True])[columns]


def category_table(trace: Trace) -> pd.DataFrame:
    """GPU activity time per category, most total time first; `pct` in percent of all of it;
    `library` the library with most of the category's time."""
    return _by(trace, "category", CATEGORY_COLUMNS)


def library_table(trace: Trace) -> pd.DataFrame:
    """GPU activity time per library, most total time first; `pct` in percent of all of it."""
    return _by(trace, "library", LIBRARY_COLUMNS)


def _groups(key: np.ndarray, values: np.ndarray) -> dict[str, np.ndarray]:
    """Per distinct key, in order of first appearance: the key, count, exactly rounded sum
    (math.fsum), min and max of values. One stable argsort of the keys does the grouping."""
    small = len(key) and 0 <= key.min() and key.max() < 2 ** 15  # radix sort on small codes
    order = np.argsort(key.astype(np.int16) if small else key, kind="stable")
    sorted_key = key[order]
    starts = np.flatnonzero(np.concatenate(([True], sorted_key[1:] != sorted_key[:-1])))
    bounds = np.append(starts, len(key))
    ordered = values[order]
    as_list = ordered.tolist()
    sums = np.array([math.fsum(as_list[a:b]) for a, b in zip(bounds[:-1], bounds[1:])])
    appear = np.argsort(order[starts], kind="stable")  # groups by their first row
    return {"key": sorted_key[starts][appear], "count": np.diff(bounds)[appear], "sum": sums[appear],
            "min": np.minimum.reduceat(ordered, starts)[appear],
            "max": np.maximum.reduceat(ordered, starts)[appear]}
