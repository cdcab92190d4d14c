"""The dominant_kernel rule (rules/dominance.py) on hand-made traces and on the shared traces."""
from __future__ import annotations


import pytest

from goodhart_prof.analysis import analyze
from goodhart_prof.trace.load import load
from tests.support.events import X, ann, kernel, load_events, op, rt
from tests.support.events import launch
from tests.support.paths import DATA

# Copies of the real traces of ../shared/traces (tests/data/SOURCES.md), same relative paths.
SHARED = DATA


def dominant(trace):
    found = [f for f in analyze(trace).findings if f.rule == "dominant_kernel"]
    return found[0] if found else None


def test_dominant_softmax_in_eager_attention_points_to_sdpa(tmp_path):
    events = [ann("ProfilerStep#1", 0, 100_000)]
    corr = 0
    for i in range(4):
        base = 1000 + i * 2000
        for name, op_name, dur in (("volta_sgemm_128x64_nn_bmm", "aten::bmm", 100),
                                   ("void cunn_SoftMaxForward<float>(float*)", "aten::_softmax", 600),
                                   ("void at::native::vectorized_elementwise_kernel<4>(int)",
                                    "aten::mul", 100)):
            corr += 1
            events += [op(op_name, base, 8), rt("cudaLaunchKernel", base + 1, 5, corr),
                       kernel(name, base + 10, dur, corr)]
            base += 700
    f = dominant(load_events(tmp_path, events))
    assert f is not None and f.evidence["faster_path"] == "sdpa"
    assert f.evidence["launching_ops"][0]["op"] == "aten::_softmax"
    assert f.evidence["share"] == pytest.approx(0.75)
    assert f.evidence["category"] == "reduction" and f.evidence["library"] == "aten"
    assert f.evidence["count"] == 4 and f.evidence["median_us"] == 600
    assert "scaled_dot_product_attention" in f.fix


def test_dominant_fp32_gemm_points_to_bf16(tmp_path):
    events = [ann("ProfilerStep#1", 0, 100_000)]
    for i in range(3):
        events += launch("volta_sgemm_128x64_nn", 1000 + 1000 * i, 2 * i + 1, "aten::addmm")
        events += launch("void at::native::vectorized_elementwise_kernel<4>(int)",
                          1500 + 1000 * i, 2 * i + 2, "aten::relu")
    f = dominant(load_events(tmp_path, events))
    assert f.evidence["faster_path"] == "bf16_autocast" and "autocast" in f.fix
    assert f.evidence["launching_ops"] == [{"op": "aten::addmm", "share": 0.5, "count": 3}]


def test_thousands_of_tiny_gemms_point_to_batching(tmp_path):
    events = [ann("ProfilerStep#1", 0, 10_000_000)]
    for i in range(1200):
        ts = 1000 + 100 * i
        events += [op("aten::mm", ts, 8), rt("cudaLaunchKernel", ts + 1, 5, i + 1),
                   kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64", ts + 10, 5,
                          i + 1)]
    f = dominant(load_events(tmp_path, events))
    assert f.evidence["faster_path"] == "batch_gemms" and "bmm" in f.fix


TRANSPOSE = "void transposeBlock_kernel<__nv_bfloat16, __nv_bfloat16, float, 32u, 8u>(int)"
NCHW_TO_NHWC = "void cudnn::engines_precompiled::nchwToNhwcKernel<__nv_bfloat16>(int)"
FPROP = "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize256x64x32"


def _conv_step(tmp_path, transpose_op):
    """Per convolution: cuDNN's transpose (300 us, launched by `transpose_op`), an NCHW->NHWC
    transform (50 us, by the convolution) and the convolution (200 us); one unlinked transpose
    (launched before tracing began) and one a permute launched (100 us each)."""
    events = [ann("ProfilerStep#1", 0, 100_000)]
    corr = 0
    for i in range(3):
        for name, op_name in ((TRANSPOSE, transpose_op), (NCHW_TO_NHWC, "aten::cudnn_convolution"),
                              (FPROP, "aten::cudnn_convolution")):
            corr += 1
            events += launch(name, 1000 + 500 * corr, corr, op_name)
    dur = {TRANSPOSE: 300, NCHW_TO_NHWC: 50, FPROP: 200}
    events = [dict(e, dur=dur[e["name"]]) if e.get("cat") == "kernel" else e for e in events]
    events.append(kernel(TRANSPOSE, 10, 100, 900))  # no launch in the trace
    corr += 1
    events += launch(TRANSPOSE, 1000 + 500 * corr, corr, "aten::permute")  # 100 us, not a conv's
    return load_events(tmp_path, events)


