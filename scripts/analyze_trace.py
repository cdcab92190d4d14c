#!/usr/bin/env python
"""`python scripts/analyze_trace.py PATH [options]`: the same report as `goodhart-prof analyze`.

Kept for the workflow people already use (download merged_trace.json, run this script on it).
"""
import sys

from goodhart_prof.cli import main

if __name__ == "__main__":
    main(["analyze", *sys.argv[1:]])
