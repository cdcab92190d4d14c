"""How the reports say how the iterations were found and what ran once before them (one wording
for the text and HTML reports; analysis/iterations.py and analysis/setup.py hold the figures)."""
from __future__ import annotations

from ...analysis.host.borrowed_sites import sites_from
from ...analysis.iterations import find_iterations
from ...analysis.setup import setup
from ...trace.model import Trace
from ...units import bytes_text, duration

# Under the GPU table where steps exist: which bounds each utilization is measured in.
STEP_BOUNDS_NOTE = ("span: first to last GPU activity; in steps: within the iterations' bounds (each from its "
                    "host start to its end or its last GPU activity), so host work before a step's first "
                    "kernel counts as idle (what low_utilization judges)")


def iteration_label(trace: Trace) -> str:
    """What the iterations are, for an axis or a note: `ProfilerStep#N`, or `inferred from
    Optimizer.step#SGD.step`."""
    it = find_iterations(trace)
    return "ProfilerStep#N" if it.how != "inferred" else f"inferred from {it.marker}"


def iterations_line(trace: Trace) -> str:
    """`Iterations: 11 iteration(s) inferred from Optimizer.step#SGD.step (...)`."""
    return "Iterations: " + find_iterations(trace).describe()


def sites_line(trace: Trace) -> str | None:
    """`Sites: from iteration 4, recorded with Python stacks after the window (PATH); the timings
    are from iterations 2-3, recorded without`; None unless the sites are borrowed."""
    found = sites_from(trace)
    if found is None:
        return None
    return (f"Sites: from {_iterations_text(found['iterations'])}, recorded with Python stacks after the "
            f"window ({', '.join(found['paths'][:2])}{' ...' if len(found['paths']) > 2 else ''}); the "
            f"timings are from {_iterations_text(found['timed_iterations'])}, recorded without stacks")


def _iterations_text(its: list[int]) -> str:
    if not its:
        return "no labelled iteration"
    if len(its) == 1:
        return f"iteration {its[0]}"
    contiguous = its == list(range(its[0], its[-1] + 1))
    return f"iterations {its[0]}-{its[-1]}" if contiguous else "iterations " + ", ".join(map(str, its))


def setup_line(trace: Trace) -> str | None:
    """What ran before the loop, on the rank where it took longest (copies summed over ranks),
    and that per-iteration figures leave it out; None where no rank has a setup."""
    s = setup(trace)
    if s.empty:
        return None
    r = s.ranks.sort_values(["dur_us", "rank"], ascending=[False, True], kind="stable").iloc[0]
    where = f"rank {int(r['rank'])}" + (f", the longest of {len(s.ranks)} ranks" if len(s.ranks) > 1 else "")
    parts = [f"Setup (before the {r['bound']}; runs once, left out of per-iteration figures): "
             f"{duration(float(r['dur_us']))} on {where}"]
    copies = int(s.ranks["htod_copies"].sum())
    if copies:
        parts.append(f"{copies:,} host-to-device copies ({bytes_text(float(s.ranks['htod_bytes'].sum()))}, "
                     f"{duration(float(s.ranks['htod_gpu_us'].sum()))} on the GPU)")
    parts += [f"{c['name']} ({c['kind']}) x{c['count']:,} {duration(c['total_us'])}" for c in s.calls[:3]]
    if s.ops:
        parts.append("longest ops: " + ", ".join(f"{o['name']} x{o['count']:,} {duration(o['total_us'])}"
                                                 for o in s.ops))
    return " · ".join(parts)
