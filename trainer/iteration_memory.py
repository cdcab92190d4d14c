"""The memory a traced iteration used, for run.json: the host's resident set size and, on CUDA,
the allocator's peaks during the iteration (reset when it starts)."""
from __future__ import annotations

import os
from typing import Any

import torch


def host_rss_bytes() -> int | None:
    """The process's resident set size now (Linux /proc/self/statm), None where unreadable."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def reset_peak_memory(device: torch.device) -> None:
    """Start a traced iteration's device peaks afresh (CUDA only), so each is that iteration's."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def memory_row(it: int, device: torch.device) -> dict[str, Any]:
    """run.json's memory of a traced iteration, taken when it ends: host RSS, and on CUDA the
    allocator's peak allocated and reserved bytes during the iteration (null on the CPU)."""
    cuda = device.type == "cuda"
    return {"iteration": it, "rss_bytes": host_rss_bytes(),
            "max_memory_allocated": torch.cuda.max_memory_allocated(device) if cuda else None,
            "max_memory_reserved": torch.cuda.max_memory_reserved(device) if cuda else None}
