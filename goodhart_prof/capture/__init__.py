"""The capture side: what runs inside (or starts) a training process. PROF_* settings, the
profiler hooks, the heap guard, run folders and the trainer options `goodhart-prof run` shares.

Nothing here imports the reading side (trace, analysis, report: msgspec, pandas); the
import-linter contracts in pyproject.toml say so."""
