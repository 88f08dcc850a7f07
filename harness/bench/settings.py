"""Settings of ``harness bench``, its goals (``TARGETS``, docs/benchmarks.md), and the device helpers every part uses."""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch

from harness.bench.peaks import peak_flops
from harness.bench.routing_cost import routing_path_arms
from harness.models import available_variants, get_spec
from harness.models.sizes import get_size

PARENT = "block_attnres"
REFERENCE = "prenorm"
TREATMENT = "rd_attnres"
LOOPS = ("lightning", "bare")
MAX_DEFAULT_BATCH = 32  # sequences: the paper presets' 512-sequence batches do not fit one step


#: The benchmark's goals (docs/benchmarks.md's "bench goal"): ratio key -> (comparison, bound). Step-time ratios and
#: ``lightning/bare`` live in ``ratios``; ``mem:`` keys in ``peak_mem_ratios``.
TARGETS: dict[str, tuple[str, float]] = {
    "block_attnres/prenorm": ("<=", 1.03),
    "rd_attnres/block_attnres": ("<=", 1.01),
    "<control>/block_attnres": ("<=", 1.01),
    "lightning/bare": (">=", 0.98),
    "mem:rd_attnres/block_attnres": ("<=", 1.05),
}
#: The bf16-mixed over float32 throughput ratio of one model (``precision_ratios``).
PRECISION_RATIO = "bf16/fp32"


@dataclass(frozen=True)
class BenchConfig:
    """Settings of one benchmark.

    Attributes:
        size: size preset (``tiny``, ``small``, ``120m``, ``343m``).
        variants: variants to time; empty = :func:`default_variants`.
        compile: wrap every model in ``torch.compile``.
        steps: timed rounds at least (one step of every variant per round).
        max_steps: timed rounds at most: after ``steps`` rounds, rounds are added until every
            step-time ratio's 95 % interval is narrower than ``interval_width`` (relative to the
            ratio) or ``max_steps`` rounds ran (0 = exactly ``steps`` rounds).
        interval_width: the relative interval width that ends the rounds early.
        precision_ratio: also time the parent (or the first variant) in the other precision
            (bf16-mixed on a CPU, float32 on CUDA), interleaved, for ``precision_ratios``.
        warmup: untimed steps per variant (and per loop round) before timing, >= 1.
        batch_size: sequences per micro-batch (0 = on CUDA the micro-batch a run would probe, on
            a CPU the preset's training batch, at most 32).
        micro_batches: micro-batches per timed step, each a forward+backward, with one clip and
            one AdamW step (0 = the step training runs: on CUDA the preset's global batch,
            ``ceil(batch_tokens / context / batch_size)``; on a CPU 1, as the CPU ratios were measured).
        loop_variant: the variant trained by the Lightning and bare loops.
        loop_steps: timed steps per loop round.
        loop_rounds: rounds of (Lightning, bare) loops; 0 skips the loop comparison.
        corpus: corpus spec for the loops' data (None = synthetic uniform tokens).
        cache_dir: prepared-corpus cache (needed with ``corpus``).
        device: ``auto`` (CUDA when available), ``cpu`` or ``cuda``.
        threads: torch CPU threads (0 = torch's default).
        seed: initialisation and data seed.
        peak_tflops: device peak TFLOP/s for MFU (0 = look up :data:`~harness.bench.peaks.PEAK_FLOPS`).
        per_site: also time every routed variant on the per-site routing path, interleaved, as the
            arm ``<variant>@per_site`` (two-phase is the default path, :data:`harness.models.numerics.ROUTING_PATHS`).
        profile_rounds: after timing, profile this many more interleaved rounds and split each
            step-time ratio's difference by category (:mod:`harness.bench.profile`; 0 = off).
    """

    size: str = "small"
    variants: tuple[str, ...] = ()
    compile: bool = False
    steps: int = 20
    max_steps: int = 0
    interval_width: float = 0.01
    precision_ratio: bool = True
    warmup: int = 3
    batch_size: int = 0
    micro_batches: int = 0
    loop_variant: str = PARENT
    loop_steps: int = 10
    loop_rounds: int = 3
    corpus: str | None = None
    cache_dir: Path | None = None
    device: str = "auto"
    threads: int = 0
    seed: int = 0
    peak_tflops: float = 0.0
    profile_rounds: int = 0
    per_site: bool = False

    def __post_init__(self) -> None:
        get_size(self.size)  # ValueError names the valid sizes
        for v in (*self.variants, self.loop_variant):
            get_spec(v)  # ValueError names the valid variants
        if len(set(self.variants)) != len(self.variants):
            raise ValueError(f"variants listed twice: {list(self.variants)}")
        for name, low in (
            ("steps", 1),
            ("max_steps", 0),
            ("warmup", 1),
            ("batch_size", 0),
            ("micro_batches", 0),
            ("loop_steps", 1),
            ("loop_rounds", 0),
            ("threads", 0),
            ("seed", 0),
            ("profile_rounds", 0),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name}={value!r} must be an integer >= {low}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"device={self.device!r}; allowed: 'auto', 'cpu', 'cuda'")
        if self.device == "cuda" and not torch.cuda.is_available():
            raise ValueError("device='cuda' but torch sees no CUDA device")
        if self.max_steps and self.max_steps < self.steps:
            raise ValueError(f"max_steps={self.max_steps} must be 0 or at least steps={self.steps}")
        if not (0 < self.interval_width and math.isfinite(self.interval_width)):
            raise ValueError(f"interval_width={self.interval_width} must be a positive number (0.01 = 1 %)")
        if not (self.peak_tflops >= 0 and math.isfinite(self.peak_tflops)):
            raise ValueError(f"peak_tflops={self.peak_tflops} must be a finite number >= 0")
        if self.per_site and self.variants and not routing_path_arms(self, list(self.variants)):
            # nothing would be compared: say so before the rounds, not with an empty ratio list after them
            raise ValueError(
                f"per-site timing (--per-site) needs a routed variant; got only {', '.join(self.variants)}"
            )
        if self.corpus and self.cache_dir is None:
            raise ValueError("a corpus needs a cache_dir for the prepared tokens")


