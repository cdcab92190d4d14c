"""Efficiency against the hardware (analysis/gpu/efficiency.py, analysis/gpu/hardware.py): FLOPs checked
against hand calculations from the raw JSON shapes and against torch's own `flops` counter, % of
peak only for known devices, and no achieved rate above the device's peak on the real traces."""
from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pytest

from goodhart_prof.analysis.gpu.efficiency import efficiency
from goodhart_prof.analysis.gpu.op_work import op_work
from goodhart_prof.analysis.gpu.hardware import device_peak
from goodhart_prof.analysis.gpu.precision import op_dtype
from goodhart_prof.trace.load import load
from tests.support.paths import DATA

OURS = DATA / "ours" / "cpu_flops_ops.json.gz"
BERT = DATA / "tracelens" / "h100_bert_small_inference.json.gz"
OWL = DATA / "tracelens" / "h100_owlv2_inference.json.gz"
MI300_RESNET = DATA / "tracelens" / "mi300_resnet_act_checkpoint_train.json.gz"
RESNET_2021 = DATA / "kineto" / "resnet50_v100_2021.pt.trace.json.gz"
MI250 = DATA / "hta" / "mi250_minitoy_rocm.json.gz"
REAL = [BERT, OWL, MI300_RESNET, RESNET_2021, DATA / "tracelens" / "mi300_qwen_inference.json.gz",
        DATA / "tracelens" / "sglang_qwen3_8b_prefilldecode.json.gz", DATA / "param" / "dlrm_8rank"]


def raw_ops(path: Path, name: str) -> list[dict]:
    """The cpu ops named `name` as the JSON holds them (read here, independently of the loader)."""
    with gzip.open(path) as fh:
        doc = json.load(fh)
    return [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("name") == name
            and e.get("cat") in ("cpu_op", "Operator")]


def conv_out(size: int, k: int, stride: int, pad: int, dil: int) -> int:
    return (size + 2 * pad - dil * (k - 1) - 1) // stride + 1


@pytest.fixture(scope="module")
def ours():
    return load(OURS, progress=False)


# -- torch's own counter ---------------------------------------------------------------------------
def test_flops_equal_torchs_flops_for_every_op_that_has_them(ours):
    ev = ours.events
    counted = ev[np.isfinite(ev["flops"].to_numpy())]
    assert set(counted["name"].astype(str)) == {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm",
                                                "aten::conv2d"}
    assert len(counted) == 16  # 8 GEMMs, 6 conv2d, the 2 bmm of SDPA's math path
    for r in counted.itertuples():
        flops, _ = op_work(str(r.name), str(r.input_dims), str(r.concrete_inputs), op_dtype(str(r.input_types)))
        assert flops == r.flops, (r.name, r.input_dims, r.concrete_inputs)


def test_the_pipeline_carries_torchs_figure_and_agrees(ours):
    inst = efficiency(ours).instances
    checked = inst[np.isfinite(inst["torch_flops"].to_numpy(float))]
    assert len(checked) == 14  # the SDPA's inner bmm are inside an efficiency op: counted by it
    assert (checked["flops"] == checked["torch_flops"]).all()


def test_attention_flops_are_the_two_gemms_torch_counts_on_the_math_path(ours):
    """SDPA (not causal) on CPU runs Q K^T and P V as two aten::bmm, which torch counts."""
    ev = ours.events
    sdpa = ev[ev["name"] == "aten::scaled_dot_product_attention"].iloc[0]
    bmm = ev[(ev["name"] == "aten::bmm") & (ev["ts"] >= sdpa["ts"]) & (ev["end"] <= sdpa["end"])]
    assert len(bmm) == 2
    flops, _ = op_work("aten::scaled_dot_product_attention", str(sdpa["input_dims"]),
                       str(sdpa["concrete_inputs"]), "fp32")
    assert flops == bmm["flops"].sum() == 2 * 2 * 3 * 7 * 9 * (8 + 10)


# -- hand calculations from the raw JSON -------------------------------------------------------------
def ops_row(eff, op: str):
    rows = eff.ops[eff.ops["op"] == op]
    assert len(rows) == 1
    return rows.iloc[0]


