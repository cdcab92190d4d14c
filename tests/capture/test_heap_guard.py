"""The glibc heap guard is opt-in: GOODHART_HEAP_GUARD on makes it reserve and give back heap
blocks and freeze glibc's thresholds; by default the hooks never touch the allocator beyond the
malloc_trim that closes every window. Observed by recording the libc calls heap_guard makes."""
from __future__ import annotations

import pytest
import torch

from goodhart_prof.capture import heap_guard
from goodhart_prof.capture.hooks import ProfSettings, make_hooks

pytestmark = pytest.mark.skipif(heap_guard._GLIBC is None, reason="glibc's malloc only")


class RecordingLibc:
    """Forwards to the real libc, recording (name, args, result) of every call."""

    def __init__(self, libc):
        self._libc, self.calls = libc, []

    def __getattr__(self, name):
        fn = getattr(self._libc, name)

        def call(*args):
            result = fn(*args)
            self.calls.append((name, args, result))
            return result

        return call

    def names(self) -> set[str]:
        return {name for name, _, _ in self.calls}

    def held(self) -> set[int]:
        """Blocks malloc'd through here and not freed yet."""
        taken = {r for n, _, r in self.calls if n == "malloc" and r}
        return taken - {a[0] for n, a, _ in self.calls if n == "free"}


def _window(monkeypatch, tmp_path, extra: dict[str, str]) -> tuple[RecordingLibc, list[int]]:
    """A 2-iteration window (warm-up at 1) from the variables; returns the recorder and the
    number of blocks held during each traced iteration."""
    libc = RecordingLibc(heap_guard._GLIBC)
    monkeypatch.setattr(heap_guard, "_GLIBC", libc)
    # PROF_SITES off: the attribution iteration after the window releases memory once more
    settings = ProfSettings.from_env({"PROF_ENABLED": "1", "PROF_ITERATIONS": "2-3", "PROF_SITES": "0",
                                      "PROF_OUTPUT_DIR": str(tmp_path), **extra})
    hooks = make_hooks(settings)
    held_during: list[int] = []
    x = torch.randn(256, 256)
    for it in range(5):
        with hooks.iteration(it):
            with hooks.phase("rollout"):
                x = torch.tanh(x @ x) * 0.5
            if it in (2, 3):
                held_during.append(len(libc.held()))
    hooks.close()
    assert hooks.trace_path.is_file()
    return libc, held_during


def test_guard_off_by_default_touches_only_malloc_trim(monkeypatch, tmp_path):
    libc, held = _window(monkeypatch, tmp_path, {})
    assert libc.names() == {"malloc_trim"}  # release_memory at the window's close, nothing else
    assert len(libc.calls) == 1 and held == [0, 0]


def test_guard_on_by_the_variable_reserves_and_gives_back(monkeypatch, tmp_path):
    libc, held = _window(monkeypatch, tmp_path, {"GOODHART_HEAP_GUARD": "1"})
    mallopts = [args for name, args, _ in libc.calls if name == "mallopt"]
    # Thresholds frozen once, at the value glibc has (unless this process froze them earlier).
    assert mallopts in ([(heap_guard._M_MMAP_MAX, heap_guard._mmap_max())], [])
    assert {"malloc", "free", "sbrk", "malloc_trim"} <= libc.names()
    dropped = [args for name, args, _ in libc.calls if name == "madvise"]
    assert all(a[2] == heap_guard._MADV_DONTNEED for a in dropped)
    assert held[0] > 0 and len(dropped) >= held[0]  # blocks reserved, their pages dropped
    assert libc.held() == set()  # close() gave every reserved block back
