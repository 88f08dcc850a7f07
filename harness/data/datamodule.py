"""Deterministic token batches for Lightning (DESIGN section 4: a seed fixes the data order).

Windows. A split of N tokens is cut into ``W = (N - 1) // T`` windows of ``T + 1`` tokens
starting at ``0, T, 2T, ...``; window ``w`` gives ``x = tokens[wT : wT + T]`` and
``y = tokens[wT + 1 : wT + T + 1]``. Consecutive windows share one token, so no target token
is predicted twice within an epoch.

Training order. Global batch ``i`` (``B`` windows) is a pure function of (corpus, T, B,
seed, i): with ``E = W // B`` batches per epoch, ``epoch, j = divmod(i, E)``,
``perm = numpy.random.default_rng([seed, epoch]).permutation(W)``, and the batch holds
windows ``perm[j*B : (j+1)*B]`` (the last ``W mod B`` windows of each permutation are
unused that epoch). The global torch/numpy RNG is never read, so building models that
consume it differently cannot shift the data. Resuming at step ``s`` (``start_step=s`` or
Lightning's checkpointed datamodule state) yields batch ``s`` next.

Distributed. Rank ``r`` of ``world`` takes rows ``[r::world]`` of every global batch, so the
global batch is the same for any world size (``B`` must be divisible by ``world``). Both
dataloaders wrap ``IterableDataset`` objects, which Lightning never re-samples; still,
build the ``Trainer`` with ``use_distributed_sampler=False`` so no sampler is substituted.
With ``num_workers > 0`` worker ``k`` produces batches ``k, k + n, ...``, which the
``DataLoader`` interleaves back into order.

Validation. The first ``min(eval_tokens // T, W_val)`` windows of the validation split, in
order, for every variant and seed. Under several ranks each rank evaluates a contiguous share
of them and the token sums (NLL, tokens, bytes, routing sums) are all-reduced
(:func:`harness.train.ranks.sum_over_ranks`), so every rank gets the numbers of one rank
evaluating the whole set, to float rounding. :meth:`TokenDataModule.val_target_bytes` is the
UTF-8 byte count of all their targets, the denominator of bits-per-byte.
"""

from __future__ import annotations

from collections.abc import Iterator

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset

from harness.data.prepared import PreparedCorpus

Batch = tuple[torch.Tensor, torch.Tensor]


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ValueError(f"{name}={value!r} must be a positive integer")
    return int(value)


def _nonnegative_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"{name}={value!r} must be an integer >= 0")
    return int(value)


class _SplitTokens:
    """Picklable handle on one split's memmap, opened lazily in each process.

    Pickling a ``np.memmap`` copies its whole content; DataLoader workers get this handle
    instead and map the file themselves.
    """

    def __init__(self, prepared: PreparedCorpus, split: str):
        self.prepared, self.split = prepared, split
        self._array: np.ndarray | None = None

    @property
    def array(self) -> np.ndarray:
        if self._array is None:
            self._array = self.prepared.tokens(self.split)
        return self._array

    def __getstate__(self) -> dict:
        return {"prepared": self.prepared, "split": self.split, "_array": None}

    def windows(self, starts: np.ndarray, context: int) -> Batch:
        """``x, y`` int64 ``[len(starts), T]``, each contiguous, for windows starting at token offsets ``starts``."""
        idx = np.asarray(starts, dtype=np.int64)[:, None] + np.arange(context + 1, dtype=np.int64)
        chunk = torch.from_numpy(self.array[idx].astype(np.int64))
        # contiguous copies, not strided views of [B, T + 1]: a pinned, non-blocking host-to-GPU copy of
        # a strided view goes through an unpinned temporary, silently synchronous
        return chunk[:, :-1].contiguous(), chunk[:, 1:].contiguous()