def test_addmm_flops_and_bytes_on_bert_by_hand():
    hand_flops = hand_bytes = 0
    events = raw_ops(BERT, "aten::addmm")
    for e in events:
        bias, a, b = e["args"]["Input Dims"][:3]
        assert e["args"]["Input type"][:3] == ["c10::BFloat16"] * 3
        (m, k), (k2, n) = a, b
        assert k == k2
        hand_flops += 2 * m * n * k
        hand_bytes += 2 * (math.prod(bias) + m * k + k * n + m * n)
    row = ops_row(efficiency(load(BERT, progress=False)), "aten::addmm")
    assert row["count"] == len(events) == 26
    assert row["flops"] == hand_flops
    assert row["bytes"] == hand_bytes
    assert row["intensity"] == pytest.approx(hand_flops / hand_bytes)


def test_attention_flops_on_bert_by_hand():
    hand = 0
    events = raw_ops(BERT, "aten::scaled_dot_product_attention")
    for e in events:
        (b, h, lq, d), (_, _, lk, _), (_, _, _, dv) = e["args"]["Input Dims"][:3]
        assert e["args"]["Concrete Inputs"][5] == "False"  # not causal
        hand += 2 * b * h * lq * lk * d + 2 * b * h * lq * lk * dv
    row = ops_row(efficiency(load(BERT, progress=False)), "aten::scaled_dot_product_attention")
    assert row["count"] == len(events) == 4
    assert row["flops"] == hand


def test_bmm_flops_on_owlv2_by_hand():
    hand = sum(2 * b * m * k * n for e in raw_ops(OWL, "aten::bmm")
               for (b, m, k), (_, _, n) in [e["args"]["Input Dims"][:2]])
    row = ops_row(efficiency(load(OWL, progress=False)), "aten::bmm")
    assert row["flops"] == hand


def test_conv_forward_and_backward_flops_on_mi300_resnet_by_hand():
    forward = 0
    for e in raw_ops(MI300_RESNET, "aten::conv2d"):
        (n, c, hi, wi), (co, cig, kh, kw) = e["args"]["Input Dims"][:2]
        stride, pad, dil = (json.loads(e["args"]["Concrete Inputs"][i]) for i in (3, 4, 5))
        ho = conv_out(hi, kh, stride[0], pad[0], dil[0])
        wo = conv_out(wi, kw, stride[1], pad[1], dil[1])
        forward += 2 * n * co * ho * wo * cig * kh * kw
    backward = 0
    for e in raw_ops(MI300_RESNET, "aten::convolution_backward"):
        (n, co, ho, wo), _, (_, cig, kh, kw) = e["args"]["Input Dims"][:3]
        mask = e["args"]["Concrete Inputs"][10]
        wanted = mask.count("True", 0, mask.rindex(","))  # grad_input, grad_weight (not grad_bias)
        backward += wanted * 2 * n * co * ho * wo * cig * kh * kw
    eff = efficiency(load(MI300_RESNET, progress=False))
    assert ops_row(eff, "aten::conv2d")["flops"] == forward
    assert ops_row(eff, "aten::convolution_backward")["flops"] == backward


def test_conv_without_scalar_arguments_is_unsized_not_guessed():
    eff = efficiency(load(RESNET_2021, progress=False))  # 2021: no Concrete Inputs (no stride)
    assert eff.unsized.get("aten::conv2d") == len(raw_ops(RESNET_2021, "aten::conv2d"))
    assert "aten::conv2d" not in set(eff.ops["op"])


# -- peaks -----------------------------------------------------------------------------------------
def test_percentages_only_where_the_device_is_known():
    bert = efficiency(load(BERT, progress=False))
    assert bert.devices["peak_name"].tolist() == ["H100 SXM"]
    row = ops_row(bert, "aten::addmm")
    assert row["pct_peak"] == pytest.approx(100 * row["flops"] / row["time_us"] / 1e6 / 989.5)
    for path in (MI250, OURS):  # "AMD Radeon Graphics" (no part named), and the CPU
        eff = efficiency(load(path, progress=False))
        assert len(eff.ops) and eff.ops["pct_peak"].isna().all() and eff.ops["bound"].isna().all()


