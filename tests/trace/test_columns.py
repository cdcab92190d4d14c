"""goodhart_prof/trace/columns.py: the table columns built from decoded values: pid/tid ids
(`int_id`, `text_id`, `id_column`), ints (`parse_int`, `int_column`), finite numbers, interned
names (`interned`, `categorical_of`, `recode`), GPU device/stream ids and streams named in tids."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from goodhart_prof.trace.columns import (BAD_ID, categorical_of, gpu_id_column, id_column, int_column,
                                         int_id, interned, is_number, parse_int, recode,
                                         stream_from_tid, text_id)


def _rows(attr, values):
    return [SimpleNamespace(**{attr: v}) for v in values]


def test_int_id_keeps_ints_reads_numeric_text_and_names_the_rest():
    names: dict = {}
    assert [int_id(v, names) for v in (5, "123", " 12 ", None)] == [5, 123, 12, -1]
    spans = int_id("Spans", names)
    assert spans == text_id("Spans") and names == {"Spans": spans}
    assert -2 - 2**48 < spans <= -2 and text_id("Spans") != text_id("spans")
    assert int_id(2**63, {}) == text_id(str(2**63))  # beyond int64: a name of its own
    assert int_id(2.0, {}) == text_id("2.0")  # a float id is not the int it equals


@pytest.mark.parametrize("value, expected", [
    (7, 7), ("12", 12), (3.0, 3), (3.5, -1), (float("nan"), -1), (float("inf"), -1),
    (2**63, -1), ("-3", -1), ("\u00b2", -1), ("9" * 19, -1), (None, -1), (True, -1)])
def test_parse_int(value, expected):
    assert parse_int(value) == expected


def test_int_column_cleans_only_the_odd_values():
    assert int_column(_rows("ts", [1, 2, 3]), "ts").tolist() == [1, 2, 3]
    column = int_column(_rows("ts", [1, "2", None, 2**70, 4.0]), "ts")
    assert column.dtype == np.int64 and column.tolist() == [1, 2, -1, -1, 4]


def test_is_number_is_finite_ints_and_floats_only():
    assert [is_number(v) for v in (1, -2.5, 0.0)] == [True, True, True]
    assert [is_number(v) for v in (float("nan"), float("inf"), 10**400, "1", None, True)] == [False] * 6


def test_interned_names_keep_first_appearance_order():
    names = interned(iter(["b", "a", "b", "c", "a"]), 5)
    assert list(names.categories) == ["b", "a", "c"]
    assert names.codes.tolist() == [0, 1, 0, 2, 1] and list(names) == ["b", "a", "b", "c", "a"]


def test_categorical_of_merges_values_of_the_same_text():
    merged = categorical_of([7, "7", None], np.array([0, 1, 2, 0]))
    assert list(merged.categories) == ["", "7"] and list(merged) == ["7", "7", "", "7"]
    plain = categorical_of(["x", 3], np.array([1, 0]))
    assert list(plain.categories) == ["x", "3"] and list(plain) == ["3", "x"]


def test_recode_makes_dense_codes_in_order_of_appearance():
    dense, original = recode(np.array([5, 3, 5, 9, 3]))
    assert dense.tolist() == [0, 1, 0, 2, 1] and original.tolist() == [5, 3, 9]
    dense, original = recode(np.array([], dtype=np.int64))
    assert dense.dtype == np.int32 and len(dense) == 0 and len(original) == 0


@pytest.mark.parametrize("pids", [
    [1, 2, 1 << 40, "Spans", "Spans"],  # Kineto: ints, then a tail of named ids
    [1, "7", 2, "Spans"],  # a numeric string inside the run
    [1, 2.0, True, "x"],  # a float and a bool: names, never merged with 2 and 1
    [None, 4, "x", "x"],
])
def test_id_column_agrees_with_int_id_row_by_row(pids):
    names: dict = {}
    expected = [int_id(p, {}) for p in pids]
    for int_or_str in (False, True):
        if int_or_str and any(isinstance(p, float) for p in pids):
            continue  # the decoder promises only ints, strings or None on that path
        assert id_column(_rows("pid", pids), "pid", names, int_or_str).tolist() == expected


def test_gpu_ids_at_full_width_with_the_malformed_marked():
    values = [0, 3, None, "7", -1, 1.5, 2**63, "0x1a", 2.0, 2**32]
    ids, bad = gpu_id_column(_rows("device", values), "device")
    assert ids.tolist() == [0, 3, -1, 7, BAD_ID, BAD_ID, BAD_ID, -1, 2, 2**32]
    assert bad.tolist() == [False, False, False, False, True, True, True, False, False, False]


def test_stream_from_tid():
    assert [stream_from_tid(t) for t in (7, "stream 12", "Stream  3 copy", "cpu thread", 2**64)] == \
        [7, 12, 3, -1, -1]
