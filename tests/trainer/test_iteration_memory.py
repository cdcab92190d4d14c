"""The memory row of a traced iteration: the host's resident set size as the kernel reports it,
and no device peaks on the CPU."""
from __future__ import annotations

import torch

from trainer.iteration_memory import host_rss_bytes, memory_row, reset_peak_memory


def _status_rss_bytes() -> int:
    """VmRSS of /proc/self/status (kB), the same figure statm gives in pages."""
    with open("/proc/self/status") as fh:
        line = next(line for line in fh if line.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


def test_host_rss_is_the_resident_set_the_kernel_reports():
    before, rss, after = _status_rss_bytes(), host_rss_bytes(), _status_rss_bytes()
    assert rss is not None and rss % 4096 == 0
    assert min(before, after) - (1 << 20) <= rss <= max(before, after) + (1 << 20)  # 1 MiB of drift


def test_the_cpu_row_has_no_device_peaks():
    cpu = torch.device("cpu")
    assert reset_peak_memory(cpu) is None  # nothing to reset off CUDA
    row = memory_row(7, cpu)
    assert list(row) == ["iteration", "rss_bytes", "max_memory_allocated", "max_memory_reserved"]
    assert row["iteration"] == 7 and row["rss_bytes"] > 0
    assert row["max_memory_allocated"] is None and row["max_memory_reserved"] is None
