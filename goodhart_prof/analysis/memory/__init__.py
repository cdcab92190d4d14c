"""Memory per device from the profiler's `[memory]` events."""