def test_the_cpu_run_uses_the_ops_own_time(ours):
    eff = efficiency(ours)
    assert eff.devices[["device", "device_name", "time_source"]].values.tolist() == [[-1, "CPU", "cpu_op"]]
    inst = eff.instances
    ev = ours.events
    assert (inst["time_us"].to_numpy() == ev.loc[inst["row"], "dur"].to_numpy()).all()


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_no_op_runs_faster_than_the_device_peak(path):
    trace = load(path, progress=False)
    eff = efficiency(trace)
    inst = eff.instances.merge(eff.devices, on=["rank", "device"])
    known = inst[inst["peak_name"].notna()]
    assert len(known)
    peak = np.array([device_peak(d).tflops.get(t, np.nan) for d, t in zip(known["device_name"], known["dtype"])])
    rate = known["flops"].to_numpy() / known["time_us"].to_numpy() / 1e6
    assert np.isfinite(peak).all()
    assert (rate <= peak).all(), known[rate > peak]
    assert (eff.ops["pct_peak"].dropna() <= 100).all() and (eff.kernels["pct_peak"].dropna() <= 100).all()


def test_input_dims_column_keeps_the_shapes(ours):
    ev = ours.events
    conv = ev[ev["name"] == "aten::conv2d"].iloc[1]
    assert conv["input_dims"] == "2x6x17x19, 12x6x3x5, 12, , , , "
    assert conv["concrete_inputs"] == "|||[2, 2]|[1, 1]|[1, 1]|1"
    assert ev["input_dims"][ev["cat"] != "cpu_op"].isna().all()


