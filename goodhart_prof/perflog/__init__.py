"""The performance log: one dated row of key figures per analysed trace, and A/B comparison of rows.

`goodhart-prof log add PATH --change TEXT` analyses PATH (`measure.py`) and adds a row to a markdown
table (PERFLOG.md by default: newest row first, right under the header; the file and header are
made when missing, a table of the layout before `Host reads/iter` is upgraded in place, and a
file without our header gets the table appended at its end) and to its
machine-readable twin next to it (PERFLOG.jsonl: one JSON object per row, append-only, oldest
first), both written under one lock (`log_file.py`). `log compare` judges two rows field by field
(`compare.py`); `show.py` prints rows and comparisons in the terminal. Row fields
(`log_file.FIELDS`):

| field | meaning |
| --- | --- |
| id | 1, 2, 3, ... in the order rows were added: the `#` column, and how `log compare` names a row |
| date, created | local date (markdown) and ISO timestamp (JSONL) of the append |
| change | what this run changed (`--change`) |
| trace | PATH as given |
| iteration_ms | median CPU time of one `ProfilerStep#N` over the counted iterations (warm-up excluded; per iteration the largest rank's: `analysis/compare/noise.py`), ms; without counted iterations, the mean over all steps |
| iteration_ms_low, _high, _n | its interval (`analysis/compare/spread.py`) and number of iterations (JSONL only) |
| env_steps_per_s | median env-steps/s over the run's throughput iterations (metrics.jsonl of the run folder PATH is or lies in: untraced, warm-up excluded, `trace/run_record.py`); without metrics.jsonl, run.json's `env_steps_per_s` (no spread); empty without a run |
| env_steps_per_s_low, _high, _n | the median's interval (`analysis/compare/spread.py`) and the number of iterations (JSONL only; null: no spread recorded) |
| gpu_busy_pct | GPU busy / span over all devices, % |
| syncs_per_iteration | sync points inside `ProfilerStep#N` per step |
| host_reads_per_iteration | host reads (`.item()`, `nonzero`, `if tensor:` on CPU-only ranks: each a sync on a GPU) inside `ProfilerStep#N` per step; empty in rows added before it was logged |
| top_kernel, top_kernel_pct | the kernel with the most GPU time and its share of GPU activity time, % |
| memcpy_htod_ms | total duration of GPU memcpys named `Memcpy HtoD*`, ms |
"""
