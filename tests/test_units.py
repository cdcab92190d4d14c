"""units.py: durations, bytes, device names and element sizes as every layer writes them."""
from __future__ import annotations

import numpy as np

from goodhart_prof.units import (ELEMENT_BYTES, brief_duration, bytes_text, device_key, device_text, duration,
                                 duration_sig, ms_text)


def test_duration_picks_the_unit_and_dashes_what_is_missing():
    assert duration(850.25) == "850.2 us"
    assert duration(1500) == "1.500 ms"
    assert duration(2_500_000) == "2.500 s"
    assert duration(np.float32(40.0)) == "40.0 us"
    # the page's form: three significant digits
    assert duration(1234, significant=True) == duration_sig(1234) == "1.23 ms"
    assert duration_sig(5e6) == "5 s"
    assert duration_sig(12_345_678) == "12.3 s"
    assert duration_sig(850.25) == "850 us"
    for missing in (None, float("nan"), float("inf"), "12"):
        assert duration(missing) == duration_sig(missing) == "-"


def test_a_figure_rounded_up_to_the_next_unit_is_written_in_that_unit():
    assert duration(999.7, significant=True) == "1 ms"      # not `1e+03 us`
    assert duration(999_700, significant=True) == "1 s"
    assert duration(999.96) == "1.000 ms"                    # not `1,000.0 us`
    assert duration(999_999.6) == "1.000 s"
    assert duration(999.94) == "999.9 us" and duration(998.5, significant=True) == "998 us"


def test_milliseconds_in_the_callers_number_format():
    assert ms_text(12_345) == "12.35 ms"
    assert ms_text(1_234_567, ",.1f") == "1,234.6 ms"
    assert ms_text(12_345, ".3g") == "12.3 ms"
    assert ms_text(-12, "+.3f") == "-0.012 ms"
    assert ms_text(12, "+.3f") == "+0.012 ms"


def test_brief_duration_switches_to_ms_at_one_millisecond_either_sign():
    assert brief_duration(850.4) == "850 us"
    assert brief_duration(999.4) == "999 us"
    assert brief_duration(1000) == "1.00 ms"
    assert brief_duration(-2500) == "-2.50 ms"
    assert brief_duration(-850) == "-850 us"


def test_bytes_in_the_binary_unit_that_fits():
    assert bytes_text(48) == "48 B"
    assert bytes_text(1536) == "1.5 KiB"
    assert bytes_text(3 * 2**30) == "3.0 GiB"
    assert bytes_text(np.int64(5 * 2**20)) == "5.0 MiB"
    assert bytes_text(2**20, signed=True) == "+1.0 MiB"
    assert bytes_text(-2**20, signed=True) == bytes_text(-2**20) == "-1.0 MiB"
    assert bytes_text(0, signed=True) == "0 B"
    assert bytes_text(None) == bytes_text(float("nan")) == "-"


def test_device_keys_and_labels():
    assert device_key(0, 1) == "rank0/gpu1"
    assert device_key(np.int64(3), 1.0) == "rank3/gpu1"
    assert device_key(2, 0, host=True) == "rank2/host"
    assert device_text(0, 1) == "rank 0 / gpu 1"


def test_one_element_size_table_for_every_spelling():
    # our short names (efficiency), c10 ScalarType names (record_param_comms), C++ names (Input type)
    assert [ELEMENT_BYTES[n] for n in ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")] == [8, 4, 4, 2, 2, 1, 1]
    assert [ELEMENT_BYTES[n] for n in ("Double", "Float", "Half", "BFloat16", "Long", "Char", "ComplexDouble")] \
        == [8, 4, 2, 2, 8, 1, 16]
    assert [ELEMENT_BYTES[n] for n in ("double", "c10::Half", "long int", "signed char", "unsigned long",
                                       "c10::complex<c10::Half>")] == [8, 2, 8, 1, 8, 4]
    assert "Float16" not in ELEMENT_BYTES and "half" not in ELEMENT_BYTES


def test_several_devices_name_their_count_first_and_last():
    from goodhart_prof.units import devices_text

    assert devices_text([(0, 1)]) == "rank 0 / gpu 1"
    assert devices_text([(0, 0), (1, 1), (7, 7)]) == "3 devices (rank 0 / gpu 0 .. rank 7 / gpu 7)"
