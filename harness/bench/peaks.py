"""Dense bf16 peak FLOP/s of a GPU by its exact name, for MFU (standard library only).

The name is the one ``torch.cuda.get_device_name()`` and ``nvidia-smi --query-gpu=name`` report
(e.g. ``NVIDIA H100 80GB HBM3`` for the SXM board, ``NVIDIA H100 PCIe``, ``NVIDIA H200``).
Matched exactly, never by substring: an H100 PCIe (756 TFLOP/s) or NVL (835) must not get the
SXM board's 989. Peaks are the vendor data sheets' dense (not 2:4 sparse) bf16 tensor-core
figures: H100/H200 SXM 989.4, H100 PCIe 756, H100 NVL and H200 NVL 835, A100 312 TFLOP/s.

A MIG slice (``NVIDIA H100 80GB HBM3 MIG 3g.40gb``) has a share of the GPU's streaming
multiprocessors (SMs): its peak is the full GPU's times ``slice SMs / full SMs`` when the
slice's SM count is known (``torch.cuda.get_device_properties().multi_processor_count``),
else refused with the reason. An unknown name gets no peak (MFU is then omitted, never guessed).

``scripts/paper_check.py`` loads this file by path (the GPU machine's check needs no package
import), so it imports nothing outside the standard library.
"""

from __future__ import annotations

import re

#: exact device name -> (dense bf16 peak FLOP/s, SMs of the full GPU)
PEAK_FLOPS: dict[str, tuple[float, int]] = {
    "NVIDIA H100 80GB HBM3": (989.4e12, 132),  # H100 SXM5
    "NVIDIA H100 PCIe": (756e12, 114),
    "NVIDIA H100 NVL": (835e12, 132),
    "NVIDIA H200": (989.4e12, 132),  # H200 SXM
    "NVIDIA H200 NVL": (835e12, 132),
    "NVIDIA GH200 480GB": (989.4e12, 132),
    "NVIDIA A100-SXM4-80GB": (312e12, 108),
    "NVIDIA A100-SXM4-40GB": (312e12, 108),
    "NVIDIA A100 80GB PCIe": (312e12, 108),
    "NVIDIA A100-PCIE-40GB": (312e12, 108),
}

#: exact device name -> memory bandwidth in bytes/s (vendor data sheets: H100 SXM 3.35 TB/s, H100 PCIe
#: 2.0 TB/s, H200 4.8 TB/s, A100 80GB 2.0 TB/s), for routing's roofline (:mod:`harness.bench.routing_cost`)
MEMORY_BANDWIDTH: dict[str, float] = {
    "NVIDIA H100 80GB HBM3": 3.35e12,
    "NVIDIA H100 PCIe": 2.0e12,
    "NVIDIA H200": 4.8e12,
    "NVIDIA A100-SXM4-80GB": 2.0e12,
    "NVIDIA A100 80GB PCIe": 2.0e12,
}

#: ``<GPU name> MIG <g>g.<memory>gb``: a MIG slice's name
_MIG = re.compile(r"^(?P<base>.+?) MIG (?P<slice>\d+g\.\d+gb)$")


def peak_flops(name: str, sm_count: int | None = None) -> tuple[float | None, str | None]:
    """``(peak FLOP/s, None)`` for the device called ``name``, or ``(None, why not)``.

    ``sm_count``: the device's SM count, needed for a MIG slice (its peak is scaled by
    ``sm_count / full SMs``; refused without it or when it exceeds the full GPU's).
    """
    name = " ".join(name.split())
    if name in PEAK_FLOPS:
        return PEAK_FLOPS[name][0], None
    mig = _MIG.match(name)
    if mig and mig["base"] in PEAK_FLOPS:
        full, sms = PEAK_FLOPS[mig["base"]]
        if not sm_count or sm_count > sms:
            return None, (
                f"{name!r} is a MIG slice ({mig['slice']}) whose SM count is unknown here "
                f"(the full GPU has {sms}): no peak; pass --peak-tflops"
            )
        return full * sm_count / sms, None
    why = "a MIG slice of an unlisted GPU" if mig else "not in the peak table"
    return (
        None,
        f"no bf16 peak known for {name!r} ({why}; known: {', '.join(PEAK_FLOPS)}); pass --peak-tflops",
    )


__all__ = ["PEAK_FLOPS", "MEMORY_BANDWIDTH", "peak_flops"]