def test_layout_transposes_around_convolutions_point_to_channels_last(tmp_path):
    f = dominant(_conv_step(tmp_path, "aten::convolution_backward"))
    assert f.evidence["kernel"] == TRANSPOSE and f.evidence["library"] == "cudnn"
    assert f.evidence["faster_path"] == "channels_last" and f.severity == "medium"
    # all layout transposes of the convolutions (3 x 300 + 3 x 50 + the unlinked 100 us), not the
    # permute's, over all GPU time (3 x 550 + 2 x 100 us)
    assert f.evidence["layout_transposes"] == {"share": round(1150 / 1850, 4), "count": 7,
                                               "kernels": 2}
    assert "channels_last" in f.fix and "model.to(memory_format=torch.channels_last)" in f.fix
    assert "cuDNN converts the NCHW tensors to NHWC" in f.fix and "62.2% of GPU time" in f.fix
    assert f.est_saving_us is None and "not in the trace" in f.saving_note


def test_a_transpose_no_convolution_launched_is_not_a_layout_cause(tmp_path):
    f = dominant(_conv_step(tmp_path, "aten::copy_"))
    assert f.evidence["kernel"] == TRANSPOSE and f.evidence["faster_path"] is None
    assert "layout_transposes" not in f.evidence and "channels_last" not in f.fix


def test_an_op_can_dominate_without_one_kernel_doing_so(tmp_path):
    events = [ann("ProfilerStep#1", 0, 100_000)]
    names = [f"Cijk_Alik_Bljk_BBS_BH_MT{i}" for i in range(4)]
    corr = 0
    for i, name in enumerate(names * 2):
        corr += 1
        events += launch(name, 1000 + 500 * corr, corr, "aten::mm")
    for j in range(4):
        corr += 1
        events += launch(f"void at::native::elementwise_kernel<{j}>(int)", 1000 + 500 * corr, corr,
                          "aten::add")
    f = dominant(load_events(tmp_path, events))
    assert f.evidence["subject"] == "op" and f.evidence["op"] == "aten::mm"
    assert f.evidence["share"] == pytest.approx(8 / 12, abs=1e-4) and f.evidence["kernel_share"] < 0.25
    assert f.severity == "low" and f.evidence["faster_path"] is None


def test_spread_work_and_collectives_do_not_fire(tmp_path):
    events = [ann("ProfilerStep#1", 0, 100_000)]
    corr = 0
    for j in range(5):
        corr += 1
        events += launch(f"void at::native::elementwise_kernel<{j}>(int)", 500 * corr, corr,
                          f"aten::op{j}")
    corr += 1
    events += [rt("cudaLaunchKernel", 500 * corr, 5, corr),
               X("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(x)", "kernel", 500 * corr + 10, 5000,
                 pid=0, tid=8, device=0, stream=8, correlation=corr)]
    assert dominant(load_events(tmp_path, events)) is None


# On the shared traces: eager attention's softmax (OWLv2: 46%, fix SDPA); the MoE GEMM of a vLLM
# decode replayed from a CUDA graph (35%, no op link: named only); not on the Qwen inference on
# MI300 (its largest kernel is 21%, its GEMMs spread over shapes) nor where collectives dominate.
SHARED_DOMINANT = {
    "tracelens/h100_owlv2_inference.json.gz": ("cunn_SoftMaxForward", "aten::_softmax", "sdpa"),
    "tracelens/vllm_decode_full_graph.json.gz": ("_matmul_ogs_NNT_bf16xbf16xmxfp4_16x128x256x1",
                                                 None, None),
    "tracelens/mi300_qwen_inference.json.gz": None,
    "tracelens/mi300_resnet_act_checkpoint_train.json.gz": None,
    "hta/v100_ddp_rank1.json.gz": None,
    "param/dlrm_8rank": None,
}


@pytest.mark.parametrize("key", sorted(SHARED_DOMINANT))
def test_dominant_kernel_on_shared_traces(key):
    path = SHARED / key
    if not path.exists():
        pytest.skip(f"{path} missing")
    f = dominant(load(path, progress=False))
    want = SHARED_DOMINANT[key]
    if want is None:
        assert f is None, f.title
        return
    kernel_part, op_name, path_name = want
    assert f is not None and kernel_part in f.evidence["kernel"]
    launchers = [o["op"] for o in f.evidence["launching_ops"]]
    assert (launchers[:1] == [op_name]) if op_name else launchers == []
    assert f.evidence["faster_path"] == path_name
