"""Checkpoints of a run in progress: where they live, how they are written, when they resume.

A run's checkpoint folder is ``RESULTS/checkpoints/<safe run id>/``: ``last.ckpt`` (the
Lightning checkpoint, replaced atomically, so a kill never leaves a torn file) and
``config.json`` (the :class:`~harness.config.RunConfig` it was written for). Training the
same run again resumes from ``last.ckpt`` and ends with the same numbers as an
uninterrupted run (bit-identical on CPU); a different config is refused, since resuming
it would mix two runs. The folder is removed once the run's result file is written.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import torch

from harness.config import RunConfig
from harness.files import atomic_path, atomic_write
from harness.terms import config_diff

CHECKPOINT_NAME = "last.ckpt"
CONFIG_NAME = "config.json"


def safe_name(run_id: str) -> str:
    """A file-system-safe folder name for ``run_id`` (readable part + short hash, no collisions)."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", run_id)[:120]
    return f"{readable}-{hashlib.sha256(run_id.encode()).hexdigest()[:8]}"


def checkpoint_dir(results_dir: str | Path, run_id: str) -> Path:
    """``RESULTS/checkpoints/<safe_name(run_id)>``."""
    return Path(results_dir) / "checkpoints" / safe_name(run_id)


def save_checkpoint(trainer, folder: Path) -> None:
    """Write ``folder/last.ckpt`` atomically (:func:`harness.files.atomic_path`).

    ``trainer.save_checkpoint`` is collective: every rank calls it and rank 0 writes;
    a barrier then keeps the ranks together.
    """
    path = Path(folder) / CHECKPOINT_NAME
    if trainer.is_global_zero:
        with atomic_path(path) as tmp:
            trainer.save_checkpoint(tmp, weights_only=False)
    else:
        trainer.save_checkpoint(path, weights_only=False)  # writes nothing off rank 0
    trainer.strategy.barrier("harness-checkpoint")


def claim_folder(folder: Path, config: RunConfig) -> None:
    """Record ``config`` as the owner of ``folder``, or check that it already is.

    Raises:
        ValueError: the folder holds a checkpoint written for a different config (the
            message names the differing keys and what to do).
    """
    saved = Path(folder) / CONFIG_NAME
    if saved.exists():
        diff = config_diff(json.loads(saved.read_text()), config.to_dict(), values=True)
        if diff:
            raise ValueError(
                f"a checkpoint of run {config.run_id} in {folder} was written with a "
                f"different config ({'; '.join(diff)}); delete that folder to start over, or run "
                "the same config to resume it")
    else:
        atomic_write(saved, json.dumps(config.to_dict(), sort_keys=True, indent=1))


def resume_step(folder: Path) -> int | None:
    """The optimiser step ``folder/last.ckpt`` was saved at, or ``None`` when there is none."""
    path = Path(folder) / CHECKPOINT_NAME
    if not path.exists():
        return None
    return int(torch.load(path, map_location="cpu", weights_only=False)["global_step"])


__all__ = ["CHECKPOINT_NAME", "CONFIG_NAME", "safe_name", "checkpoint_dir", "save_checkpoint",
           "claim_folder", "resume_step"]
