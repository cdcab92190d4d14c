__version__ = "0.1.0"


def analyze(path, rank=None, device=None, progress=False):
    """`goodhart_prof.analyze("trace.json.gz")`: the trace's `Analysis` (DataFrames, findings,
    `to_json()`); see goodhart_prof/api.py. Imported on first call, so the package stays light."""
    from .api import analyze as _analyze
    return _analyze(path, rank=rank, device=device, progress=progress)
