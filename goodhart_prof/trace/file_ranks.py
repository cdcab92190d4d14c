"""A folder's rank files, and which rank each trace file holds: its distributedInfo, its process
names (`rank <r>`, merged traces) or its file name, how conflicting evidence is settled (DESIGN.md
`rank`), and the ranks of a folder's files, none claimed twice."""
from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import TraceError
from ..textsafe import quote_path

if TYPE_CHECKING:
    from .file_result import FileResult

MAX_RANK = 2**31 - 1
NOT_TRACES = {"run.json"}
MERGED = "merged_trace.json"  # a run folder's merge of its ranks: read only when they are not there
SKIPPED = "(the other ranks are analysed; --strict stops instead)"


def trace_files(path: Path, strict: bool = False, warnings: list[str] | None = None) -> list[Path]:
    """The trace files a path stands for (a folder's per-rank traces win over its merged one).

    A folder's entry named as a trace (*.json, *.json.gz) that is no regular file -- a dangling
    or looping symbolic link, a FIFO, a folder -- is never dropped silently: it is skipped with a
    warning appended to `warnings` (as an unreadable rank file is), or stops the load under
    `strict`, or when the folder holds nothing else."""
    try:
        if path.is_file():
            return [path]
        if not path.exists():
            raise TraceError(f"{quote_path(path)}: {_missing(path)}")
        if not path.is_dir():  # a FIFO or a device would block or never end: refused
            raise TraceError(f"{quote_path(path)}: not a file or folder")
        found, unusable = [], []
        for entry in sorted(path.iterdir()):
            if entry.name in NOT_TRACES or not entry.name.endswith((".json", ".json.gz")):
                continue
            problem = _not_a_file(entry)
            if problem:
                unusable.append((entry, problem))
            else:
                found.append(entry)
    except OSError as exc:  # an unreadable folder, a name too long, ...
        raise TraceError(f"{quote_path(path)}: cannot read ({exc.strerror or exc})") from None
    per_rank = [p for p in found if p.name != MERGED]
    found = per_rank or found
    if per_rank:  # a merged trace would not be read anyway
        unusable = [(e, problem) for e, problem in unusable if e.name != MERGED]
    if unusable and (strict or not found):
        entry, problem = unusable[0]
        raise TraceError(f"{quote_path(entry)}: {problem}")
    if not found:
        raise TraceError(f"{quote_path(path)}: folder holds no trace files (*.json, *.json.gz)")
    if warnings is not None:
        warnings += [f"skipped rank file {quote_path(e.name)}: {problem} {SKIPPED}" for e, problem in unusable]
    return found


def _not_a_file(entry: Path) -> str | None:
    """Why a folder entry named as a trace cannot be loaded as one; None for a regular file."""
    try:
        mode = entry.stat().st_mode  # follows a symbolic link
    except OSError as exc:
        return _missing(entry) if exc.errno in (errno.ENOENT, errno.ELOOP) else \
            f"cannot read ({exc.strerror or exc})"
    if stat.S_ISREG(mode):
        return None
    return "a folder, not a trace file" if stat.S_ISDIR(mode) else "not a regular file"


def _missing(path: Path) -> str:
    """What a path that does not resolve is: a looping or dangling symbolic link, or nothing."""
    try:
        target = os.readlink(path)
    except OSError:
        return "no such file or folder"
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symbolic link loop"
    return f"a dangling symbolic link (to {quote_path(target)})"
_FILE_NAME_RANK = re.compile(r"(?<![a-z])rank[-_]?(\d{1,9})(?!\d)", re.IGNORECASE)


def file_name_rank(path: Path) -> "int | None":
    """The rank a file's name states (`rank-3.pt.trace.json.gz`, `sampled_rank-1.json.gz`,
    `v100_ddp_rank1.json.gz`); None when it states none, or several."""
    found = set(map(int, _FILE_NAME_RANK.findall(path.name)))
    return found.pop() if len(found) == 1 else None


