"""One decoded piece of a document: its tables, as every decode path returns them."""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from .decode import TraceDoc
from .model import Frames


@dataclass
class Piece:
    table: pd.DataFrame
    frames: Frames
    pid_rank: dict[int, int]
    header: TraceDoc
    skipped: int
    memory: pd.DataFrame
    unfit: int = 0    # of `skipped`: beyond 2^53 us (times.fits)
    decoded: int = 0  # events the piece decoded (any phase)
