"""Checkpoints of a run in progress: where they live, how they are written, which one resumes.

A run's checkpoints live in ``RESULTS/checkpoints/<safe run id>/``, one folder per owner:
``e<epoch>/`` for a queued attempt (its fencing epoch, :mod:`harness.train.fencing`), ``local/``
for a run trained by hand (``harness run``). Each holds ``last.ckpt`` (the Lightning
checkpoint, replaced atomically, so a kill never leaves a torn file) and ``config.json``
(the :class:`~harness.design.config.RunConfig` it was written for). Owners never share a file:
a worker writes only into its own epoch's folder, so a stale worker that wakes up after
its run was taken over cannot touch the new owner's checkpoint.

Resuming (:func:`prepare_resume`): the owner's own ``last.ckpt`` if it has one (the same
``harness run`` again), else the newest valid checkpoint of an earlier epoch (``local``
and a checkpoint of the one-folder layout of older versions count as earlier), *copied*
into the owner's folder, never written in place. A checkpoint that cannot be read (a
truncated file, a disk error) is named, set aside under ``RESULTS/checkpoints/set-aside/``
(renamed, not deleted), and the next candidate is tried; with none left the run starts
from scratch with a warning. The run ends the same as an uninterrupted one (bit-identical
on CPU). A checkpoint written for a different config is refused, since resuming it would
mix two runs. The run's folder is removed once its result file is written.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import shutil
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import torch

from harness.common.files import atomic_path, atomic_write
from harness.common.terms import config_diff
from harness.data.tokenizer import most_ids
from harness.design.config import RunConfig
from harness.models import count_params
from harness.models.gpt import DepthRoutedLM

CHECKPOINT_NAME = "last.ckpt"
CONFIG_NAME = "config.json"
LOCAL = "local"  # the folder of a run trained by hand (no epoch)
SET_ASIDE = "set-aside"  # unreadable checkpoints, under RESULTS/checkpoints/
_EPOCH_RE = re.compile(r"^e(\d+)$")


def safe_name(run_id: str) -> str:
    """A file-system-safe folder name for ``run_id`` (readable part + short hash, no collisions)."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", run_id)[:120]
    return f"{readable}-{hashlib.sha256(run_id.encode()).hexdigest()[:8]}"


def checkpoint_dir(results_dir: str | Path, run_id: str) -> Path:
    """``RESULTS/checkpoints/<safe_name(run_id)>``: the run's folder, holding one folder per owner."""
    return Path(results_dir) / "checkpoints" / safe_name(run_id)


def owner_dir(run_folder: Path, epoch: int | None) -> Path:
    """The checkpoint folder of one owner of the run: ``e<epoch>``, or ``local`` without an epoch."""
    return Path(run_folder) / (LOCAL if epoch is None else f"e{int(epoch)}")


CHECKPOINT_BYTES_PER_PARAM = 12  # fp32 weights and AdamW's two fp32 moments
CHECKPOINT_COPIES = (
    3  # an earlier epoch's checkpoint, its copy in this epoch's folder, and the next one being written
)


def space_needed(config: RunConfig) -> int:
    """Bytes of free space a run's checkpoints need at their largest (checked by a worker before it
    takes the run): :data:`CHECKPOINT_COPIES` checkpoints side by side (resuming copies an earlier
    epoch's; an atomic replace writes the new one beside the old), each
    :data:`CHECKPOINT_BYTES_PER_PARAM` bytes per parameter, plus 1 MiB (config, result file,
    Lightning's state). The parameters are counted on the meta device (no memory, no weights).
    """
    shape = config.model_config(most_ids(config.corpus_key()))
    with torch.device("meta"):
        n = count_params(DepthRoutedLM(shape, config.variant_spec()))["total"]
    return CHECKPOINT_COPIES * CHECKPOINT_BYTES_PER_PARAM * n + 2**20


def save_checkpoint(
    trainer,
    folder: Path,
    *,
    commit: Callable[[], AbstractContextManager] | None = None,
    root: Path | None = None,
) -> None:
    """Write ``folder/last.ckpt`` atomically (:func:`harness.common.files.atomic_path`).

    ``trainer.save_checkpoint`` is collective: every rank calls it and rank 0 writes;
    a barrier then keeps the ranks together. ``commit``: the rename happens inside it (the run's
    fence held, :meth:`harness.train.fencing.Fence.holding`): a checkpoint whose lease or results
    folder was lost while it was written is removed, with the folders it created. ``root``: the
    results folder, never re-created (:func:`harness.common.files.atomic_path`).
    """
    path = Path(folder) / CHECKPOINT_NAME
    if trainer.is_global_zero:
        with atomic_path(path, commit=commit, root=root) as tmp:
            trainer.save_checkpoint(tmp, weights_only=False)
    else:
        trainer.save_checkpoint(path, weights_only=False)  # writes nothing off rank 0
    trainer.strategy.barrier("harness-checkpoint")


def _check_config(folder: Path, config: RunConfig) -> None:
    saved = Path(folder) / CONFIG_NAME
    if saved.exists():
        # the corpus path may differ (a grid re-pointed to a copy): the checkpoint's data state carries
        # the corpus fingerprint, which resuming checks (harness.data.datamodule), so the text is the same
        diff = config_diff(json.loads(saved.read_text()), config.to_dict(), values=True, ignore=("corpus",))
        if diff:
            raise ValueError(
                f"a checkpoint of run {config.run_id} in {folder} was written with a "
                f"different config ({'; '.join(diff)}); delete that folder to start over, or run "
                "the same config to resume it"
            )


