#!/usr/bin/env python
"""Kernel taxonomy on real traces: per trace in shared/traces, the share of GPU kernel time
(memcpy/memset excluded) left in category `other`, and the top 3 categories.

Prints a Markdown table (the one in docs/report.md, "Kernel taxonomy on real traces").
Usage: python scripts/taxonomy_report.py [--shared PATH]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from goodhart_prof.analysis.gpu.kernels import kernel_table  # noqa: E402
from goodhart_prof.trace.load import load  # noqa: E402

TRACES = [
    "tracelens/h100_owlv2_inference.json.gz", "tracelens/h100_bert_small_inference.json.gz",
    "tracelens/mi300_qwen_inference.json.gz", "tracelens/mi300_resnet_act_checkpoint_train.json.gz",
    "tracelens/sglang_qwen3_8b_prefilldecode.json.gz", "tracelens/vllm_decode_full_graph.json.gz",
    "hta/v100_ddp_rank1.json.gz", "hta/mi250_minitoy_rocm.json.gz", "hta/sampled_128rank",
    "kineto/resnet50_v100_2021.pt.trace.json.gz", "param/dlrm_8rank"]


def row(path: Path) -> tuple[float, str]:
    kt = kernel_table(load(path, progress=False))
    kernels = kt[~kt["category"].isin(["memcpy", "memset"])]
    by_cat = kernels.groupby("category")["total_us"].sum().sort_values(ascending=False)
    total = by_cat.sum()
    other = 100.0 * by_cat.get("other", 0.0) / total if total > 0 else 0.0
    top = ", ".join(f"{c} {100.0 * v / total:.1f}%" for c, v in by_cat.head(3).items())
    return other, top


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "traces")
    args = parser.parse_args()
    print("| trace | other % | top 3 categories (% of GPU kernel time) |")
    print("| --- | ---: | --- |")
    for key in TRACES:
        path = args.shared / key
        if not path.exists():
            print(f"| {key} | (missing) | |")
            continue
        other, top = row(path)
        print(f"| {key} | {other:.2f} | {top} |")


if __name__ == "__main__":
    main()
