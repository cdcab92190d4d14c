"""report/diff/format.py: how `diff` writes its figures. Values in their units, signed changes and
ratios (`new` over zero), intervals in one unit, summary rows by unit, each spread kind's verdicts,
and the readable names of kernels (full where two would print alike) and counts (with their site)."""
from __future__ import annotations

import pandas as pd

from goodhart_prof.report.diff.format import (count, interval, item_names, kernel_labels, ratio_text,
                                              signed_count, signed_text, signed_us, summary_text,
                                              value_text, verdicts)
from tests.support.diffs import phase_pair


def test_values_and_changes_in_their_units():
    assert value_text("time_us", 1500) == "1.500 ms"
    assert value_text("time_us", 1234, sig=True) == "1.23 ms"
    assert value_text("env_steps_per_s", 6421.7) == "6,422 steps/s"
    assert value_text("count_per_iteration", 22) == "22.00/it"
    assert value_text("count_per_iteration", 250.4) == "250/it"  # 100 and over: whole numbers
    assert value_text("count", 1e6) == "1,000,000"
    assert signed_us(1500) == "+1.500 ms" and signed_us(-250.0) == "-250.0 us" and signed_us(0) == "0.0 us"
    assert signed_text("count_per_iteration", 8.0) == "+8.00/it"
    assert signed_text("time_us", 250, sig=True) == "+250 us"
    assert signed_count(-3) == "-3" and signed_count(4) == "+4" and count(12345.6) == "12,346"
    for missing in (None, float("nan")):
        assert value_text("time_us", missing) == signed_text("count", missing) == count(missing) == "-"


def test_ratio_new_over_zero_else_dash():
    assert ratio_text(1.234) == "1.23x"
    assert ratio_text(float("nan"), 0) == "new"  # A was zero: B / A undefined, the item is new
    assert ratio_text(None, 5) == "-"


def test_intervals_and_summary_rows():
    assert interval("time_us", 844.7, 1516.0) == "0.845-1.52 ms"
    assert interval("env_steps_per_s", 6422.2, 9912.0) == "6,422-9,912 steps/s"
    assert interval("count", 1, 2) == "1.00-2.00"
    assert interval("time_us", float("nan"), 2.0) == ""
    assert summary_text("share", 0.25) == "25.0%"
    assert summary_text("share", 0.05, signed=True) == "+5.0 pt"  # a change of share: points
    assert summary_text("per_iteration", 8, signed=True) == "+8.00/it"
    assert summary_text("time", -1500, signed=True) == "-1.500 ms"
    assert summary_text("count", 5, signed=True) == "+5" and summary_text("count", None) == "-"


def test_verdicts_of_one_kind(tmp_path):
    c = phase_pair(tmp_path)  # logging only in B; rollout 200 us per iteration on both sides
    assert verdicts(c, "phase") == {"rollout": "within noise", "logging": "only in B"}
    assert verdicts(c, "iteration") == {"iteration time": "within noise"}
    assert verdicts(c, "kernel") == {}


def test_kernel_labels_keep_templates_apart():
    # two instantiations of one template share a short name: both keep their full names
    k1 = "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float, MeanOps<float>>>(float)"
    k2 = k1.replace("<128, 4", "<512, 1")
    assert kernel_labels([k1, k2, "volta_sgemm_128x64_nn"]) == [k1, k2, "volta_sgemm_128x64_nn"]
    assert kernel_labels([k1, "volta_sgemm_128x64_nn"]) == ["reduce_kernel<...>", "volta_sgemm_128x64_nn"]


def test_item_names_short_kernels_and_count_sites():
    frame = pd.DataFrame({"kind": ["kernel", "host_read", "phase"],
                          "item": ["void at::native::(anonymous namespace)::foo<1>(int)", "item", "rollout"],
                          "site": [None, "rollout > env_step > aten::item", None]})
    assert item_names(frame) == ["foo<...>", "item at rollout > env_step > aten::item", "rollout"]
    assert item_names(frame.drop(columns="site")) == ["foo<...>", "item", "rollout"]
