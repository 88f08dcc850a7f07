"""The one Lightning ``Trainer`` configuration, shared by runs and by ``harness bench``.

Runs record their own metric rows and checkpoints (:mod:`harness.train.lit`,
:mod:`harness.train.checkpoint`), so Lightning's logger, checkpointing, progress bar,
model summary, sanity check and validation loop are all off; the data module's iterable
datasets already shard by rank, so no distributed sampler is substituted.

The cluster environment is ours too (:func:`cluster_environment`): Lightning's SLURM
detection would treat any process inside a SLURM allocation as one of its ranks, install
its own auto-requeue handler for SIGUSR1 (which requeues the job behind the queue's back:
preemption is ``harness launch``'s, DESIGN section 10) and, on any machine with SLURM
installed, warn in every run that ``srun`` "is available but not used".
"""

from __future__ import annotations

import functools
import logging
import os
import warnings
from pathlib import Path

import lightning as L
import torch

# Lightning's warning when srun is on PATH but the process was not started by it. With our own
# cluster environment (cluster_environment) it comes only from Lightning's check for its own
# SLURM "hpc" checkpoints to resume, which the harness never writes (a fresh fit, ckpt_path=None).
SRUN_NOT_USED = r"The `srun` command is available on your system but is not used"


def quiet_lightning() -> None:
    """Keep Lightning's banner lines and known-harmless warnings out of run output (each by its
    message; every other warning still shows)."""
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    logging.getLogger("lightning.fabric").setLevel(logging.WARNING)
    for pattern in (
        r".*val_dataloader.*validation_step.*",
        r".*LeafSpec.*is deprecated.*",
        r".*does not have many workers.*",
        r".*`max_epochs` was not set.*",
        SRUN_NOT_USED,
    ):
        warnings.filterwarnings("ignore", message=pattern)


def cluster_environment():
    """The Lightning cluster environment of this process, chosen by us, not by Lightning's detection.

    * under ``torchrun`` (``TorchElasticEnvironment.detect()``): torchelastic's;
    * in a SLURM step of several tasks (``srun --ntasks-per-node=G harness run ... --devices G
      --strategy ddp``: ``SLURM_NTASKS`` > 1, job name not ``bash``/``interactive``, as
      Lightning tells them apart): ``SLURMEnvironment(auto_requeue=False)``, each task one rank,
      and no Lightning handler that requeues the job;
    * else (one process, also a single-task SLURM job such as a ``harness launch`` worker):
      ``LightningEnvironment``, Lightning starts any further ranks itself.
    """
    from lightning.fabric.plugins.environments import (  # lazy: Lightning loads only to train
        LightningEnvironment,
        SLURMEnvironment,
        TorchElasticEnvironment,
    )

    if TorchElasticEnvironment.detect():
        return TorchElasticEnvironment()
    if int(os.environ.get("SLURM_NTASKS", "1")) > 1 and SLURMEnvironment.job_name() not in (
        "bash",
        "interactive",
    ):
        return SLURMEnvironment(auto_requeue=False)
    return LightningEnvironment()


#: ``1``: a CPU run takes CUDA's defaults (DESIGN section 11), so the suite's CPU twins run the
#: code paths a GPU run takes (tests only; see :func:`cuda_defaults`).
CUDA_DEFAULTS_ENV = "HARNESS_CUDA_DEFAULTS"


def cuda_defaults(device_type: str) -> bool:
    """Whether a run on ``device_type`` takes CUDA's defaults: always on CUDA; on any other device
    when ``$HARNESS_CUDA_DEFAULTS=1`` (a CPU twin: ``compile = auto`` compiles with inductor,
    ``precision = auto`` is ``bf16-mixed``, AdamW is fused, the divergence check is deferred to
    the log and evaluation intervals). ``micro_batch_size = auto`` stays the whole per-rank batch
    (its probe measures CUDA memory) and pinned memory, non-blocking copies and TF32 stay CUDA's
    own (no-ops on a CPU).

    Raises:
        ValueError: ``$HARNESS_CUDA_DEFAULTS`` set to anything but ``0``, ``1`` or empty.
    """
    if device_type == "cuda":
        return True
    value = os.environ.get(CUDA_DEFAULTS_ENV, "").strip()
    if value not in ("", "0", "1"):
        raise ValueError(f"${CUDA_DEFAULTS_ENV}={value!r}; allowed: '1' (take CUDA's defaults), '0' or unset")
    return value == "1"


