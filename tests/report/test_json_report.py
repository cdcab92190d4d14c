"""report/json_report.py: the `goodhart-prof/analysis/v1` document. Plain JSON values (numpy
scalars as Python, NaN and inf as null), table rows as records, and the document of a hand-made
trace: two 100 us kernels and a 2 us copy on GPU 0 between 110 and 632 us, one `.item()` read;
`top` cuts the kernel list."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from goodhart_prof.analysis import analyze
from goodhart_prof.report.json_report import SCHEMA, kernel_sequences_json, plain, records, to_document
from tests.support.analyses import analysis_of
from tests.support.events import cuda_item, launch, load_events


def test_plain_makes_values_json_safe():
    value = {1: np.int64(3), "x": [np.float32(0.5), float("nan"), np.inf], "b": np.bool_(True),
             "a": np.array([1, 2]), "na": pd.NA, "t": (np.float64(2.0),)}
    assert plain(value) == {"1": 3, "x": [0.5, None, None], "b": True, "a": [1, 2], "na": None, "t": [2.0]}
    assert type(plain(np.int64(3))) is int and type(plain(np.bool_(False))) is bool


def test_records_keep_the_asked_columns_that_exist():
    frame = pd.DataFrame({"name": ["a", "b"], "total_us": [1.5, np.nan], "extra": [1, 2]})
    assert records(frame, ["name", "total_us", "missing"]) == [{"name": "a", "total_us": 1.5},
                                                                {"name": "b", "total_us": None}]
    assert records(frame.iloc[:0], ["name"]) == []


@pytest.fixture
def analysis(tmp_path):
    events = launch("k1", 100, 1, "aten::mm") + launch("k2", 300, 2) + cuda_item(600, 10)
    return analyze(load_events(tmp_path, events))


def test_document_of_a_hand_made_trace(analysis):
    doc = to_document(analysis)
    json.dumps(doc, allow_nan=False)
    assert doc["schema"] == SCHEMA == "goodhart-prof/analysis/v1"
    assert (doc["trace"]["ranks"], doc["trace"]["devices"], doc["trace"]["events"]) == ([0], ["rank0/gpu0"], 11)
    gpu = doc["gpu"]["rank0/gpu0"]
    # busy: 100 + 100 + 2 us; span: first start 110 to last end 630 + 2
    assert (gpu["busy_us"], gpu["span_us"], gpu["idle_us"], gpu["kernel_us"]) == (202.0, 522.0, 320.0, 200.0)
    assert gpu["utilization"] == pytest.approx(202 / 522) and gpu["step_utilization"] is None
    assert [(k["name"], k["count"], k["total_us"]) for k in doc["kernels"]] == [
        ("k1", 1, 100.0), ("k2", 1, 100.0), ("Memcpy DtoH (Device -> Pageable)", 1, 2.0)]
    assert doc["sync_points"]["total"] == 1 and doc["sync_points"]["by_kind"]["item"] == 1
    assert doc["sync_points"]["sites"][0]["site"] == "aten::item"
    assert doc["communication"] == [] and doc["ranks"]["ranks"] == [] and doc["ranks"]["collectives"] == []


def test_top_cuts_the_kernel_list(analysis):
    assert [k["name"] for k in to_document(analysis, top=1)["kernels"]] == ["k1"]


def test_kernel_sequences_document():
    """`kernel_sequences` on TraceLens's OWLv2 trace: per position its kernel, op, category and
    library; the fusion candidate OWLv2's SiLU makes (mul, sigmoid, mul: 180 times)."""
    ks = analysis_of("tracelens/h100_owlv2_inference.json.gz").kernel_sequences
    doc = plain(kernel_sequences_json(ks))
    json.dumps(doc, allow_nan=False)
    assert (doc["kernels"], doc["windows"], doc["note"]) == (4330, 1, None)
    assert len(doc["sequences"]) == 10 and sum(s["share"] for s in doc["sequences"]) <= 1.0
    silu = doc["fusion_candidates"][0]
    assert [(k["op"], k["category"], k["library"]) for k in silu["kernels"]] == [
        ("aten::mul", "elementwise", "aten"), ("aten::sigmoid", "elementwise", "aten"),
        ("aten::mul", "elementwise", "aten")]
    assert (silu["length"], silu["count"], silu["per_iteration"], silu["fusible"], silu["launches_saved"]) == (
        3, 180, 180.0, True, 360)
    assert silu["op_chain"] == "aten::mul > aten::sigmoid > aten::mul" and silu["bytes_saved"] > 0
