"""Peak dense throughput per dtype and memory bandwidth of the GPUs we know, with sources.

Policy (docs/DESIGN.md, "efficiency"): every number is the vendor's published peak for the part
named, dense (the sparse 2:4 figures vendors print beside them are halved back), in TFLOP/s (TOP/s
for int8) and GB/s (10^9 bytes/s); each part cites its datasheet. A device whose name matches no
entry (or matches one ambiguously, such as a bare "H100") has no peak: reports leave its
percentages out, never guess. `fp32` is the roof of fp32 GEMMs: the FP32 (non-tensor) peak on
NVIDIA, the FP32 matrix peak on AMD (its GEMMs run on matrix cores); TF32 is its own dtype.

An AMD MI250/MI250X is two GCDs that PyTorch sees as two devices: its entries are per GCD, half of
the package figures the datasheet prints.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class DevicePeak:
    """One part: `tflops` per dtype (precision.DTYPES names), `bandwidth_gbps`, `source` (URL)."""

    name: str
    tflops: dict[str, float] = field(hash=False)
    bandwidth_gbps: float
    source: str

    def ridge(self, dtype: str) -> float | None:
        """FLOPs per byte where the compute roof meets the memory roof (None: no peak)."""
        peak = self.tflops.get(dtype)
        return None if peak is None else peak * 1e12 / (self.bandwidth_gbps * 1e9)


V100_SOURCE = "https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf"
A100_SOURCE = ("https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
               "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf")
H100_SOURCE = "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"
H200_SOURCE = "https://www.nvidia.com/en-us/data-center/h200/"
B200_SOURCE = "https://www.nvidia.com/en-us/data-center/hgx/"
MI250X_SOURCE = "https://www.amd.com/en/products/accelerators/instinct/mi200/mi250x.html"
MI250_SOURCE = "https://www.amd.com/en/products/accelerators/instinct/mi200/mi250.html"
MI300X_SOURCE = "https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html"

_A100 = {"fp64": 19.5, "fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0, "int8": 624.0}
_H100 = {"fp64": 67.0, "fp32": 67.0, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5, "fp8": 1979.0,
         "int8": 1979.0}  # H100 SXM and H200 SXM (sources below)

# (pattern on the deviceProperties name, case-insensitive; first match wins) -> peak
PEAKS: tuple[tuple[str, DevicePeak], ...] = (
    # V100 datasheet: SXM2 FP64 7.8, FP32 15.7, Tensor (fp16) 125 TFLOPS, HBM2 900 GB/s. The
    # DGX Station's `V100-DGXS` is the same SXM2 part (4 of them, "500 TFLOPS" mixed precision).
    (r"V100S[- ]PCIE", DevicePeak("V100S PCIe", {"fp64": 8.2, "fp32": 16.4, "fp16": 130.0}, 1134.0,
                                  V100_SOURCE)),
    (r"V100[- ](SXM2|DGXS)", DevicePeak("V100 SXM2", {"fp64": 7.8, "fp32": 15.7, "fp16": 125.0}, 900.0,
                                        V100_SOURCE)),
    (r"V100[- ]PCIE", DevicePeak("V100 PCIe", {"fp64": 7.0, "fp32": 14.0, "fp16": 112.0}, 900.0,
                                 V100_SOURCE)),
    # A100 datasheet: FP64 Tensor 19.5, FP32 19.5, TF32 156, BF16/FP16 312, INT8 624 (dense);
    # 40GB 1,555 GB/s, 80GB PCIe 1,935 GB/s, 80GB SXM 2,039 GB/s.
    (r"A100[- ]SXM4?[- ]80GB", DevicePeak("A100 SXM 80GB", dict(_A100), 2039.0, A100_SOURCE)),
    (r"A100[- ](SXM4?[- ]40GB|PCIE[- ]40GB)", DevicePeak("A100 40GB", dict(_A100), 1555.0, A100_SOURCE)),
    (r"A100 80GB PCIE|A100[- ]PCIE[- ]80GB", DevicePeak("A100 PCIe 80GB", dict(_A100), 1935.0, A100_SOURCE)),
    # H100 datasheet (sparse figures halved): SXM FP64 Tensor 67, FP32 67, TF32 494.5,
    # BF16/FP16 989.5, FP8/INT8 1,979, 3.35 TB/s; PCIe FP64 Tensor 51, FP32 51, TF32 378,
    # BF16/FP16 756, FP8/INT8 1,513, 2 TB/s. HBM3 is the SXM5 part (`H100 80GB HBM3`); the PCIe card
    # has HBM2e and is named `H100 PCIe`.
    (r"H100.*(SXM|HBM3)", DevicePeak("H100 SXM", dict(_H100), 3350.0, H100_SOURCE)),
    (r"H100.*PCIE", DevicePeak("H100 PCIe", {"fp64": 51.0, "fp32": 51.0, "tf32": 378.0, "bf16": 756.0,
                                             "fp16": 756.0, "fp8": 1513.0, "int8": 1513.0}, 2000.0,
                               H100_SOURCE)),
    # H200 page: H200 SXM, same compute as H100 SXM, HBM3e 4.8 TB/s (the NVL card differs: no entry).
    (r"H200(?!.*NVL)", DevicePeak("H200 SXM", dict(_H100), 4800.0, H200_SOURCE)),
    # HGX B200, per GPU (sparse halved): FP64 37, FP32 75, TF32 1,100, BF16/FP16 2,250,
    # FP8/INT8 4,500, FP4 9,000; HBM3e 7.7 TB/s.
    (r"B200", DevicePeak("B200 (HGX)", {"fp64": 37.0, "fp32": 75.0, "tf32": 1100.0, "bf16": 2250.0,
                                        "fp16": 2250.0, "fp8": 4500.0, "int8": 4500.0, "fp4": 9000.0},
                         7700.0, B200_SOURCE)),
    # MI250X package: FP64/FP32 matrix 95.7, FP16/BF16/INT8 383, 3.2768 TB/s; per GCD half.
    (r"MI250X", DevicePeak("MI250X (one GCD)", {"fp64": 47.85, "fp32": 47.85, "bf16": 191.5,
                                                "fp16": 191.5, "int8": 191.5}, 1638.4, MI250X_SOURCE)),
    # MI250 package: FP64/FP32 matrix 90.5, FP16/BF16/INT8 362.1, 3.2768 TB/s; per GCD half.
    (r"MI250(?!X)", DevicePeak("MI250 (one GCD)", {"fp64": 45.25, "fp32": 45.25, "bf16": 181.05,
                                                   "fp16": 181.05, "int8": 181.05}, 1638.4, MI250_SOURCE)),
    # MI300X: FP64 matrix 163.4, FP32 matrix 163.4, TF32 653.7, FP16/BF16 1,307.4, FP8/INT8
    # 2,614.9 (dense), HBM3 5.3 TB/s. `MI300X VF` is the same GPU passed through (SR-IOV).
    (r"MI300X", DevicePeak("MI300X", {"fp64": 163.4, "fp32": 163.4, "tf32": 653.7, "bf16": 1307.4,
                                      "fp16": 1307.4, "fp8": 2614.9, "int8": 2614.9}, 5300.0,
                           MI300X_SOURCE)),
)
_COMPILED = tuple((re.compile(p, re.IGNORECASE), peak) for p, peak in PEAKS)
# Names that cover several parts: ROCm names both MI250 parts `AMD Instinct MI250X / MI250`.
AMBIGUOUS = re.compile(r"MI250X\s*/\s*MI250", re.IGNORECASE)


def device_peak(name: str | None) -> DevicePeak | None:
    """The peak of the device `name` (as deviceProperties spells it), None when unknown."""
    if not name or AMBIGUOUS.search(name):
        return None
    return next((peak for pattern, peak in _COMPILED if pattern.search(name)), None)


def device_name(device_properties: dict[int, list[dict[str, Any]]], rank: int, device: int) -> str | None:
    """The name of `device` of `rank`, from that rank's deviceProperties: the entry whose `id`
    is the device; else, when every device the rank lists has one and the same name, that name
    (a process that sees one GPU, or eight of a kind, lists them with ids that need not be the
    trace's device numbers: a HIP_VISIBLE_DEVICES subset); else None."""
    names: dict[int, str] = {}
    for i, p in enumerate(device_properties.get(rank) or []):
        name = p.get("name") if isinstance(p, dict) else None
        dev = p.get("id", i) if isinstance(p, dict) else i
        if isinstance(name, str) and name.strip() and isinstance(dev, int):
            names[dev] = name.strip()
    if device in names:
        return names[device]
    distinct = set(names.values())
    return distinct.pop() if len(distinct) == 1 else None