def rank_evidence(path: Path, info_rank: "int | None", pid_rank: dict[int, int],
                  warnings: list[str]) -> "tuple[int | None, dict[int, int]]":
    """The file's rank (distributedInfo.rank) or its pids' ranks (process names `rank <r>`),
    whichever the rule picks, with a warning naming both sources where they disagree.

    Process names win over distributedInfo: they are per process, and only a merge writes them
    (merge.py names each rank's process; its header has no distributedInfo), so a header rank
    that contradicts them cannot describe every process in the file. distributedInfo wins over
    the file name: the profiler writes it in the rank's own process; a name is given by whoever
    copied the file."""
    named = sorted(set(pid_rank.values()))
    by_name = file_name_rank(path)
    names = "/".join(f"rank {r}" for r in named)
    if info_rank is not None and named and named != [info_rank]:
        warnings.append(f"rank evidence conflicts in {path.name}: distributedInfo.rank {info_rank}, "
                        f"process names {names}; using the process names")
        return None, pid_rank
    if info_rank is not None:
        if by_name is not None and by_name != info_rank:
            warnings.append(f"rank evidence conflicts in {path.name}: distributedInfo.rank {info_rank}, "
                            f"file name rank {by_name}; using distributedInfo.rank")
        return info_rank, {}
    if named and by_name is not None and named != [by_name]:
        warnings.append(f"rank evidence conflicts in {path.name}: process names {names}, "
                        f"file name rank {by_name}; using the process names")
    return None, pid_rank


def header_rank(path: Path, header, warnings: list[str]) -> "int | None":
    """The rank a file's header states (distributedInfo.rank); None, with a warning, for a value
    that is not a rank."""
    info_rank = header.distributedInfo.rank if header.distributedInfo is not None else None
    if info_rank is not None and not 0 <= info_rank < MAX_RANK:
        warnings.append(f"{path.name}: ignored distributedInfo.rank {_clip(info_rank)} (not a rank)")
        info_rank = None
    return info_rank


def world_size(header) -> int | None:
    info = header.distributedInfo
    size = info.world_size if info is not None else None
    return size if isinstance(size, int) and not isinstance(size, bool) and 0 < size <= MAX_RANK else None


def _clip(value) -> str:
    text = str(value)
    return text if len(text) <= 24 else text[:21] + "..."


def file_rank(r: FileResult) -> "int | None":
    """A file's one rank, or None when its pids carry their own (`rank <r>` process names)."""
    if r.rank is not None:
        return r.rank
    ranks = r.table["rank"].unique().tolist() if len(r.table) else [0]
    return None if r.merged_ranks or len(ranks) != 1 else int(ranks[0])


def ranks_of_many(results: list[FileResult], warnings: list[str]) -> tuple[str, list[int]]:
    """Each file's ranks from its own evidence (distributedInfo.rank, process names, else the
    rank its file name states); no rank may be claimed by two files. Where some file has none,
    every file takes its place in file order instead, with a warning."""
    claims = [_claim(r) for r in results]
    if all(c is not None for c in claims):
        seen: dict[int, Path] = {}
        for r, (_, ranks) in zip(results, claims):
            for rank in ranks:
                if rank in seen:
                    raise TraceError(f"{quote_path(r.path)}: claims rank {rank}, like {seen[rank].name}")
                seen[rank] = r.path
        for r, (kind, ranks) in zip(results, claims):
            if kind == "file names":
                _set_rank(r, ranks[0])
        kinds = {kind for kind, _ in claims}
        return " and ".join(k for k in RANK_SOURCES if k in kinds), sorted(seen)
    for i, r in enumerate(results):  # fall back to file order for every file, consistently
        _set_rank(r, i)
    warnings.append("ranks taken from file order (the files carry no distributedInfo)")
    return "file order", list(range(len(results)))


RANK_SOURCES = ("distributedInfo", "process names", "file names")


def _claim(r: FileResult) -> "tuple[str, list[int]] | None":
    if r.rank is not None:
        return "distributedInfo", [r.rank]
    if r.merged_ranks:
        return "process names", r.merged_ranks
    by_name = file_name_rank(r.path)
    return None if by_name is None else ("file names", [by_name])


def _set_rank(r: FileResult, rank: int) -> None:
    r.table["rank"] = np.int32(rank)
    r.frames.columns["rank"][:] = rank
    r.memory["rank"] = np.int32(rank)
