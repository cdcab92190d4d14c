"""The GPUs we know (analysis/gpu/hardware.py): a deviceProperties name maps to its part or to
nothing (never a guess), the roofline's ridge from the datasheet figures, and a rank's device
named from its deviceProperties."""
from __future__ import annotations

import pytest

from goodhart_prof.analysis.gpu.hardware import PEAKS, device_name, device_peak


def test_device_names_map_to_the_part_or_to_nothing():
    assert device_peak("NVIDIA H100 80GB HBM3").name == "H100 SXM"
    assert device_peak("NVIDIA H100 PCIe").name == "H100 PCIe"
    assert device_peak("NVIDIA H100") is None  # SXM or PCIe: not said, not guessed
    assert device_peak("AMD Instinct MI300X VF").name == "MI300X"
    assert device_peak("AMD Instinct MI250X / MI250") is None
    assert device_peak("AMD Radeon Graphics") is None and device_peak("") is None
    assert all(peak.source.startswith("https://") for _, peak in PEAKS)
    # one visible device listed under id 0, kernels on device 2 (HIP_VISIBLE_DEVICES)
    props = {0: [{"id": 0, "name": "AMD Instinct MI300X VF"}]}
    assert device_name(props, 0, 2) == "AMD Instinct MI300X VF"
    assert device_name({0: [{"id": 0, "name": "A"}, {"id": 1, "name": "B"}]}, 0, 2) is None


def test_similar_names_pick_the_right_part():
    assert device_peak("Tesla V100-SXM2-32GB").name == "V100 SXM2"
    assert device_peak("Tesla V100S-PCIE-32GB").name == "V100S PCIe"  # not the V100 PCIe
    assert device_peak("Tesla V100-PCIE-16GB").bandwidth_gbps == 900.0
    assert device_peak("AMD Instinct MI250X").name == "MI250X (one GCD)"
    assert device_peak("AMD Instinct MI250").name == "MI250 (one GCD)"
    assert device_peak("NVIDIA H200").name == "H200 SXM"
    assert device_peak("NVIDIA H200 NVL") is None  # the NVL card differs: no entry
    assert device_peak(None) is None


def test_ridge_is_peak_flops_over_bandwidth():
    h100 = device_peak("NVIDIA H100 80GB HBM3")
    assert h100.ridge("bf16") == pytest.approx(989.5e12 / 3350e9)  # ~295 FLOP/byte
    assert device_peak("NVIDIA A100-SXM4-40GB").ridge("fp32") == pytest.approx(19.5e12 / 1555e9)
    assert device_peak("Tesla V100-SXM2-16GB").ridge("bf16") is None  # V100 has no bf16 peak


def test_device_name_by_id_and_rank():
    props = {0: [{"id": 0, "name": " NVIDIA A100 "}, {"id": 1, "name": "NVIDIA H100 PCIe"}],
             1: [{"name": "Tesla V100-SXM2-32GB"}]}
    assert device_name(props, 0, 1) == "NVIDIA H100 PCIe"
    assert device_name(props, 0, 0) == "NVIDIA A100"  # stripped
    assert device_name(props, 1, 0) == "Tesla V100-SXM2-32GB"  # no id: its position
    assert device_name(props, 2, 0) is None  # a rank without deviceProperties
    assert device_name({0: [{"id": 0, "name": ""}, "junk"]}, 0, 0) is None
