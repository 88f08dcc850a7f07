"""The one Lightning ``Trainer`` configuration, shared by runs and by ``harness bench``.

Runs record their own metric rows and checkpoints (:mod:`harness.train.lit`,
:mod:`harness.train.checkpoint`), so Lightning's logger, checkpointing, progress bar,
model summary, sanity check and validation loop are all off; the data module's iterable
datasets already shard by rank, so no distributed sampler is substituted.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import lightning as L
import torch


def quiet_lightning() -> None:
    """Keep Lightning's banner lines and known-harmless warnings out of run output."""
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    logging.getLogger("lightning.fabric").setLevel(logging.WARNING)
    for pattern in (r".*val_dataloader.*validation_step.*", r".*LeafSpec.*is deprecated.*",
                    r".*does not have many workers.*", r".*`max_epochs` was not set.*"):
        warnings.filterwarnings("ignore", message=pattern)


def resolve_accelerator(accelerator: str) -> str:
    """``auto`` -> ``gpu`` when CUDA is available, else ``cpu``; anything else unchanged."""
    if accelerator == "auto":
        return "gpu" if torch.cuda.is_available() else "cpu"
    return accelerator


def resolve_precision(precision: str, accelerator: str) -> str:
    """A training setting ``precision`` made concrete: ``auto`` is ``bf16-mixed`` on a GPU
    (``gpu``/``cuda``) and ``32-true`` elsewhere."""
    if precision != "auto":
        return precision
    return "bf16-mixed" if accelerator in ("gpu", "cuda") else "32-true"


def make_trainer(*, accelerator: str, precision: str, max_steps: int, callbacks: list, root: Path,
                 devices: int | str = 1, strategy: str = "auto", num_nodes: int = 1) -> L.Trainer:
    """A ``lightning.Trainer`` for ``max_steps`` optimiser steps with the harness's settings.

    Args:
        accelerator: ``cpu``, ``gpu``, ... (see :func:`resolve_accelerator`).
        precision: a concrete Lightning precision (see :func:`resolve_precision`).
        max_steps: optimiser steps; the training stream is endless, this ends the fit.
        callbacks: Lightning callbacks (e.g. :class:`~harness.train.progress.RunCallback`).
        root: ``default_root_dir`` (nothing is written there with these settings).
        devices, strategy, num_nodes: as ``lightning.Trainer`` (``devices=4, strategy="ddp"``).
    """
    return L.Trainer(
        accelerator=accelerator, devices=devices, strategy=strategy, num_nodes=num_nodes,
        precision=precision, max_steps=max_steps, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
        limit_val_batches=0, use_distributed_sampler=False, callbacks=callbacks, default_root_dir=root,
    )


__all__ = ["quiet_lightning", "resolve_accelerator", "resolve_precision", "make_trainer"]
