"""What goes wrong around a run that is not the run's own error: the exception types and how an error is
told apart (DESIGN section 10's fault model; section 11's dead rank).

The types: :class:`RankDied` (a child rank died), :class:`ResultsReadOnly`, :class:`CudaContextLost`,
:class:`DiskFull`, :class:`ResultsLost` (the results folder went away), :class:`OtherResults` (a run of
another results folder's grid), :class:`CorpusMissing` (a claimed run's corpus is not on this machine).
The classification, each over an error and the errors it came from: :func:`sticky_cuda_error` (a CUDA
context this process cannot use again), :func:`run_poisoned_cuda` (one the run poisoned itself),
:func:`read_only_path` (EROFS), :func:`full_path` (ENOSPC, EDQUOT, torch's words for them).

What a worker does about each (release the run, spend a retry or not, stop) is the retry policy,
:mod:`harness.scheduling.workers.retry`. Light on purpose (no torch): the worker loop catches these
without loading the training stack, and training (:mod:`harness.train.ranks`) raises them.
"""

from __future__ import annotations

import errno
import signal
from pathlib import Path

from harness.common.files import FULL_BELOW, free_bytes, full_place

#: a child rank's exit status when its training raised (Python's own for an uncaught exception):
#: the run's error, which rank 0 meets too, not the machine's
RUN_ERROR_EXIT = 1
#: a child rank's exit status when its training met a sticky CUDA error (:func:`sticky_cuda_error`)
CONTEXT_LOST_EXIT = 3


