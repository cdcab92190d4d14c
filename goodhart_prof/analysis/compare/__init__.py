"""A/B comparison of two analyses: the comparison, its summary rows, per-iteration noise,
the spread of a median and the verdicts."""
