"""Utilization rules (analysis/rules/utilization.py): a launch-bound GPU of tiny kernels, a GPU
idle while the host is somewhere (named, with its fix), and scatter/gather kernels dominating;
hand-made traces whose figures are worked by hand."""
from __future__ import annotations

from goodhart_prof.analysis import analyze
from goodhart_prof.analysis.rules import BY_ID
from tests.support.events import ann, kernel, load_events, rt

LAUNCH_MEDIAN_US = BY_ID["tiny_batch"].limit("median_kernel_us")
SCATTER_SHARE = BY_ID["dominant_scatter_gather"].limit("share")
DATALOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def rules(trace) -> dict[str, object]:
    return {f.rule: f for f in analyze(trace).findings}


def test_tiny_batch_launch_bound_and_dominant_scatter_gather(tmp_path):
    events, t = [ann("ProfilerStep#1", 0, 200_000)], 10.0
    for i in range(300):  # tiny kernels with launch gaps: GPU mostly idle
        name = "void at::native::index_elementwise_kernel<128, 4>" if i % 2 else "elementwise_kernel"
        events += [rt("cudaLaunchKernel", t, 5, i), kernel(name, t + 6, 3, i)]
        t += 20
    found = rules(load_events(tmp_path, events))
    assert found["tiny_batch"].evidence["median_kernel_us"] < LAUNCH_MEDIAN_US
    assert found["tiny_batch"].evidence["utilization"] < 0.5
    assert found["dominant_scatter_gather"].evidence["share"] >= SCATTER_SHARE
    assert "low_utilization" in found


def test_a_gpu_waiting_for_the_data_loader(tmp_path):
    # one 10 ms step: ten 90 us kernels, each after the host spent 890 us in the DataLoader
    events = [ann("ProfilerStep#1", 0, 10_000)]
    for i in range(10):
        t = 1000 * i
        events += [ann(DATALOADER, t + 5, 890), rt("cudaLaunchKernel", t + 900, 5, i), kernel("gemm", t + 910, 90, i)]
    found = rules(load_events(tmp_path, events))
    f = found["low_utilization"]
    # busy 10 x 90 = 900 of 10,000 us; idle 9,100, of which 10 x 890 = 8,900 in the DataLoader
    assert f.title == "GPU idle 91% of its steps: the host is in DataLoader.__next__ (98% of idle time)"
    assert (f.evidence["utilization"], f.evidence["idle_us"]) == (0.09, 9100.0)
    assert [(c["cause"], c["idle_us"]) for c in f.evidence["idle_causes"]] == [
        (DATALOADER, 8900.0), ("(host idle / not traced)", 200.0)]
    assert f.est_saving_us == 8900.0
    assert "num_workers" in f.fix
    assert "tiny_batch" not in found  # 90 us kernels, and the gaps are long: not launch-bound


def test_a_busy_gpu_is_not_low(tmp_path):
    events = [ann("ProfilerStep#1", 0, 10_000)]
    for i in range(10):
        t = 1000 * i
        events += [rt("cudaLaunchKernel", t, 5, i), kernel("gemm", t + 10, 980, i)]
    found = rules(load_events(tmp_path, events))
    assert not {"low_utilization", "tiny_batch", "dominant_scatter_gather"} & set(found)
