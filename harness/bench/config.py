"""Settings of ``harness bench``, the issue's targets, and the device helpers every part uses."""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch

from harness.config import get_size

PARENT = "block_attnres"
REFERENCE = "prenorm"
TREATMENT = "rd_attnres"
LOOPS = ("lightning", "bare")
MAX_DEFAULT_BATCH = 32  # sequences: the paper presets' 512-sequence batches do not fit one step

#: Dense bf16 peak FLOP/s by a substring of ``torch.cuda.get_device_name()`` (vendor data
#: sheets; H100/H200 SXM 989.4 TFLOP/s, A100 312 TFLOP/s). First match wins.
PEAK_FLOPS: dict[str, float] = {"H200": 989e12, "H100": 989e12, "A100": 312e12}

#: Goals of the benchmark issue: ratio key -> (comparison, bound). Step-time ratios and
#: ``lightning/bare`` live in ``ratios``; ``mem:`` keys in ``peak_mem_ratios``.
TARGETS: dict[str, tuple[str, float]] = {
    "block_attnres/prenorm": ("<=", 1.05),
    "rd_attnres/block_attnres": ("<=", 1.02),
    "<control>/block_attnres": ("<=", 1.02),
    "lightning/bare": (">=", 0.97),
    "mem:rd_attnres/block_attnres": ("<=", 1.05),
}


@dataclass(frozen=True)
class BenchConfig:
    """Settings of one benchmark.

    Attributes:
        size: size preset (``tiny``, ``small``, ``120m``, ``343m``).
        variants: variants to time; empty = :func:`default_variants`.
        compile: wrap every model in ``torch.compile``.
        steps: timed rounds (one step of every variant per round).
        warmup: untimed steps per variant (and per loop round) before timing, >= 1.
        batch_size: sequences per step (0 = the preset's training batch, at most 32).
        loop_variant: the variant trained by the Lightning and bare loops.
        loop_steps: timed steps per loop round.
        loop_rounds: rounds of (Lightning, bare) loops; 0 skips the loop comparison.
        corpus: corpus spec for the loops' data (None = synthetic uniform tokens).
        cache_dir: prepared-corpus cache (needed with ``corpus``).
        device: ``auto`` (CUDA when available), ``cpu`` or ``cuda``.
        threads: torch CPU threads (0 = torch's default).
        seed: initialisation and data seed.
        peak_tflops: device peak TFLOP/s for MFU (0 = look up :data:`PEAK_FLOPS`).
    """

    size: str = "small"
    variants: tuple[str, ...] = ()
    compile: bool = False
    steps: int = 20
    warmup: int = 3
    batch_size: int = 0
    loop_variant: str = PARENT
    loop_steps: int = 10
    loop_rounds: int = 3
    corpus: str | None = None
    cache_dir: Path | None = None
    device: str = "auto"
    threads: int = 0
    seed: int = 0
    peak_tflops: float = 0.0

    def __post_init__(self) -> None:
        from harness.models import get_spec

        get_size(self.size)  # ValueError names the valid sizes
        for v in (*self.variants, self.loop_variant):
            get_spec(v)  # ValueError names the valid variants
        if len(set(self.variants)) != len(self.variants):
            raise ValueError(f"variants listed twice: {list(self.variants)}")
        for name, low in (("steps", 1), ("warmup", 1), ("batch_size", 0), ("loop_steps", 1),
                          ("loop_rounds", 0), ("threads", 0), ("seed", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name}={value!r} must be an integer >= {low}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"device={self.device!r}; allowed: 'auto', 'cpu', 'cuda'")
        if self.device == "cuda" and not torch.cuda.is_available():
            raise ValueError("device='cuda' but torch sees no CUDA device")
        if not (self.peak_tflops >= 0 and math.isfinite(self.peak_tflops)):
            raise ValueError(f"peak_tflops={self.peak_tflops} must be a finite number >= 0")
        if self.corpus and self.cache_dir is None:
            raise ValueError("a corpus needs a cache_dir for the prepared tokens")


def default_variants() -> list[str]:
    """``prenorm``, ``block_attnres``, ``rd_attnres``, then every control spec (table order)."""
    from harness.models import available_variants, get_spec

    controls = [v for v in available_variants() if get_spec(v).role == "control"]
    return [REFERENCE, PARENT, TREATMENT, *controls]


def resolve_device(name: str) -> torch.device:
    """``auto`` -> ``cuda`` when available, else ``cpu``."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


def device_peak_flops(device: torch.device, peak_tflops: float = 0.0) -> float | None:
    """Peak FLOP/s for MFU: ``peak_tflops * 1e12`` if given, else :data:`PEAK_FLOPS` by
    CUDA device name; None when unknown (e.g. any CPU)."""
    if peak_tflops:
        return peak_tflops * 1e12
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((flops for key, flops in PEAK_FLOPS.items() if key in name), None)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def autocast(device: torch.device):
    return torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else nullcontext()