def claim_folder(folder: Path, config: RunConfig) -> None:
    """Record ``config`` as the owner of ``folder``, or check that it already is.

    Raises:
        ValueError: the folder holds a checkpoint written for a different config (the
            message names the differing keys and what to do).
    """
    _check_config(folder, config)
    if not (Path(folder) / CONFIG_NAME).exists():
        atomic_write(Path(folder) / CONFIG_NAME, json.dumps(config.to_dict(), sort_keys=True, indent=1))


def checkpoint_step(path: Path) -> int:
    """The optimiser step a checkpoint was saved at.

    Raises:
        ValueError: the file cannot be read as a checkpoint (truncated, not a checkpoint);
            the message names the file and the error.
    """
    try:
        return int(torch.load(path, map_location="cpu", weights_only=False)["global_step"])
    except Exception as exc:  # a torn zip, a pickle error, a missing key: all mean "unreadable"
        raise ValueError(
            f"checkpoint {path} is unreadable ({type(exc).__name__}: {str(exc)[:200]})"
        ) from None


def resume_step(folder: Path) -> int | None:
    """The optimiser step ``folder/last.ckpt`` was saved at, or ``None`` when there is none.

    Raises:
        ValueError: the checkpoint is unreadable (see :func:`checkpoint_step`).
    """
    path = Path(folder) / CHECKPOINT_NAME
    return checkpoint_step(path) if path.exists() else None


def _earlier(run_folder: Path, epoch: int | None) -> list[Path]:
    """Other owners' folders a new owner may resume from, newest first: epochs below ``epoch``
    (every epoch for a run trained by hand), then ``local``, then the run folder itself
    (the one-folder layout of older versions)."""
    epochs = []
    if run_folder.is_dir():
        for child in run_folder.iterdir():
            m = _EPOCH_RE.match(child.name)
            if m and child.is_dir() and (epoch is None or int(m.group(1)) < epoch):
                epochs.append((int(m.group(1)), child))
    out = [p for _, p in sorted(epochs, reverse=True)]
    if epoch is not None:
        out.append(run_folder / LOCAL)
    return out + [run_folder]


def set_aside(path: Path, results_dir: Path, run_id: str) -> Path:
    """Move an unreadable checkpoint of ``run_id`` to ``RESULTS/checkpoints/set-aside/``
    (renamed, never deleted: it outlives the run's folder)."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%fZ")
    where = Path(results_dir) / "checkpoints" / SET_ASIDE
    where.mkdir(parents=True, exist_ok=True)
    owner = path.parent.name if path.parent != checkpoint_dir(results_dir, run_id) else "old-layout"
    target = where / f"{safe_name(run_id)}-{owner}-{stamp}-{path.name}"
    path.replace(target)
    return target


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def prepare_resume(
    results_dir: str | Path, config: RunConfig, epoch: int | None, *, warn: Callable[[str], None] = _warn
) -> tuple[Path, int | None, str]:
    """Make this owner's checkpoint folder and put in it the checkpoint to resume from, if any.

    Args:
        results_dir: the results folder.
        config: the run.
        epoch: this owner's fencing epoch (``None``: a run trained by hand).
        warn: where the one-line warnings about unreadable checkpoints go.

    Returns:
        ``(folder, step, source)``: the owner's folder (``folder/last.ckpt`` is what to
        resume from), the step of that checkpoint (``None``: start from scratch) and where
        it came from (``""``, or e.g. ``"copied from epoch e3"``).

    Raises:
        ValueError: a folder of this run holds a checkpoint written for a different config.
    """
    results_dir = Path(results_dir)
    run_folder = checkpoint_dir(results_dir, config.run_id)
    own = owner_dir(run_folder, epoch)
    earlier = _earlier(run_folder, epoch)
    for folder in (own, *earlier):
        _check_config(folder, config)
    claim_folder(own, config)
    unreadable = False
    for folder in (own, *earlier):
        path = folder / CHECKPOINT_NAME
        if not path.is_file():
            continue
        try:
            step = checkpoint_step(path)
        except ValueError as exc:
            warn(
                f"{exc}; set aside as {set_aside(path, results_dir, config.run_id)}; trying an earlier checkpoint"
            )
            unreadable = True
            continue
        if folder == own:
            return own, step, ""
        with atomic_path(own / CHECKPOINT_NAME) as tmp:  # a copy: the other owner's file is never written
            shutil.copyfile(path, tmp)
        source = folder.name if folder != run_folder else "the old one-folder layout"
        return own, step, f"copied from {source}"
    if unreadable:
        warn(f"{config.run_id}: no readable checkpoint left; the run starts from scratch")
    return own, None, ""


__all__ = [
    "CHECKPOINT_NAME",
    "CONFIG_NAME",
    "LOCAL",
    "SET_ASIDE",
    "safe_name",
    "checkpoint_dir",
    "owner_dir",
    "save_checkpoint",
    "claim_folder",
    "checkpoint_step",
    "resume_step",
    "set_aside",
    "prepare_resume",
]