class TrainSchedule:
    """The global training batch sequence of one (corpus, context, batch size, seed).

    Args:
        prepared: the prepared corpus (its ``train`` split is used).
        context: T, tokens per sequence.
        batch_size: B, sequences per global batch (all ranks together).
        seed: data-order seed (>= 0).

    Raises:
        ValueError: non-positive sizes, negative seed, or a training split with fewer than
            ``B`` windows of ``T + 1`` tokens (the message gives the sizes).
    """

    def __init__(self, prepared: PreparedCorpus, context: int, batch_size: int, seed: int):
        self.context = _positive_int("context", context)
        self.batch_size = _positive_int("batch_size", batch_size)
        self.seed = _nonnegative_int("seed", seed)
        self.tokens = _SplitTokens(prepared, "train")
        n_tokens = len(self.tokens.array)
        self.n_windows = max(n_tokens - 1, 0) // self.context
        if self.n_windows < self.batch_size:
            raise ValueError(
                f"training split too short: {n_tokens} tokens give {self.n_windows} windows of "
                f"context {self.context} (+1), fewer than one batch of batch_size={self.batch_size} "
                f"(needs at least {self.batch_size * self.context + 1} tokens); use a larger corpus or a "
                "smaller batch/context"
            )
        self.batches_per_epoch = self.n_windows // self.batch_size
        self._perm_epoch: int | None = None
        self._perm: np.ndarray | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_perm_epoch": None, "_perm": None}

    def window_starts(self, step: int) -> np.ndarray:
        """``[B]`` int64 token offsets of the windows of global batch ``step`` (>= 0)."""
        step = _nonnegative_int("step", step)
        epoch, j = divmod(step, self.batches_per_epoch)
        if self._perm_epoch != epoch:
            # Seeded by (seed, epoch) only: independent of any global RNG state.
            self._perm = np.random.default_rng([self.seed, epoch]).permutation(self.n_windows)
            self._perm_epoch = epoch
        return self._perm[j * self.batch_size : (j + 1) * self.batch_size].astype(np.int64) * self.context

    def batch(self, step: int, rank: int = 0, world_size: int = 1) -> Batch:
        """Rank ``rank``'s rows ``[rank::world_size]`` of global batch ``step``.

        Returns:
            ``(x, y)``, int64 ``[B // world_size, T]`` each, ``y`` = ``x`` shifted by one token.

        Raises:
            ValueError: ``B`` not divisible by ``world_size``, or ``rank`` out of range.
        """
        _check_rank(rank, world_size, self.batch_size)
        return self.tokens.windows(self.window_starts(step)[rank::world_size], self.context)


def _check_rank(rank: int, world_size: int, batch_size: int) -> None:
    world_size = _positive_int("world_size", world_size)
    if not 0 <= rank < world_size:
        raise ValueError(f"rank={rank} must be in [0, {world_size})")
    if batch_size % world_size:
        raise ValueError(f"batch_size={batch_size} is not divisible by world_size={world_size}")


class TrainBatches(IterableDataset):
    """Endless stream of one rank's training batches from ``start_step`` on."""

    def __init__(self, schedule: TrainSchedule, start_step: int = 0, rank: int = 0, world_size: int = 1):
        _check_rank(rank, world_size, schedule.batch_size)
        self.schedule, self.start_step = schedule, _nonnegative_int("start_step", start_step)
        self.rank, self.world_size = rank, world_size

    def __iter__(self) -> Iterator[Batch]:
        info = torch.utils.data.get_worker_info()
        worker, n_workers = (0, 1) if info is None else (info.id, info.num_workers)
        step = self.start_step + worker
        while True:
            yield self.schedule.batch(step, self.rank, self.world_size)
            step += n_workers


