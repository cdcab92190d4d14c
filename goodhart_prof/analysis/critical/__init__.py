"""The critical path of an iteration: HTA's graph rebuilt on our tables, and its longest path."""
