"""Every sync point on the real traces recorded by others (tests/data: copies of ../shared/traces),
explained: counts per kind and where they come from, read off each trace."""
from __future__ import annotations


import pytest

from goodhart_prof.analysis import analyze
from goodhart_prof.trace.load import load
from tests.support.paths import DATA

# Copies of the real traces of ../shared/traces (tests/data/SOURCES.md), same relative paths.
SHARED = DATA

# trace -> ({kind: count}, {kind: a substring of its top site}, why). The sources of these traces
# are not here: sites name the function and its frame line, never a line inside it.
EXPECTED = {
    "tracelens/h100_bert_small_inference.json.gz": (
        {"is_nonzero": 1, "device_sync": 2},
        {"is_nonzero": "run_on_input (moca/library/model_hub/huggingface/model/adapters/text_base_model.py, frame line 28)", "device_sync": "run_torch_profiler (moca/library/profiling/profile.py, frame line 34)"},
        "one `if tensor:` in the HF adapter's run_on_input; the profiling harness synchronizes the "
        "device around the profiled region twice"),
    "tracelens/h100_owlv2_inference.json.gz": (
        {"memcpy_dtoh": 55, "memcpy_htod_pageable": 25, "device_sync": 2},
        {"memcpy_dtoh": "run_on_input (moca/library/model_hub/huggingface/model/adapters/pipeline/model.py, frame line 40)", "memcpy_htod_pageable": "pipeline/model.py, frame line 40"},
        "the HF pipeline copies its inputs in from pageable memory and its outputs back per call"),
    "tracelens/mi300_qwen_inference.json.gz": (
        {"is_nonzero": 1, "device_sync": 2},
        {"is_nonzero": "run_on_input", "device_sync": "run_torch_profiler"},
        "as bert-small: the same harness on an MI300 (hipDeviceSynchronize)"),
    "tracelens/mi300_resnet_act_checkpoint_train.json.gz": (
        {"device_sync": 1}, {"device_sync": "ddp_worker (train_ddp.py, frame line 161)"},
        "the training script synchronizes once, at the end of the profiled steps"),
    "tracelens/sglang_qwen3_8b_prefilldecode.json.gz": (
        {"item": 3, "sync_memcpy": 2},
        {"item": "aiter_backend.py", "sync_memcpy": "sglang/srt/model_executor/forward_batch_info.py, frame line 443)"},
        "SGLang's attention backend reads batch metadata with .item(); building a batch copies "
        "with a blocking hipMemcpy"),
    "tracelens/vllm_decode_full_graph.json.gz": (
        {"event_sync": 1}, {"event_sync": "synchronize_input_prep (vllm/v1/worker/gpu_model_runner.py, frame line 3087)"},
        "vLLM waits on an event before preparing the next inputs; the graph replay itself syncs nothing"),
    "hta/mi250_minitoy_rocm.json.gz": (
        {"device_sync": 1, "sync_memcpy": 2},
        {"sync_memcpy": "aten::to > aten::_to_copy > aten::copy_ > hipMemcpyWithStream"},
        "two blocking host->device .to() copies on ROCm (hipMemcpyWithStream) and one device sync"),
    "hta/v100_ddp_rank1.json.gz": (
        {"device_sync": 1}, {"device_sync": "cudaDeviceSynchronize"},
        "one cudaDeviceSynchronize at the end of the profiled window"),
    "kineto/resnet50_v100_2021.pt.trace.json.gz": (
        {"memcpy_htod_pageable": 12, "device_sync": 1},
        {"memcpy_htod_pageable": "aten::to > aten::copy_ > cudaMemcpyAsync"},
        "each of 6 iterations copies images and labels from pageable memory (num_workers=0 sample)"),
    "param/dlrm_8rank": (
        {"memcpy_dtoh": 16, "memcpy_htod_pageable": 64, "device_sync": 8},
        {"memcpy_htod_pageable": "## sparse_data_dist ##", "memcpy_dtoh": "SplitsAllToAllAwaitable"},
        "8 ranks: torchrec's input dist moves split sizes host<->device each step (pageable), "
        "backward index_put moves indices, and each rank synchronizes once"),
    "hta/sampled_128rank": (
        {"item": 7, "memcpy_dtoh": 9, "memcpy_htod_pageable": 32},
        {"item": "## sdd_preprocess_splits ## > forward > aten::item",
         "memcpy_htod_pageable": "## data_load ##"},
        "torchrec reads all-to-all split sizes back (.item(), DtoH) and loads batches from pageable memory"),
}


@pytest.mark.parametrize("rel", sorted(EXPECTED))
def test_sync_points_of_real_traces(rel):
    path = SHARED / rel
    if not path.exists():
        pytest.fail(f"{path} missing from tests/data")
    counts, sites, _why = EXPECTED[rel]
    a = analyze(load(path, progress=False))
    assert {k: v for k, v in a.syncs.by_kind.items() if v} == counts
    assert a.reads.total == 0  # every rank here has a GPU
    for kind, where in sites.items():
        top = a.syncs.sites[a.syncs.sites["kind"] == kind].iloc[0]["site"]
        assert where in top, (kind, top)
