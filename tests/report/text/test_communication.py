"""report/text/communication.py: the terminal report's communication and ranks sections. The
8-rank DLRM trace's collectives and steps (NCCL kernel counts and times, step durations, recounted
from the raw rank files), the notes on where sizes came from, message sizes and rates as cells,
and nothing printed for a trace without collectives."""
from __future__ import annotations

import io

import pandas as pd
import pytest
from rich.console import Console

from goodhart_prof.report.text.communication import (communication_notes, communication_section, rate,
                                                     ranks_section, size)
from tests.support.analyses import analysis_of
from tests.support.dlrm import DLRM, raw_rank



def text(section, a, width: int = 160) -> list[str]:
    out = io.StringIO()
    section(a, Console(file=out, width=width, color_system=None))
    return out.getvalue().splitlines()


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.split("│")]


@pytest.fixture(scope="module")
def dlrm():
    return analysis_of(DLRM)


def test_collectives_per_rank_match_the_raw_kernels(dlrm):
    lines = text(communication_section, dlrm)
    kinds, _ = raw_rank(1)
    for kind, (n, us) in kinds.items():
        row = cells(next(x for x in lines if x.startswith("rank 1 / gpu 1 ") and f" {kind} " in x))
        assert row[2:4] == [str(n), f"{us / 1e3:.3f} ms"]
        assert row[7] == "8"  # the job's world size: every rank ran them together
    assert "waiting" in lines[3] and "busbw once" in lines[2] and "all arrived" in lines[3]  # headers of two lines
    assert any(x.startswith("message sizes: from the shapes") for x in lines)
    assert any(x.startswith("Called from (all ranks)") for x in lines)


def test_ranks_steps_and_who_arrived_last(dlrm):
    lines = text(ranks_section, dlrm)
    assert lines[1].startswith("Ranks (mean per traced iteration, 1 iteration)")
    for rank in (0, 1):
        kinds, step = raw_rank(rank)
        comm = sum(us for _, us in kinds.values())
        row = cells(next(x for x in lines if x.startswith(f"   {rank} │")))
        assert row[1] == f"{step / 1e3:.3f} ms" and row[3] == f"{comm / 1e3:.3f} ms"
    slowest = dlrm.ranks.iterations.iloc[0]
    assert any(x.startswith(f"iteration 10: rank {int(slowest['slowest_rank'])} arrived last at ") for x in lines)


def test_notes_say_where_sizes_and_groups_came_from(dlrm):
    notes = communication_notes(dlrm.communication.collectives)
    assert [n.split(":")[0] for n in notes[:2]] == ["message sizes", "n (group size)"]
    assert "from the shapes" in notes[0] and "the job's world size" in notes[1]
    assert notes[2].startswith("busbw counts each kernel's whole time")  # the ranks waited: waits known
    assert communication_notes(pd.DataFrame()) == []
    unsized = pd.DataFrame({"size_source": [None], "group_source": [None], "group_size": [float("nan")],
                            "wait_us": [float("nan")]})
    assert communication_notes(unsized) == ["message sizes: not recorded in this trace (no bytes, no bandwidth)"]


def test_size_and_rate_cells():
    assert size(2_485_252, 3, 3) == "2.4 MiB"
    assert size(1024, 2, 5) == "1.0 KiB (2 of 5)"  # only some calls had a size
    assert size(float("nan"), 3, 3) == size(100, 0, 3) == "-"
    assert rate(1.3815) == "1.38 GB/s" and rate(None) == rate(float("nan")) == "-"


def test_no_collectives_nothing_printed():
    a = analysis_of("hta/mi250_minitoy_rocm.json.gz")
    assert text(communication_section, a) == [] and text(ranks_section, a) == []
