"""The no_amp advice follows the GPUs' compute capability: no tensor cores below 7.0 (fp16 gains
2x only on GP100's 6.0/6.2, through packed half2 math), fp16 tensor cores and no bf16 on 7.x,
bf16 and fp16 tensor cores from 8.0."""
from __future__ import annotations


from goodhart_prof.analysis import analyze
from goodhart_prof.analysis.rules.precision import amp_advice
from goodhart_prof.trace.load import load
from tests.support.paths import DATA

V100 = DATA / "hta" / "v100_ddp_rank1.json.gz"


def test_pascal_has_no_tensor_cores_and_no_bf16():
    for cc in ((6, 0), (6, 2)):
        text = amp_advice([cc])
        assert f"compute capability {cc[0]}.{cc[1]}" in text
        assert "no tensor cores" in text and "start at compute capability 7.0" in text
        assert "no bf16 (8.0 or newer)" in text and "float16" in text and "GradScaler" in text
        assert "twice the fp32 rate (packed half2)" in text and "bfloat16" not in text
    slow = amp_advice([(6, 1)])  # GP102/GP104: fp16 at a fraction of fp32
    assert "no tensor cores" in slow and "Autocast would not help" in slow and "float16" not in slow
    assert "no tensor cores" in amp_advice([(5, 2)])


def test_volta_turing_fp16_tensor_cores_no_bf16():
    for cc in ((7, 0), (7, 5)):
        text = amp_advice([cc])
        assert f"({'compute capability'} {cc[0]}.{cc[1]}) have fp16 tensor cores" in text
        assert "dtype=torch.float16" in text and "GradScaler" in text
        assert "bfloat16" not in text and "bf16 needs compute capability 8.0" in text


def test_ampere_and_newer_bf16():
    for cc in ((8, 0), (8, 6), (9, 0), (9, 4)):
        text = amp_advice([cc])
        assert "dtype=torch.bfloat16" in text and "have bf16 and fp16 tensor cores" in text
        assert "GradScaler" not in text and "no tensor cores" not in text
    assert "compute capability 7.0" in amp_advice([(8, 0), (7, 0)])  # the oldest GPU decides
    assert "bfloat16" in amp_advice([]) and "V100" in amp_advice([])  # capability not recorded


def test_no_amp_on_a_gp100_trace_says_no_tensor_cores():
    trace = load(V100, progress=False)
    for props in trace.device_properties.values():  # the same run as if on a GP100 (6.0)
        for p in props:
            p.update(computeMajor=6, computeMinor=0, name="Tesla P100-SXM2-16GB")
    f = {f.rule: f for f in analyze(trace).findings}["no_amp"]
    assert "compute capability 6.0" in f.fix and "no tensor cores" in f.fix
    assert "have fp16 tensor cores" not in f.fix
    v100 = {f.rule: f for f in analyze(load(V100, progress=False)).findings}["no_amp"]
    assert "(compute capability 7.0) have fp16 tensor cores" in v100.fix


def _relabelled(major: int, minor: int, name: str):
    trace = load(V100, progress=False)
    for props in trace.device_properties.values():
        for p in props:
            p.update(computeMajor=major, computeMinor=minor, name=name)
    return {f.rule: f for f in analyze(trace).findings}


def test_no_amp_does_not_fire_where_fp16_is_no_faster():
    """6.1 (GP102/GP104) and below 6.0 run fp16 no faster than fp32: no saving to claim. 6.0 (GP100)
    gains 2x through packed half2 math: the rule still fires with half the fp32 time."""
    from goodhart_prof.analysis.rules.precision import fp16_gains
    assert not fp16_gains([(6, 1)]) and not fp16_gains([(5, 2)]) and not fp16_gains([(8, 0), (6, 1)])
    assert fp16_gains([(6, 0)]) and fp16_gains([(6, 2)]) and fp16_gains([(7, 0)]) and fp16_gains([])
    for cc, name in (((6, 1), "Tesla P40"), ((5, 2), "Tesla M60")):
        assert "no_amp" not in _relabelled(*cc, name)
    p100 = _relabelled(6, 0, "Tesla P100-SXM2-16GB")["no_amp"]
    v100 = {f.rule: f for f in analyze(load(V100, progress=False)).findings}["no_amp"]
    assert p100.est_saving_us is not None
    assert 0 < p100.est_saving_us < p100.evidence["full_precision_us"]
    assert p100.est_saving_us == v100.est_saving_us  # the same kernels: half their fp32 time
