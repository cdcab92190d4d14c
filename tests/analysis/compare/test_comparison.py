"""A/B comparison of two analyses (analysis/compare/comparison.py) on two hand-made sides whose
figures are worked by hand: five 9 ms steps (the first a warm-up), each a 100 us GEMM and `.item()`
reads (50 us on the host, a 2 us copy on the GPU inside `rollout`); A reads twice per step, B once
and adds a 100 us relu kernel. Tables paired with presence and zero-filled counts, every sync kind
listed, the headline's better and worse with their impact, and one-sided figures never judged."""
from __future__ import annotations

import pytest

from goodhart_prof.analysis import analyze
from goodhart_prof.analysis.compare.comparison import compare
from tests.support.events import ann, cuda_item, launch, load_events

COPY = "Memcpy DtoH (Device -> Pageable)"


def side(tmp_path, items, relu, name):
    events, corr = [], 1000
    for it in range(5):
        base = 10_000 * it
        events += [ann(f"ProfilerStep#{it}", base, 9000), ann("rollout", base + 10, 5000)]
        corr += 1
        events += launch("gemm_kernel", base + 50, corr, "aten::mm")
        if relu:
            corr += 1
            events += launch("relu_kernel", base + 300, corr, "aten::relu")
        for k in range(items):
            events += cuda_item(base + 1000 + 300 * k, 100 * it + 10 * k + 1)
    return analyze(load_events(tmp_path, events, name))


@pytest.fixture(scope="module")
def ab(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ab")
    return compare(side(tmp, 2, False, "a.json"), side(tmp, 1, True, "b.json"))


def test_kernels_are_paired_with_their_presence(ab):
    k = ab.kernels.set_index("name")
    assert k.loc["gemm_kernel", ["presence", "count_a", "count_b", "total_us_delta"]].tolist() == ["both", 5, 5, 0.0]
    relu = k.loc["relu_kernel"]
    assert (relu["presence"], relu["count_a"], relu["count_b"], relu["total_us_b"]) == ("b_only", 0, 5, 500.0)
    assert relu["category"] == "elementwise"
    assert k.loc[COPY, ["count_a", "count_b", "total_us_a", "total_us_b", "total_us_ratio"]].tolist() == [
        10, 5, 20.0, 10.0, 0.5]
    assert k.index[0] in ("gemm_kernel", "relu_kernel")  # largest total first


def test_every_sync_kind_is_listed(ab):
    s = ab.sync_kinds.set_index("kind")
    assert s.loc["item", ["count_a", "count_b", "total_us_a", "total_us_b"]].tolist() == [10, 5, 500.0, 250.0]
    assert len(s) == 9 and (s.drop(index="item")[["count_a", "count_b"]] == 0).all().all()
    assert ab.phases.set_index("name").loc["rollout", ["syncs_a", "syncs_b"]].tolist() == [10, 5]


def test_the_headline_says_what_got_better_and_worse(ab):
    h = ab.headline
    assert h["verdict"].tolist() == ["better"] * 3 + ["worse"] * 2  # better first
    sync = h.iloc[0]
    assert (sync["kind"], sync["item"], sync["a"], sync["b"], sync["impact_us"]) == ("sync", "item", 2.0, 1.0, 250.0)
    gpu = h[h["item"] == "iteration GPU time"].iloc[0]
    # 100 + 2 x 2 us against 100 + 100 + 2 us per counted iteration, over 4 counted iterations
    assert (gpu["verdict"], gpu["a"], gpu["b"], gpu["impact_us"]) == ("worse", 104.0, 202.0, 98.0 * 4)
    kernels = h[h["kind"] == "kernels"].iloc[0]
    assert (kernels["a"], kernels["b"], kernels["verdict"]) == (1.0, 2.0, "worse")
    assert ab.iterations_line == "A: 4 iterations (1 warm-up excluded); B: 4 iterations (1 warm-up excluded)"
    assert ab.time_statement is None


def test_one_sided_figures_are_never_better_or_worse(ab):
    spread = ab.spread.set_index(["kind", "item"])["verdict"]
    assert spread[("kernel", "relu_kernel")] == "only in B"
    assert spread[("category", "elementwise")] == "only in B"
    assert spread[("iteration", "iteration time")] == "within noise"  # 9 ms steps on both sides
    assert set(ab.within_noise["item"]) >= {"iteration time", "gemm_kernel", "rollout"}
    assert list(ab.better["verdict"].unique()) == ["better"] and len(ab.worse) == 2


def test_devices_pair_on_rank_and_device(ab):
    (row,) = ab.devices.to_dict("records")
    assert (row["label"], row["presence"]) == ("rank0/gpu0", "both")
    assert (row["busy_us_a"], row["busy_us_b"], row["kernel_us_a"], row["kernel_us_b"]) == (520.0, 1010.0, 500.0, 1000.0)
