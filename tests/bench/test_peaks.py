"""The bf16 peak table (harness.bench.peaks) matches the exact names torch and nvidia-smi report
(issue 44 row 7): no substring match gives an H100 PCIe or NVL the SXM board's 989 TFLOP/s; a MIG
slice is scaled by its SMs or refused with the reason; an unknown GPU gets no MFU, never a guess.
scripts/paper_check.py uses the same table (loaded by path)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from harness.bench.peaks import peak_flops

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("name", "tflops"),
    [
        ("NVIDIA H100 80GB HBM3", 989.4),  # SXM5, as torch.cuda.get_device_name() reports it
        ("NVIDIA H100 PCIe", 756.0),
        ("NVIDIA H100 NVL", 835.0),
        ("NVIDIA H200", 989.4),
        ("NVIDIA H200 NVL", 835.0),
        ("NVIDIA A100-SXM4-80GB", 312.0),
        ("NVIDIA A100 80GB PCIe", 312.0),
        ("  NVIDIA H100 PCIe\n", 756.0),  # nvidia-smi's line, with its newline
    ],
)
def test_exact_device_names_get_their_own_peak(name, tflops):
    peak, why = peak_flops(name)
    assert (peak, why) == (tflops * 1e12, None)


def test_a_mig_slice_is_scaled_by_its_sms_or_refused():
    # H100 SXM: 132 SMs; a 3g.40gb slice has 60 of them (nvidia-smi mig -lgip)
    name = "NVIDIA H100 80GB HBM3 MIG 3g.40gb"
    assert peak_flops(name, sm_count=60) == (989.4e12 * 60 / 132, None)
    peak, why = peak_flops(name)
    assert peak is None and "MIG slice (3g.40gb)" in why and "--peak-tflops" in why
    assert peak_flops(name, sm_count=200)[0] is None  # more SMs than the GPU has: not believed
    peak, why = peak_flops("NVIDIA L40S MIG 1g.10gb", sm_count=10)
    assert peak is None and "MIG slice of an unlisted GPU" in why


@pytest.mark.parametrize("name", ["NVIDIA H800", "NVIDIA L40S", "Tesla V100-SXM2-32GB", "NVIDIA H100"])
def test_an_unknown_device_gets_no_peak_and_the_reason(name):
    peak, why = peak_flops(name)
    assert peak is None and f"no bf16 peak known for {name!r} (not in the peak table" in why


def test_paper_check_uses_the_same_table_by_path():
    spec = importlib.util.spec_from_file_location("paper_check", ROOT / "scripts" / "paper_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.PEAKS.peak_flops("NVIDIA H100 PCIe") == (756e12, None)
    assert module.PEAKS.PEAK_FLOPS == __import__("harness.bench.peaks", fromlist=["x"]).PEAK_FLOPS
