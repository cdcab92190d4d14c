"""Helpers shared by the benchmark scripts: device sync and a noise indicator."""
from __future__ import annotations

import os
import time

import torch

from trainer.launch import device_name

__all__ = ["ForeignLoad", "device_name", "sync"]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class ForeignLoad:
    """CPU time used by other processes while we run (noise indicator), from /proc/stat."""

    def __init__(self):
        self.start = self._sample()

    @staticmethod
    def _sample():
        try:
            with open("/proc/stat") as fh:
                f = [int(x) for x in fh.readline().split()[1:]]
            busy = (f[0] + f[1] + f[2] + f[5] + f[6] + f[7]) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            busy = None
        t = os.times()
        return busy, t.user + t.system, time.perf_counter()

    def cpus_used(self) -> float | None:
        """Average number of CPUs kept busy by other processes since start."""
        b0, own0, w0 = self.start
        b1, own1, w1 = self._sample()
        if b0 is None or b1 is None or w1 <= w0:
            return None
        return max(0.0, ((b1 - b0) - (own1 - own0)) / (w1 - w0))