def default_variants() -> list[str]:
    """``prenorm``, ``block_attnres``, ``rd_attnres``, then every control spec (table order)."""

    controls = [v for v in available_variants() if get_spec(v).role == "control"]
    return [REFERENCE, PARENT, TREATMENT, *controls]


def resolve_device(name: str) -> torch.device:
    """``auto`` -> ``cuda`` when available, else ``cpu``."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


def device_peak_flops(device: torch.device, peak_tflops: float = 0.0) -> tuple[float | None, str | None]:
    """``(peak FLOP/s, None)`` for MFU: ``peak_tflops * 1e12`` if given, else the CUDA device's
    exact name in :data:`~harness.bench.peaks.PEAK_FLOPS` (a MIG slice scaled by its SMs);
    ``(None, why)`` when unknown (any CPU, an unlisted GPU or MIG slice)."""
    if peak_tflops:
        return peak_tflops * 1e12, None
    if device.type != "cuda":
        return None, f"MFU omitted: no bf16 peak for a {device.type} device; pass --peak-tflops"
    props = torch.cuda.get_device_properties(device)
    peak, why = peak_flops(torch.cuda.get_device_name(device), props.multi_processor_count)
    return peak, (f"MFU omitted: {why}" if why else None)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def default_precision(device: torch.device) -> str:
    """The precision a run's ``auto`` gives on ``device``: ``bf16-mixed`` on CUDA, else ``32-true``."""
    return "bf16-mixed" if device.type == "cuda" else "32-true"


def other_precision(device: torch.device) -> str:
    """The precision the bf16/fp32 comparison adds on ``device``: the one that is not its default."""
    return "32-true" if default_precision(device) == "bf16-mixed" else "bf16-mixed"


def autocast(device: torch.device, precision: str | None = None):
    """The autocast context of a Lightning ``precision`` on ``device`` (default: :func:`default_precision`)."""
    if (precision or default_precision(device)) == "bf16-mixed":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return nullcontext()
