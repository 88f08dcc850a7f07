"""The fence of a queued run: a :class:`harness.train.fencing.Fence` backed by the run's claim.

The worker loop (:mod:`harness.scheduling.workers.loop`) builds one :class:`ClaimFence` per
claimed run and trains the run inside :func:`harness.train.fencing.fenced`, so
:func:`harness.train.train_run` checks the lease before each checkpoint and writes the
result file inside :meth:`ClaimFence.holding`. Checks of the queue are retried while the
storage is briefly unreachable, like every other queue operation of a worker. A worker whose
results folder is watched (:class:`~harness.train.fencing.FolderWatch`) uses :class:`WatchedFence`,
which also stops the run, writing nothing, once the folder is lost.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any

from harness.scheduling.queue.lease import Heartbeat
from harness.train.fencing import Fence, FolderWatch, LeaseLost

if TYPE_CHECKING:
    from harness.scheduling.queue.run_queue import RunQueue
    from harness.scheduling.queue.trials import Claim


class ClaimFence(Fence):
    """Fence of one claim (see :mod:`harness.train.fencing` for the three checks).

    Args:
        queue: the run queue the claim came from.
        claim: the claim (owner ``claim.owner``, epoch ``claim.epoch``).
        heartbeat: the claim's heartbeat; a beat the storage refused marks the lease lost
            at no cost, and beats are paused while :meth:`holding` uses the storage.
        call: how queue operations are called (the worker's retrying wrapper); default: directly.
    """

    def __init__(
        self, queue: RunQueue, claim: Claim, heartbeat: Heartbeat, call: Callable[..., Any] | None = None
    ) -> None:
        self.queue, self.claim, self.heartbeat = queue, claim, heartbeat
        self._call = call or (lambda method, *args: method(*args))
        self.epoch = claim.epoch

    @property
    def owner(self) -> str:
        return self.claim.owner

    def lost(self) -> str | None:
        if self.heartbeat.lost:
            return f"lease lost (epoch {self.epoch}): the queue refused this worker's heartbeat"
        return None

    def check(self, what: str) -> None:
        why = self._call(self.queue.lease_lost, self.claim)
        if why is not None:
            raise LeaseLost(self.claim.run_id, f"{why}; {what} not written")

    @contextmanager
    def holding(self, what: str) -> Iterator[None]:
        with self.heartbeat.paused(), ExitStack() as stack:
            try:  # entering is retried while the storage is unreachable; the block runs once
                self._call(lambda: stack.enter_context(self.queue.holding(self.claim)))
            except LeaseLost as exc:
                raise LeaseLost(exc.run_id, f"{exc.reason}; {what} not written") from None
            yield


class WatchedFence(ClaimFence):
    """A :class:`ClaimFence` that also stops the run, writing nothing, once the results folder is lost
    (so a checkpoint or result never re-creates the folder tree)."""

    def __init__(self, watch: FolderWatch, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.watch = watch

    def _folder(self, what: str) -> None:
        why = self.watch.look()
        if why is not None:
            raise LeaseLost(
                self.claim.run_id, f"results folder {self.watch.folder} {why}; {what} not written"
            )

    def lost(self) -> str | None:
        if self.watch.gone is not None:
            return f"results folder {self.watch.folder} {self.watch.gone}"
        return super().lost()

    def check(self, what: str) -> None:
        self._folder(what)
        super().check(what)

    @contextmanager
    def holding(self, what: str) -> Iterator[None]:
        self._folder(what)
        with super().holding(what):
            yield


__all__ = ["ClaimFence", "WatchedFence"]