def describe_exit(code: int) -> str:
    """``exit code 3`` or ``killed by SIGKILL`` for a ``subprocess`` return code (negative: a signal)."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class RankDied(OSError):
    """A child rank of a run died (a signal, or an exit other than its run's own error) while rank 0
    trained the run: the machine's fault (out of memory, a GPU lost, an operator's kill), so the run
    is given back, not failed.

    Attributes:
        rank: the dead rank's global rank (1..N-1).
        exit_code: its ``subprocess`` return code (negative: killed by that signal).
    """

    def __init__(self, rank: int, exit_code: int, message: str | None = None) -> None:
        self.rank, self.exit_code = rank, exit_code
        super().__init__(
            message
            or f"rank {rank} died ({describe_exit(exit_code)}, exit status {exit_code}) while the run trained"
        )

    def __reduce__(self):  # picklable with its fields (a launched worker's result crosses processes)
        return type(self), (self.rank, self.exit_code, str(self))


class ResultsReadOnly(OSError):
    """The results folder became read-only (a remount, a file system that went read-only after an
    error): the environment's fault, not the run's. No failed result is written (it could not be),
    the run is released where the queue can still be written (else its lease expires), and the
    worker stops with one line naming the folder."""


FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
# how torch's checkpoint writer says ENOSPC (a RuntimeError without an errno)
_FULL_WORDS = ("no space left on device", "disk quota exceeded", "file write failed")


class DiskFull(OSError):
    """The disk holding a run's checkpoints or result is full: the environment's fault, not the run's.
    The run was released (queued again, no retry spent) and the worker stops; the message (one
    line) names the full path, its free space and what the run needs."""


def full_path(exc: BaseException, results_dir: Path) -> Path | None:
    """The path a full disk refused (the error's file, else the results folder) when ``exc`` or an
    error it came from is ENOSPC / EDQUOT (or torch's words for it on a disk that is full); else None."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in FULL_ERRNOS:
            return full_place(seen.filename, results_dir) if seen.filename else results_dir
        if any(w in str(seen).lower() for w in _FULL_WORDS) and free_bytes(results_dir) < FULL_BELOW:
            return results_dir
        seen = seen.__cause__ or seen.__context__
    return None


class ResultsLost(OSError):
    """The worker's results folder is gone (deleted, unmounted, or replaced by another folder) since
    it started: the run was released (when the queue could still be reached) and the worker stops,
    creating nothing there."""


class OtherResults(ValueError):
    """A run's grid belongs to another results folder than the worker's ``--results`` (by the id
    in ``RESULTS/.harness-id``): the run was released and the worker stops, naming both folders."""


class CorpusMissing(OSError):
    """A claimed run's corpus is not on this machine (no path known, or nothing at the path): the
    environment's fault, so the run was released (no retry spent) and the worker stops."""


def read_only_path(exc: BaseException) -> str | None:
    """The file a read-only file system refused (EROFS) in ``exc`` or an error it came from, else None."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno == errno.EROFS:
            return str(seen.filename or "")
        seen = seen.__cause__ or seen.__context__
    return None


#: CUDA runtime errors after which "the process must be terminated and relaunched" (CUDA Runtime API,
#: ``cudaError_t``: cudaErrorIllegalAddress 700, cudaErrorLaunchTimeout 702, cudaErrorHardwareStackError
#: 714, cudaErrorIllegalInstruction 715, cudaErrorMisalignedAddress 716, cudaErrorInvalidAddressSpace 717,
#: cudaErrorInvalidPc 718, cudaErrorLaunchFailure 719, cudaErrorECCUncorrectable 214 (an Xid 48/63/64...)),
#: as torch words them (``CUDA error: <message>``; NCCL: ``Cuda failure '<message>'``). A device-side
#: assert (710) poisons the context too but is the run's own bug (an index out of range): see
#: :data:`RUN_POISONS_CUDA`.
STICKY_CUDA = (
    "an illegal memory access was encountered",
    "the launch timed out and was terminated",
    "hardware stack error",
    "an illegal instruction was encountered",
    "misaligned address",
    "operation not supported on global/shared address space",
    "invalid program counter",
    "unspecified launch failure",
    "uncorrectable ecc error encountered",
)


#: CUDA errors the run itself causes that still leave the process's context unusable (cudaErrorAssert 710:
#: a device-side assert, e.g. a token id >= the vocabulary in an embedding or a loss). The attempt is the
#: run's failure (a retry spent, its failed result written), and the worker stops: every later run in
#: this process would fail on the dead context.
RUN_POISONS_CUDA = ("device-side assert triggered",)


def _first_line(exc: BaseException, words: tuple[str, ...]) -> str | None:
    """The first line of the first ``RuntimeError`` in ``exc``'s chain whose message holds one of ``words``."""
    seen: BaseException | None = exc
    while seen is not None:
        text = str(seen)
        if isinstance(seen, RuntimeError) and any(w in text.lower() for w in words):
            return text.strip().splitlines()[0] if text.strip() else type(seen).__name__
        seen = seen.__cause__ or seen.__context__
    return None


def run_poisoned_cuda(exc: BaseException) -> str | None:
    """The first line of a CUDA error in ``exc`` (or an error it came from) that the run caused and that
    left the context unusable (:data:`RUN_POISONS_CUDA`), else ``None``."""
    return _first_line(exc, RUN_POISONS_CUDA)


def sticky_cuda_error(exc: BaseException) -> str | None:
    """The first line of the error in ``exc`` (or an error it came from) that left this process's CUDA
    context unusable (:data:`STICKY_CUDA`, matched in a ``RuntimeError``'s message: torch's
    ``AcceleratorError``, NCCL's ``DistBackendError``), else ``None`` (an out-of-memory error, any other
    error: the run's own)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, CudaContextLost):  # a child rank's, told by its exit status
            return str(seen)
        seen = seen.__cause__ or seen.__context__
    return _first_line(exc, STICKY_CUDA)


class CudaContextLost(OSError):
    """The run met a CUDA error that leaves this process's CUDA context unusable (:func:`sticky_cuda_error`:
    an illegal address, a launch failure, an uncorrectable ECC error): the machine's fault (or at least not
    one the next run could escape), so the run is released (no retry spent) and the worker stops instead
    of failing every later run on a dead context."""


__all__ = [
    "RUN_ERROR_EXIT",
    "CONTEXT_LOST_EXIT",
    "RUN_POISONS_CUDA",
    "STICKY_CUDA",
    "FULL_ERRNOS",
    "CorpusMissing",
    "CudaContextLost",
    "DiskFull",
    "OtherResults",
    "RankDied",
    "ResultsLost",
    "ResultsReadOnly",
    "describe_exit",
    "full_path",
    "read_only_path",
    "run_poisoned_cuda",
    "sticky_cuda_error",
]