class ValBatches(IterableDataset):
    """Validation windows ``first .. first + n_windows - 1``, in order, in batches of ``batch_size``.

    ``rank_share``: these are one rank's share of the fixed set (:meth:`TokenDataModule.val_dataloader`),
    so the evaluation's token sums are to be summed over the ranks.
    """

    def __init__(
        self,
        tokens: _SplitTokens,
        context: int,
        n_windows: int,
        batch_size: int,
        first: int = 0,
        rank_share: bool = False,
    ):
        self.tokens, self.context, self.n_windows, self.batch_size = tokens, context, n_windows, batch_size
        self.first, self.rank_share = first, rank_share

    def __iter__(self) -> Iterator[Batch]:
        info = torch.utils.data.get_worker_info()
        worker, n_workers = (0, 1) if info is None else (info.id, info.num_workers)
        starts = np.arange(self.first, self.first + self.n_windows, dtype=np.int64) * self.context
        batches = range(0, self.n_windows, self.batch_size)
        for k, first in enumerate(batches):
            if k % n_workers == worker:
                yield self.tokens.windows(starts[first : first + self.batch_size], self.context)


class TokenDataModule(L.LightningDataModule):
    """Deterministic train/validation batches over a :class:`PreparedCorpus`.

    Use with ``Trainer(use_distributed_sampler=False, max_steps=...)``: the training
    stream is endless, so the run length is the trainer's ``max_steps``.

    Args:
        prepared: the prepared corpus.
        context: T, tokens per sequence.
        batch_size: B, sequences per GLOBAL batch (each of ``world`` ranks gets ``B / world``).
        seed: data-order seed (>= 0); with the corpus it fixes the batch sequence.
        eval_tokens: size of the validation set in predicted tokens; the set is the first
            ``eval_tokens // T`` validation windows (fewer when the split is shorter).
        start_step: index of the first global batch to produce (resume).
        num_workers: DataLoader worker processes (0 = in the main process).

    Raises:
        ValueError: bad sizes; a training split shorter than one batch; a validation split
            or ``eval_tokens`` too small for one window of ``T + 1`` tokens.
    """

    def __init__(
        self,
        prepared: PreparedCorpus,
        context: int,
        batch_size: int,
        seed: int,
        eval_tokens: int,
        start_step: int = 0,
        *,
        num_workers: int = 0,
    ):
        super().__init__()
        self.prepared = prepared
        self.schedule = TrainSchedule(prepared, context, batch_size, seed)
        self.context, self.batch_size, self.seed = (
            self.schedule.context,
            self.schedule.batch_size,
            self.schedule.seed,
        )
        self.eval_tokens = _positive_int("eval_tokens", eval_tokens)
        self.start_step = _nonnegative_int("start_step", start_step)
        self.num_workers = _nonnegative_int("num_workers", num_workers)
        self.val_tokens = _SplitTokens(prepared, "val")
        n_val = len(self.val_tokens.array)
        fit = max(n_val - 1, 0) // self.context
        self.n_val_windows = min(self.eval_tokens // self.context, fit)
        if self.n_val_windows == 0:
            raise ValueError(
                f"no validation window fits: eval_tokens={self.eval_tokens}, validation split "
                f"{n_val} tokens, context {self.context} (one window needs eval_tokens >= {self.context} "
                f"and a split of >= {self.context + 1} tokens)"
            )
        self.rank, self.world_size = 0, 1
        self.pin_memory = False  # page-locked batches for asynchronous host-to-GPU copies (CUDA only)
        self._fit_base: tuple[int, int] | None = None  # (start_step, trainer.global_step) at fit start

    # ----- Lightning hooks

    def setup(self, stage: str | None = None) -> None:
        """Read rank and world size from the attached trainer (none attached: 0 of 1), and pin
        the batches' memory when it trains on CUDA."""
        if self.trainer is not None:
            self.rank, self.world_size = self.trainer.global_rank, self.trainer.world_size
            self.pin_memory = self.trainer.strategy.root_device.type == "cuda"
        _check_rank(self.rank, self.world_size, self.batch_size)

    def train_dataloader(self) -> DataLoader:
        """This rank's endless training stream, from ``start_step`` on (``batch_size=None``)."""
        global_step = self.trainer.global_step if self.trainer is not None else 0
        self._fit_base = (self.start_step, global_step)
        dataset = TrainBatches(self.schedule, self.start_step, self.rank, self.world_size)
        return DataLoader(dataset, batch_size=None, num_workers=self.num_workers, pin_memory=self.pin_memory)

    def val_dataloader(self) -> DataLoader:
        """This rank's share of the fixed validation windows (rank ``r`` of ``W``: windows
        ``r*n//W .. (r+1)*n//W - 1``, ``rank_share`` set) in batches of ``B / world``; every window on
        every rank when there are fewer windows than ranks (no rank may be left without one)."""
        n, world = self.n_val_windows, self.world_size
        share = world > 1 and n >= world
        first, last = (self.rank * n // world, (self.rank + 1) * n // world) if share else (0, n)
        dataset = ValBatches(
            self.val_tokens, self.context, last - first, self.local_batch_size, first=first, rank_share=share
        )
        return DataLoader(dataset, batch_size=None, num_workers=self.num_workers, pin_memory=self.pin_memory)

    def state_dict(self) -> dict:
        """Resume state saved in Lightning checkpoints: the next global batch index.

        One global batch per optimiser step since this fit began: the micro-batches of a step
        are cut from its global batch by the training step (:mod:`harness.train.microbatch`),
        never drawn from this stream.
        """
        next_step = self.start_step
        if self.trainer is not None and self._fit_base is not None:
            base_step, base_global = self._fit_base
            next_step = base_step + (self.trainer.global_step - base_global)
        return {
            "next_step": int(next_step),
            "seed": self.seed,
            "context": self.context,
            "batch_size": self.batch_size,
            "fingerprint": self.prepared.fingerprint,
        }

    def load_state_dict(self, state_dict: dict) -> None:
        """Resume at the checkpoint's next batch (sets ``start_step``, never adds to it).

        Raises:
            ValueError: the checkpoint was written for another corpus, seed, context or batch size.
        """
        mine = {
            "seed": self.seed,
            "context": self.context,
            "batch_size": self.batch_size,
            "fingerprint": self.prepared.fingerprint,
        }
        differ = [k for k, v in mine.items() if state_dict.get(k) != v]
        if differ:
            raise ValueError(
                "checkpoint data state does not match this datamodule: "
                + ", ".join(f"{k} {state_dict.get(k)!r} != {mine[k]!r}" for k in differ)
            )
        self.start_step = int(state_dict["next_step"])

    # ----- direct access (tests, scripts)

    @property
    def local_batch_size(self) -> int:
        """Sequences per batch on one rank: ``B / world``."""
        return self.batch_size // self.world_size

    def train_batch(self, step: int, rank: int = 0, world_size: int = 1) -> Batch:
        """Rank ``rank``'s part of global training batch ``step``; ``(x, y)`` int64 ``[B/world, T]``."""
        return self.schedule.batch(step, rank, world_size)

    def val_targets(self) -> np.ndarray:
        """``[n_val_windows * T]`` int64 ids of the validation targets, tokens ``1 .. n*T`` of the split."""
        return np.asarray(self.val_tokens.array[1 : self.n_val_windows * self.context + 1], dtype=np.int64)

    def val_target_bytes(self) -> int:
        """UTF-8 bytes of all validation targets: ``sum(token_bytes[y])`` over the fixed set.

        The targets of windows ``0 .. n-1`` are exactly tokens ``1 .. n*T`` of the split.
        bits-per-byte = (sum of target NLL in nats) / (ln 2 * this).
        """
        return int(self.prepared.token_bytes()[self.val_targets()].sum())

    @property
    def val_target_tokens(self) -> int:
        """Number of predicted validation tokens: ``n_val_windows * T``."""
        return self.n_val_windows * self.context


__all__ = ["TrainSchedule", "TrainBatches", "ValBatches", "TokenDataModule"]
