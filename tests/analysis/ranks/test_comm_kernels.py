"""The communication kernels of a trace (analysis/ranks/comm_kernels.py) on hand-made events: the
kind from the record_param_comms args, from the enclosing c10d op, from the kernel's own name; the
message size from the args (elements x dtype size) and the recorded group."""
from __future__ import annotations

import numpy as np

from goodhart_prof.analysis.ranks.comm_kernels import comm_kernels, has_communication
from tests.support.events import kernel, load_events, op, rt

ARGS = {"Collective name": "allreduce", "In msg nelems": 1000, "Out msg nelems": 1000, "Group size": 8,
        "dtype": "Float", "Process Group Name": "0"}


def test_kinds_sizes_and_groups(tmp_path):
    trace = load_events(tmp_path, [
        op("record_param_comms", 0, 50, **ARGS), rt("cudaLaunchKernel", 10, 5, 1),
        kernel("ncclKernel_AllReduce_RING_LL_Sum_float", 20, 100, 1),
        op("c10d::allgather_", 200, 50), rt("cudaLaunchKernel", 210, 5, 2),
        kernel("ncclDevKernel_AllGather_RING_LL", 220, 30, 2),
        rt("cudaLaunchKernel", 300, 5, 3), kernel("ncclKernel_SendRecv", 320, 10, 3)])
    assert has_communication(trace)
    k = comm_kernels(trace)
    assert k["kind"].tolist() == ["all_reduce", "all_gather", "send_recv"]
    assert k["dur"].tolist() == [100.0, 30.0, 10.0]
    # 1000 Float elements: 4000 bytes, from the args; the others record no size
    np.testing.assert_array_equal(k["bytes"].to_numpy(), [4000.0, np.nan, np.nan])
    assert k["size_source"].iloc[0] == "args" and k["size_source"].iloc[1:].isna().all()
    np.testing.assert_array_equal(k["group_size"].to_numpy(), [8.0, np.nan, np.nan])
    assert k["group_source"].iloc[0] == "args" and k["group_source"].iloc[1:].isna().all()
    assert k["launch_ts"].tolist() == [10.0, 210.0, 300.0]
    # the launch's host node: inside the two ops; the third launch has no op around it
    assert (k["launch_node"].to_numpy()[:2] >= 0).all() and k["launch_node"].iloc[2] == -1


def test_no_communication(tmp_path):
    trace = load_events(tmp_path, [rt("cudaLaunchKernel", 10, 5, 1), kernel("gemm", 20, 100, 1)])
    assert not has_communication(trace)
