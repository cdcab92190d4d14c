"""Which rank each trace file holds: its distributedInfo, its process names (`rank <r>`, merged
traces) or its file name, how conflicting evidence is settled (DESIGN.md `rank`), and the ranks of
a folder's files, none claimed twice."""
from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import TraceError
from ..textsafe import quote_path

if TYPE_CHECKING:
    from .load import FileResult

MAX_RANK = 2**31 - 1
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
