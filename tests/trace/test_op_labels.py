"""goodhart_prof/trace/op_labels.py: an op's args as interned text labels. `Input Dims`, `Input
type` and `Concrete Inputs` read into text (odd entries blank or `?`), a collective's six fields
joined (odd values blank), which rows may carry them (`comm_rows`, `comm_calls`, `is_shaped`),
and each distinct raw value labelled once, the same from raw bytes or from interned codes."""
from __future__ import annotations

import msgspec
import numpy as np
import pandas as pd
import pytest

from goodhart_prof.trace.decode import Args
from goodhart_prof.trace.op_labels import (INPUT_DIMS, comm_args, comm_args_of, comm_calls, comm_rows,
                                           concrete_label, dims_label, is_shaped, label_codes, raw_labels,
                                           type_label)


@pytest.mark.parametrize("raw, label", [
    (b"[[141, 512], [512, 512], [], []]", "141x512, 512x512, , "),
    (b"[[2, 3], [[1], [2]], 5, [-1]]", "2x3, ?, ?, ?"),  # a tensor list, a number, a negative size
    (b"[]", ""), (b'"2x3"', None), (b"[1,", None), (b"", None)])
def test_dims_label(raw, label):
    assert dims_label(raw) == label


@pytest.mark.parametrize("raw, label", [
    (b'["c10::BFloat16", "c10::BFloat16", "", "Scalar"]', "c10::BFloat16, c10::BFloat16, , Scalar"),
    (b'["float", 3, null]', "float, , "), (b'"float"', "float"), (b"{}", None), (b"", None)])
def test_type_label(raw, label):
    assert type_label(raw) == label


def test_concrete_label():
    assert concrete_label(b'["", "", "", "[2, 2]", "1", "False"]') == "|||[2, 2]|1|False"
    assert concrete_label(b'["a|b", 4, "7"]') == "||7"  # the separator inside, a number: blank
    assert concrete_label(b'"1"') is None and concrete_label(b"") is None


def test_comm_args_join_six_fields_with_odd_values_blank():
    fields = [["allreduce", "all|gather", None], [2873320, 2.0, -1], [2873320, 2.5, True],
              [8, 8, "8"], ["BFloat16", None, None], ["0", "0", None]]
    codes, labels = comm_args_of(5, np.array([1, 3, 4]), fields)
    assert list(labels) == ["allreduce|2873320|2873320|8|BFloat16|0", "|2||8||0"]
    assert codes.tolist() == [-1, 0, -1, 1, -1]  # row 4: every field unusable, so none
    codes, labels = comm_args([Args(), Args(collective="broadcast", group_size=4)], np.array([1]))
    assert codes.tolist() == [-1, 0] and list(labels) == ["broadcast|||4||"]
    codes, labels = comm_args([Args()], np.array([], dtype=np.int64))
    assert codes.tolist() == [-1] and len(labels) == 0


def test_the_rows_that_may_carry_collective_args():
    name = pd.Categorical(["record_param_comms", "ncclDevKernel_AllReduce", "record_param_comms",
                           "nccl:all_reduce", "c10d::allreduce_", "aten::mm", "RCCL_kernel"])
    cat = pd.Categorical(["cpu_op", "kernel", "user_annotation", "user_annotation", "cpu_op", "cpu_op", "kernel"])
    assert comm_rows(name, cat).tolist() == [0, 1, 6]
    assert comm_calls(name, cat).tolist() == [3, 4]
    assert is_shaped(pd.Categorical(["aten::mm", "aten::add", "aten::conv2d"]), np.array([0, 1, 2])).tolist() == \
        [True, False, True]


def test_each_distinct_raw_value_labelled_once_from_bytes_or_codes():
    raws = [b"[[2, 3]]", b"[[4]]", b"[[2, 3]]", b"not json"]
    op_args = [Args(input_dims=msgspec.Raw(r)) for r in raws] + [Args()]  # the last has no dims
    rows = np.array([0, 2, 3, 5, 6])
    codes, labels = raw_labels(op_args, rows, 8, INPUT_DIMS, dims_label)
    assert list(labels) == ["2x3", "4"] and codes.tolist() == [0, -1, 1, 0, -1, -1, -1, -1]
    interned = np.array([0, 1, 0, 2, -1])  # the native decoder's: codes into the distinct raw values
    codes2, labels2 = label_codes(interned, rows, 8, [raws[0], raws[1], raws[3]], dims_label)
    assert codes2.tolist() == codes.tolist() and list(labels2) == list(labels)
