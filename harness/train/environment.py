"""Where a run's numbers came from: the environment record and the hardware class (DESIGN section 13).

Floats are bit-identical on one machine only (DESIGN section 4): another CPU's vector width, another GPU's
kernels, another precision or torch, or ``torch.compile``'s fused kernels re-round a run. So every result
file and ``runs`` row carries

* ``environment``: the full record (:func:`environment_record`): CPU model and the ISA features that change
  floats (AVX2, AVX-512, AMX), threads; GPU name, count, memory, driver, CUDA runtime, cuDNN; torch,
  lightning, numpy, Python, OS; precision, TF32 and deterministic flags, float32 matmul precision, compile
  backend and mode; the training code's commit with its dirty flag. No host name and no path: a result file
  is shared (an archive, a report) as it is.
* ``hardware``: the *hardware class* (:func:`hardware_class`), a short stable key of what changes numerics:
  ``DEVICE/PRECISION/torchVERSION/COMPILE``, e.g. ``cpu-amd-epyc-7b13-avx512/fp32/torch2.13.0/eager`` or
  ``cuda-nvidia-h100-80gb-hbm3/bf16-mixed/torch2.13.0/inductor``. It is outside the protocol hash (a
  protocol is what a study fixes; hardware is where it ran). Result files written before the record read as
  :data:`UNKNOWN`.
* ``numerics`` (in the record): the training code's numerics identifier (``two_phase/2``,
  :mod:`harness.models.numerics`): code that re-rounds a run is provenance too.

How a run computes here (accelerator, precision, compile, CUDA's defaults, routing path) is decided once,
by :func:`run_numerics` (a :class:`RunNumerics`), and read by the runner, the Lightning module and the record.

The machine's part (:func:`machine_record`) is read once per process and cached: a worker that trains
many runs reads ``/proc/cpuinfo``, the GPU's properties and git once. The run's part (precision, threads,
TF32 and matmul flags, compile) is a handful of attribute reads.

``$HARNESS_HARDWARE_CLASS`` replaces the detected class (the record keeps the detected one beside it, and
says it was replaced). It exists for tests, which fake two classes on one machine, and for a cluster whose
nodes detect differently but are known to compute the same (docs/scaling-out.md). A value that is not a
class key is the environment's error, refused before a run is claimed or a folder created
(:func:`~harness.train.hardware_override.class_override`, without torch, called by
:func:`harness.train.settings_check.check_settings` and by ``harness launch`` before it starts a worker).
"""

from __future__ import annotations

import functools
import os
import platform
import re
from dataclasses import dataclass
from pathlib import Path

import lightning
import numpy as np
import torch

from harness.common.terms import UNKNOWN
from harness.models.numerics import numerics_id, numerics_key
from harness.train.compiled import INNER_BACKEND
from harness.train.execution import ExecutionSettings, resolve_compile
from harness.train.hardware_override import class_override
from harness.train.microbatch import AUTO, resolve_micro_batch
from harness.train.protocol import code_version
from harness.train.trainer import cuda_defaults, resolve_accelerator, resolve_precision

#: ``/proc/cpuinfo`` flags recorded: the vector and matrix extensions whose kernels round differently.
FLOAT_ISA_FLAGS = (
    "fma",
    "avx2",
    "avx512f",
    "avx512_bf16",
    "avx512_fp16",
    "avx512_vnni",
    "amx_tile",
    "amx_bf16",
    "amx_fp16",
)

#: Short names of Lightning precisions in a hardware class.
PRECISION_KEYS = {
    "32-true": "fp32",
    "32": "fp32",
    "64-true": "fp64",
    "bf16-mixed": "bf16-mixed",
    "bf16-true": "bf16",
    "16-mixed": "fp16-mixed",
    "16-true": "fp16",
}


