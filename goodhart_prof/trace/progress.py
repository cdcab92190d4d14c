"""The loading bar: bytes read and events loaded, shown while a big input loads."""
from __future__ import annotations

from typing import Any


def progress_bar(n_files: int, total: int, show: bool):
    """A bar over `total` bytes (tqdm), or None when it is not shown."""
    if not show:
        return None
    from tqdm import tqdm
    return tqdm(total=total, unit="B", unit_scale=True, desc=f"loading {n_files} file(s)",
                leave=False, dynamic_ncols=True)


class Progress:
    """Bytes and events loaded, on the loading bar (None: no bar)."""

    def __init__(self, bar):
        self.bar, self.bytes, self.events = bar, 0, 0

    def add(self, nbytes: int, result: "Any | None" = None) -> None:
        """`nbytes` more read; `result` (a piece or a file loaded: its tables) adds its events."""
        if self.bar is None:
            return
        if result is not None:
            self.events += len(result.table) + len(result.frames) + len(result.memory)
            self.bar.set_postfix_str(f"{self.events:,} events", refresh=False)
        self.bar.update(nbytes)
        self.bytes += nbytes