# -- the rate's time, by hand, and the reports ------------------------------------------------------
def kernel_time_by_hand(path: Path, op: str) -> float:
    """Summed duration of the kernels launched inside each `op` event: the runtime calls inside
    it on its thread, their `correlation`, the kernels with that correlation."""
    with gzip.open(path) as fh:
        events = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]
    kernels = {e["args"]["correlation"]: e["dur"] for e in events
               if e.get("cat") == "kernel" and "correlation" in e.get("args", {})}
    runtime = [e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    total = 0.0
    for o in (e for e in events if e.get("name") == op and e.get("cat") == "cpu_op"):
        for r in runtime:
            if r["tid"] == o["tid"] and o["ts"] <= r["ts"] and r["ts"] + r["dur"] <= o["ts"] + o["dur"]:
                total += kernels.get(r["args"].get("correlation"), 0.0)
    return total


def test_achieved_rate_on_bert_by_hand():
    flops = sum(2 * a[0] * a[1] * b[1] for e in raw_ops(BERT, "aten::addmm")
                for _, a, b in [e["args"]["Input Dims"][:3]])
    seconds = kernel_time_by_hand(BERT, "aten::addmm") / 1e6
    row = ops_row(efficiency(load(BERT, progress=False)), "aten::addmm")
    assert row["time_us"] == pytest.approx(seconds * 1e6)
    assert row["tflops"] == pytest.approx(flops / seconds / 1e12)
    # 105 FLOP/byte is under the H100's ridge (989.5 TFLOP/s / 3.35 TB/s = 295): memory's roof
    assert row["bound"] == "memory" and row["ridge"] == pytest.approx(989.5e12 / 3350e9)


def test_reports_carry_the_roofline(tmp_path):
    from rich.console import Console

    from goodhart_prof.analysis import analyze
    from goodhart_prof.analysis.compare.comparison import compare
    from goodhart_prof.report.diff import document as diff_json
    from goodhart_prof.report.html import page as html
    from goodhart_prof.report import json_report
    from goodhart_prof.report.text import report as text
    bert, owl = analyze(load(BERT, progress=False)), analyze(load(OWL, progress=False))
    doc = json_report.to_document(bert)
    assert [o["op"] for o in doc["efficiency"]["ops"]] == list(bert.efficiency.ops["op"])
    assert doc["efficiency"]["devices"][0]["peak_name"] == "H100 SXM"
    console = Console(record=True, width=160)
    text.render(bert, console)
    out = console.export_text()
    assert "Roofline, by op type" in out and "H100 SXM" in out
    page = html.render_html(bert)
    assert 'id="efficiency"' in page and 'id="fig-roofline"' in page and "roof bf16" in page
    c = compare(owl, bert)
    addmm = c.efficiency.set_index("op").loc["aten::addmm"]
    assert addmm["tflops_b"] == pytest.approx(ops_row(bert.efficiency, "aten::addmm")["tflops"])
    assert addmm["count_a"] == len(raw_ops(OWL, "aten::addmm")) and addmm["count_b"] == 26
    assert diff_json.to_document(c)["efficiency"]


def test_the_loader_keeps_scalars_for_exactly_the_ops_with_a_formula_and_sizes_for_every_op(ours):
    from goodhart_prof.analysis.gpu.op_work import FORMULAS
    from goodhart_prof.trace.model import SHAPED_OPS
    assert set(FORMULAS) == SHAPED_OPS
    ev = ours.events
    names = set(ev.loc[ev["concrete_inputs"].notna(), "name"].astype(str))
    # and the collective calls, whose buffers size a collective (analysis/ranks/communication.py)
    assert {n for n in names if not n.startswith(("c10d::", "nccl:"))} <= SHAPED_OPS
    assert ev.loc[ev["name"] == "aten::matmul", "concrete_inputs"].isna().all()  # recorded, not kept
    # sizes: every op that recorded them (slow_tiny_ops judges ops on tiny inputs)
    ops = ev[(ev["cat"] == "cpu_op").to_numpy()]
    assert ops.loc[ops["name"] == "aten::matmul", "input_dims"].notna().all()
    assert ops["input_dims"].notna().mean() > 0.9


def test_a_job_on_a_known_and_an_unknown_gpu_reports_both(tmp_path):
    """Two ranks, an H100 (peak known) and an MI250 toy ("AMD Radeon Graphics": no part): the
    unknown rank's rows have no bound (None, not a NaN that reads as true) and the text report
    renders them with a dash."""
    import io
    import shutil

    from rich.console import Console

    from goodhart_prof.analysis import analyze
    from goodhart_prof.report.text.report import render
    for i, path in enumerate((BERT, MI250)):
        shutil.copy(path, tmp_path / f"rank{i}.pt.trace.json.gz")
    a = analyze(load(tmp_path, progress=False))
    bound = a.efficiency.ops.groupby("rank")["bound"].agg(lambda b: {type(v).__name__ for v in b})
    assert bound.to_dict() == {0: {"str"}, 1: {"NoneType"}}
    out = io.StringIO()
    render(a, Console(file=out, width=200, color_system=None))
    assert "peak unknown: no percentages" in out.getvalue() and "peak H100 SXM" in out.getvalue()


def test_ops_summed_across_the_devices_of_one_model():
    from goodhart_prof.analysis.gpu.efficiency import across_devices
    from tests.support.analyses import analysis_of

    eff = analysis_of("param/dlrm_8rank").efficiency
    across = across_devices(eff)
    per = eff.ops.groupby("op")
    assert across["op"].tolist() == ["aten::mm", "aten::addmm", "aten::bmm"]  # most time first
    assert set(across["model"]) == {"V100 SXM2"} and set(across["devices"]) == {8}
    for r in across.itertuples():
        own = per.get_group(r.op)
        assert r.count == own["count"].sum() and r.time_us == own["time_us"].sum()
        assert r.tflops == pytest.approx(own["flops"].sum() / own["time_us"].sum() / 1e6)  # the sum's rate
        assert (r.tflops_low, r.tflops_high) == (own["tflops"].min(), own["tflops"].max())
        assert r.bound == "memory" and 0 < r.pct_roof < 100
    one = across_devices(analysis_of("hta/mi250_minitoy_rocm.json.gz").efficiency)
    assert one.empty  # one device: nothing to sum over


def test_devices_grouped_by_kind():
    from goodhart_prof.analysis.gpu.efficiency import device_kinds
    from tests.support.analyses import analysis_of

    kinds = device_kinds(analysis_of("param/dlrm_8rank").efficiency.devices)
    assert len(kinds) == 1
    first, where = kinds[0]
    assert first.peak_name == "V100 SXM2" and where == [(r, r) for r in range(8)]