def resolve_accelerator(accelerator: str) -> str:
    """``auto`` -> ``gpu`` when CUDA is available, else ``cpu``; anything else unchanged."""
    if accelerator == "auto":
        return "gpu" if torch.cuda.is_available() else "cpu"
    return accelerator


#: CPU flags (``/proc/cpuinfo``) of native bf16 matrix arithmetic that oneDNN uses for bf16 matmuls.
CPU_BF16_FLAGS = ("amx_bf16", "avx512_bf16")


@functools.cache
def cpu_bf16_support() -> str | None:
    """The CPU's native bf16 instruction set (``amx_bf16`` or ``avx512_bf16`` from
    ``/proc/cpuinfo``), or ``None``: none, no ``/proc/cpuinfo`` (not Linux), or a torch
    without oneDNN bf16 kernels. Without native bf16 a CPU emulates it, slower than float32."""
    try:
        flags = set(
            " ".join(
                line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")
            ).split()
        )
    except OSError:
        return None
    found = next((f for f in CPU_BF16_FLAGS if f in flags), None)
    if found is None or not torch.backends.mkldnn.is_available():
        return None
    try:
        return found if torch.ops.mkldnn._is_mkldnn_bf16_supported() else None
    except (AttributeError, RuntimeError):
        return None


def resolve_precision(precision: str, accelerator: str) -> str:
    """A training setting ``precision`` made concrete: ``auto`` is ``bf16-mixed`` on a GPU
    (``gpu``/``cuda``; also in a CPU twin, :func:`cuda_defaults`) and ``32-true`` elsewhere;
    ``auto-bf16`` is ``bf16-mixed`` on a GPU and on a CPU with native bf16
    (:func:`cpu_bf16_support`), else ``32-true``. The concrete precision enters the protocol
    hash, so runs of different precisions never pair."""
    gpu = accelerator in ("gpu", "cuda") or cuda_defaults(accelerator)
    if precision == "auto":
        return "bf16-mixed" if gpu else "32-true"
    if precision == "auto-bf16":
        return "bf16-mixed" if gpu or (accelerator == "cpu" and cpu_bf16_support()) else "32-true"
    return precision


def describe_precision(precision: str, accelerator: str) -> str:
    """One line: what ``precision`` resolves to on ``accelerator`` and why."""
    concrete = resolve_precision(precision, accelerator)
    if accelerator != "cpu" or precision != "auto-bf16":
        return f"precision {concrete} ({precision} on {accelerator})"
    native = cpu_bf16_support()
    why = (
        f"this CPU has native bf16 ({native})"
        if native
        else "this CPU has no native bf16 (avx512_bf16/amx_bf16)"
    )
    return f"precision {concrete} ({precision} on cpu: {why})"


def make_trainer(
    *,
    accelerator: str,
    precision: str,
    max_steps: int,
    callbacks: list,
    root: Path,
    devices: int | str = 1,
    strategy: str = "auto",
    num_nodes: int = 1,
) -> L.Trainer:
    """A ``lightning.Trainer`` for ``max_steps`` optimiser steps with the harness's settings.

    Args:
        accelerator: ``cpu``, ``gpu``, ... (see :func:`resolve_accelerator`).
        precision: a concrete Lightning precision (see :func:`resolve_precision`).
        max_steps: optimiser steps; the training stream is endless, this ends the fit.
        callbacks: Lightning callbacks (e.g. :class:`~harness.train.progress.RunCallback`).
        root: ``default_root_dir`` (nothing is written there with these settings).
        devices, strategy, num_nodes: as ``lightning.Trainer`` (``devices=4, strategy="ddp"``).

    The cluster environment is :func:`cluster_environment`'s.
    """
    return L.Trainer(
        accelerator=accelerator,
        devices=devices,
        strategy=strategy,
        num_nodes=num_nodes,
        precision=precision,
        max_steps=max_steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        use_distributed_sampler=False,
        callbacks=callbacks,
        default_root_dir=root,
        plugins=[cluster_environment()],
    )


__all__ = [
    "SRUN_NOT_USED",
    "quiet_lightning",
    "cluster_environment",
    "CUDA_DEFAULTS_ENV",
    "cuda_defaults",
    "resolve_accelerator",
    "cpu_bf16_support",
    "resolve_precision",
    "describe_precision",
    "make_trainer",
]
