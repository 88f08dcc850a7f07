"""How a run is executed, as one object: :class:`ExecutionSettings` (DESIGN section 11).

Built once from the command line (``harness run``, ``harness work``; ``harness launch`` passes
its workers ``harness work`` arguments) and passed whole: the worker loop
(:func:`harness.scheduling.worker.work`) -> :func:`harness.train.runner.train_run` -> each
child rank, serialised whole (:meth:`ExecutionSettings.to_json` / :meth:`ExecutionSettings.from_json`),
so a rank cannot miss a field. Execution settings change how a run is computed, never what is
computed: they stay outside the run id and the protocol hash (DESIGN section 11); the micro-batch
size and world size are recorded per run (``runs.micro_batch_size``, ``runs.world_size``).

Light on purpose (no torch): the commands build it before anything heavy loads.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ExecutionSettings:
    """Where and how one run trains; none of it enters the protocol hash.

    Attributes:
        progress: show progress (a bar on a terminal, else lines; ``$HARNESS_PROGRESS``).
        accelerator: ``auto``, ``cpu``, ``gpu``, ``cuda`` or ``mps`` (Lightning's).
        devices: ranks per node, a positive int or ``auto`` (every visible GPU on a GPU, 1 elsewhere).
        strategy: Lightning strategy (``auto`` is ``ddp`` when this process starts several ranks).
        num_nodes: nodes of the run, each rank started by torchrun or srun.
        micro_batch_size: sequences per forward+backward on one rank, ``auto``, or ``None`` for the
            config's ``micro_batch_size`` (:mod:`harness.train.microbatch`).
        loggers: trackers streaming the run's curves, besides its ``[train] loggers``
            (:data:`harness.design.config.TRACKERS`).
        threads: torch CPU threads per process (0: torch's default; rank 0's count for a child rank).
        stop_after_tokens: checkpoint and stop after this many tokens (a planned stop), ``None``: no stop.
    """

    progress: bool = True
    accelerator: str = "auto"
    devices: int | str = 1
    strategy: str = "auto"
    num_nodes: int = 1
    micro_batch_size: int | str | None = None
    loggers: tuple[str, ...] = ()
    threads: int = 0
    stop_after_tokens: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "loggers", tuple(self.loggers))  # JSON gives a list back

    def replace(self, **changes: Any) -> ExecutionSettings:
        """A copy with ``changes`` (field names; :func:`dataclasses.replace`).

        Raises:
            TypeError: a name that is not a field.
        """
        return dataclasses.replace(self, **changes)

    def to_json(self) -> str:
        """Every field, as JSON (what a child rank gets; :meth:`from_json` reads it back)."""
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ExecutionSettings:
        """The settings :meth:`to_json` wrote.

        Raises:
            TypeError: a field this class does not have (a child rank of another version).
        """
        return cls(**json.loads(text))


def parse_devices(value: str) -> int | str:
    """``--devices``: a positive integer or ``auto``.

    Raises:
        ValueError: anything else.
    """
    if str(value).isdigit() and int(value) > 0:
        return int(value)
    if value == "auto":
        return value
    raise ValueError(f"--devices {value!r}: expected a positive integer or 'auto'")


def set_threads(threads: int) -> None:
    """``--threads N`` of ``harness run`` / ``harness work``: torch's CPU threads (0 = torch's default).

    Raises:
        ValueError: ``N`` below 0 or above this machine's CPU cores (``os.cpu_count()``).
    """
    cores = os.cpu_count() or 1
    if not 0 <= threads <= cores:
        raise ValueError(
            f"--threads {threads}: expected 0 (torch's default) to {cores} (this machine's CPU cores)"
        )
    if threads:
        import torch  # lazy: torch loads only to train

        torch.set_num_threads(threads)


__all__ = ["ExecutionSettings", "parse_devices", "set_threads"]