def _cpuinfo() -> tuple[str | None, set[str]]:
    """``(model name, flags)`` of the first CPU in ``/proc/cpuinfo``; ``(None, set())`` off Linux."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None, set()
    model, flags = None, set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and model is None:
            model = value.strip()
        elif key in ("flags", "Features") and not flags:  # Features: an ARM CPU's
            flags = set(value.split())
        if model is not None and flags:
            break
    return model, flags


def _slug(text: str) -> str:
    """A lower-case key of a device name: trademarks, clock speeds and filler words dropped.
    ``Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz`` -> ``intel-xeon-platinum-8481c``."""
    text = re.sub(r"\((r|tm)\)|@.*$|\b\d+-core\b|\b(cpu|processor)\b", " ", text.lower())
    return re.sub(r"[^a-z0-9.]+", "-", text).strip("-") or UNKNOWN


def driver_version(text: str) -> str | None:
    """The driver version in the text of ``/proc/driver/nvidia/version`` (the proprietary module's
    ``... Kernel Module  535.183.01  ...`` or the open one's ``... Open Kernel Module for x86_64  550.54.15 ...``),
    or ``None``."""
    found = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+(?:\.\d+)+)", text)
    return found.group(1) if found else None


def _nvidia_driver() -> str | None:
    """The NVIDIA kernel driver's version from ``/proc/driver/nvidia/version`` (Linux), or ``None``."""
    try:
        return driver_version(Path("/proc/driver/nvidia/version").read_text())
    except OSError:
        return None


def _gpu() -> dict | None:
    """The visible CUDA GPUs (name, count, memory in GiB, compute capability, driver, runtime, cuDNN), or
    ``None`` without CUDA."""
    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    return {
        "name": props.name,
        "count": torch.cuda.device_count(),
        "memory_gib": round(props.total_memory / 2**30, 1),
        "capability": f"{props.major}.{props.minor}",
        "driver": _nvidia_driver(),
        "cuda_runtime": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
    }


@functools.cache
def machine_record() -> dict:
    """What this process runs on, read once per process (the cache): CPU, GPU, software, code.

    Returns:
        ``{"cpu": {"model", "isa", "torch_capability", "cores"}, "gpu": {...} or None, "software":
        {"torch", "lightning", "numpy", "python", "os"}, "code_version"}``: ``isa`` the present flags of
        :data:`FLOAT_ISA_FLAGS`; ``torch_capability`` the vector kernels torch dispatches to
        (``torch.backends.cpu.get_cpu_capability()``: ``AVX512``, ``AVX2``, ``DEFAULT``...);
        ``code_version`` the training code's commit with ``-dirty`` (:func:`~harness.train.protocol.code_version`).
        No host name, user or path.
    """
    model, flags = _cpuinfo()
    return {
        "cpu": {
            "model": model or platform.processor() or platform.machine() or None,
            "isa": [f for f in FLOAT_ISA_FLAGS if f in flags],
            "torch_capability": torch.backends.cpu.get_cpu_capability(),
            "cores": os.cpu_count(),
        },
        "gpu": _gpu(),
        "software": {
            "torch": torch.__version__,
            "lightning": lightning.__version__,
            "numpy": np.__version__,
            "python": platform.python_version(),
            "os": f"{platform.system()} {platform.release()}",
        },
        "code_version": code_version(),
    }


def device_key(device_type: str, record: dict | None = None) -> str:
    """The device part of a hardware class: ``cpu-MODEL-ISA`` (ISA: torch's kernel capability, plus
    ``amx`` or ``avx512bf16`` where the CPU has native bf16 matrix arithmetic), ``cuda-GPU NAME``, or
    ``mps-MODEL``. The machine's facts: ``record`` (a :func:`machine_record`), default this machine's (cached)."""
    record = machine_record() if record is None else record
    cpu = record["cpu"]
    if device_type == "cuda" and record["gpu"] is not None:
        return "cuda-" + _slug(record["gpu"]["name"])
    if device_type == "mps":
        return "mps-" + _slug(cpu["model"] or "apple")
    isa = cpu["torch_capability"].lower().replace("default", "base")
    if "amx_bf16" in cpu["isa"]:
        isa += "-amx"
    elif "avx512_bf16" in cpu["isa"]:
        isa += "-avx512bf16"
    return f"cpu-{_slug(cpu['model'] or UNKNOWN)}-{isa}"


def hardware_class(device_type: str, precision: str, compiled: bool) -> str:
    """The hardware class (see the module docstring): ``DEVICE/PRECISION/torchVERSION/eager|inductor``,
    or ``$HARNESS_HARDWARE_CLASS`` where set.

    Args:
        device_type: ``cpu``, ``cuda`` or ``mps`` (the device the run trains on).
        precision: the concrete Lightning precision (``32-true``, ``bf16-mixed``...).
        compiled: whether the run's forward is compiled (with :data:`~harness.train.compiled.INNER_BACKEND`).

    Raises:
        ValueError: ``$HARNESS_HARDWARE_CLASS`` is not a short key (letters, digits, ``._+/-``).
    """
    return class_override() or detected_class(device_type, precision, compiled)


def detected_class(device_type: str, precision: str, compiled: bool) -> str:
    """:func:`hardware_class` as detected here, ignoring ``$HARNESS_HARDWARE_CLASS``."""
    torch_version = torch.__version__.split("+")[0]
    backend = INNER_BACKEND if compiled else "eager"
    return (
        f"{device_key(device_type)}/{PRECISION_KEYS.get(precision, precision)}/torch{torch_version}/{backend}"
    )


def _device_type(accelerator: str) -> str:
    """The torch device type of a resolved Lightning accelerator (``gpu``/``cuda`` -> ``cuda``)."""
    return "cuda" if accelerator in ("gpu", "cuda") else accelerator


@dataclass(frozen=True)
class RunNumerics:
    """How one run computes on this machine, decided once (:func:`run_numerics`) before anything is built, and
    used by the runner (:func:`harness.train.runner.build`: the trainer's accelerator and precision, the
    model's routing path), the Lightning module (:class:`harness.train.lit.LitLM`: compile, CUDA's defaults)
    and the environment record (:func:`environment_record`): none of them works it out again.

    Attributes:
        accelerator: the resolved Lightning accelerator (``cpu``, ``gpu``, ``cuda``, ``mps``).
        device_type: the torch device type (``cpu``, ``cuda``, ``mps``).
        precision: the concrete Lightning precision (``32-true``, ``bf16-mixed``...).
        compiled: whether the forward runs compiled (:data:`~harness.train.compiled.INNER_BACKEND`).
        cuda_defaults: whether the run takes CUDA's defaults (on CUDA, or a CPU twin:
            :func:`~harness.train.trainer.cuda_defaults`): fused AdamW, the deferred divergence check.
        routing: the routing path (:data:`~harness.models.numerics.ROUTING_PATHS`).
        micro_batch_size: sequences per micro-batch as resolved here before the fit
            (:func:`~harness.train.microbatch.resolve_micro_batch`: a number capped at the rank's rows, ``auto``
            on a CPU the rank's rows), or ``auto`` on CUDA, probed at the fit's start (the result file
            records the probed size).
        world_size: ranks of the run (``devices`` per node, ``auto``: every visible GPU on CUDA, else 1; times
            ``num_nodes``).
    """

    accelerator: str
    device_type: str
    precision: str
    compiled: bool
    cuda_defaults: bool
    routing: str
    micro_batch_size: int | str = AUTO
    world_size: int = 1

    @property
    def numerics_id(self) -> str:
        """The numerics identifier of the run's training code (``two_phase/2``; :func:`~harness.models.numerics.numerics_id`)."""
        return numerics_id(self.routing)

    @property
    def key(self) -> str:
        """The run's numerics key: the identifier with the micro-batch size and world size
        (:func:`~harness.models.numerics.numerics_key`; DESIGN section 13)."""
        return numerics_key(self.numerics_id, self.micro_batch_size, self.world_size)

    @property
    def defaults_of(self) -> str:
        """The device type whose defaults the run takes: ``cuda`` with CUDA's defaults, else its own."""
        return "cuda" if self.cuda_defaults else self.device_type

    @property
    def hardware(self) -> str:
        """The run's hardware class here (:func:`hardware_class`)."""
        return hardware_class(self.device_type, self.precision, self.compiled)


def run_numerics(config, settings: ExecutionSettings) -> RunNumerics:
    """How the run ``config`` computes under ``settings`` on this machine (:class:`RunNumerics`), decided
    once: what a worker needs to know a run's hardware class and numerics before it claims the run, and
    what the runner builds the run with.

    Raises:
        ValueError: a bad value in the grid's ``[train]`` table (a routing path among them).
    """
    settings = settings.for_run(config)
    accelerator = resolve_accelerator(settings.accelerator)
    device_type = _device_type(accelerator)
    defaults = cuda_defaults(device_type)
    train = config.train_config()
    devices = settings.devices
    if devices == "auto":
        devices = torch.cuda.device_count() if device_type == "cuda" else 1
    world = int(devices) * int(settings.num_nodes)
    local = max(1, train.batch_tokens // config.model_config(1).context // world)
    micro, _ = resolve_micro_batch(
        settings.micro_batch_size,
        local_batch=local,
        device=torch.device(device_type),
        probe=lambda: (AUTO, None),  # probed at the fit's start, on the device
    )
    return RunNumerics(
        accelerator=accelerator,
        device_type=device_type,
        precision=resolve_precision(train.precision, accelerator),
        compiled=resolve_compile(settings.compile, "cuda" if defaults else device_type),
        cuda_defaults=defaults,
        routing=settings.routing,
        micro_batch_size=micro,
        world_size=world,
    )


def run_class(config, settings: ExecutionSettings) -> str:
    """The hardware class the run ``config`` gets when trained here under ``settings``
    (:func:`run_numerics`, :func:`hardware_class`)."""
    return run_numerics(config, settings).hardware


def environment_record(numerics: RunNumerics) -> dict:
    """The full environment record of one run (DESIGN section 13): :func:`machine_record` (cached) with the
    run's numerics: ``{"hardware", "numerics", ..., "run": {"device_type", "precision", "threads",
    "tf32_matmul", "tf32_cudnn", "deterministic", "float32_matmul_precision", "compile": {"backend", "mode"},
    "routing"}}``; with ``$HARNESS_HARDWARE_CLASS`` set, ``hardware_detected`` holds what this machine detected.

    ``numerics`` is the training code's numerics identifier (:attr:`RunNumerics.numerics_id`, ``two_phase/2``);
    ``threads`` is torch's intra-op CPU threads; ``compile.mode`` is ``default`` (the harness passes none).
    """
    record = dict(machine_record())
    record["hardware"] = numerics.hardware
    record["numerics"] = numerics.numerics_id
    detected = detected_class(numerics.device_type, numerics.precision, numerics.compiled)
    if detected != record["hardware"]:
        record["hardware_detected"] = detected
    record["run"] = {
        "device_type": numerics.device_type,
        "precision": numerics.precision,
        "threads": torch.get_num_threads(),
        "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        "tf32_cudnn": bool(torch.backends.cudnn.allow_tf32),
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "compile": {"backend": INNER_BACKEND, "mode": "default"} if numerics.compiled else None,
        "routing": numerics.routing,
    }
    return record


__all__ = [
    "FLOAT_ISA_FLAGS",
    "PRECISION_KEYS",
    "machine_record",
    "device_key",
    "driver_version",
    "hardware_class",
    "detected_class",
    "RunNumerics",
    "run_numerics",
    "run_class",
    "environment_record",
]
