"""Copy rules (analysis/rules/copies.py): pageable host-to-device copies per iteration and tensors
made on the host then moved (cpu_alloc), on hand-made traces whose figures are worked by hand,
and on the 2021 ResNet trace; `names_matching` on a categorical name column."""
from __future__ import annotations

import pandas as pd
import pytest

from goodhart_prof.analysis import analyze
from goodhart_prof.analysis.rules.copies import names_matching
from goodhart_prof.trace.load import load
from tests.support.events import ann, launch, load_events, memcpy, op, rt
from tests.support.paths import DATA

MiB = 1 << 20


def to_device(ts, corr, creator, memory):
    """`creator` (5 us) then `.to(device)` of 60 us launching a 1 MiB copy of 30 us from `memory`."""
    copy = memcpy(f"Memcpy HtoD ({memory} -> Device)", ts + 10, 30, corr)
    copy["args"]["bytes"] = MiB
    return [op(creator, ts - 10, 5), op("aten::to", ts, 60), op("aten::_to_copy", ts + 1, 58),
            op("aten::copy_", ts + 2, 56), rt("cudaMemcpyAsync", ts + 5, 40, corr),
            rt("cudaStreamSynchronize", ts + 46, 10, corr + 1000), copy]


def two_iterations(per_iteration, creator, memory):
    """Two 9 ms iterations, each a 100 us GEMM and `per_iteration` moves."""
    events, corr = [], 0
    for it in range(2):
        base = 10_000 * it
        events += [ann(f"ProfilerStep#{it}", base, 9000), *launch("gemm", base + 50, 500 + it, op_name="aten::mm")]
        for k in range(per_iteration):
            corr += 1
            events += to_device(base + 1000 + 1000 * k, corr, creator, memory)
    return events


def findings(tmp_path, events):
    return {f.rule: f for f in analyze(load_events(tmp_path, events)).findings}


def test_pageable_copies_per_iteration(tmp_path):
    found = findings(tmp_path, two_iterations(2, "aten::mul", "Pageable"))
    f = found["pageable_htod"]
    assert f.title == "4 pageable host-to-device copies (2.0 per iteration, 0.12 ms on the GPU)"
    ev = f.evidence
    # 4 copies of 30 us and 1 MiB; the GPU is busy 2 x 100 (GEMMs) + 120 (copies) = 320 us
    assert (ev["count"], ev["per_iteration"], ev["copy_us"], ev["bytes"]) == (4, 2.0, 120.0, 4 * MiB)
    assert ev["gpu_share"] == pytest.approx(120 / 320, abs=1e-4)
    assert f.est_saving_us == 60.0  # the copies' GPU time per iteration
    assert "cpu_alloc" not in found  # mul is no factory


def test_pinned_copies_are_no_pageable_finding(tmp_path):
    assert "pageable_htod" not in findings(tmp_path, two_iterations(2, "aten::mul", "Pinned"))


def test_tensors_made_on_the_host_then_moved(tmp_path):
    found = findings(tmp_path, two_iterations(3, "aten::zeros", "Pageable"))
    f = found["cpu_alloc"]
    assert f.title == "3.0 tensors per iteration made on the host, then moved to the device"
    ev = f.evidence
    assert (ev["count"], ev["moves"], ev["creators"], ev["copy_us"]) == (6, 6, {"aten::zeros": 6}, 180.0)
    assert ev["bytes_median"] == MiB
    assert f.est_saving_us == 180.0  # 6 moves of 60 us on the host, over 2 iterations
    # the factory's copies are cpu_alloc's evidence (fix: device=), not pageable_htod's (pinning)
    assert "pageable_htod" not in found
    # one per iteration can be a setup step
    assert "cpu_alloc" not in findings(tmp_path, two_iterations(1, "aten::zeros", "Pinned"))


def test_names_matching_tests_each_distinct_name():
    names = pd.Series(pd.Categorical(["Memcpy HtoD (Pageable -> Device)", "k", None,
                                      "Memcpy HtoD (Pinned -> Device)", "Memcpy DtoH (Device -> Pageable)"]))
    assert names_matching(names, r"^Memcpy HtoD").tolist() == [True, False, False, True, False]


def test_resnet_2021_pageable_copies():
    path = DATA / "kineto" / "resnet50_v100_2021.pt.trace.json.gz"
    found = {f.rule: f for f in analyze(load(path)).findings}
    assert found["pageable_htod"].evidence["count"] == 12
    assert found["pageable_htod"].evidence["per_iteration"] == 2.0
