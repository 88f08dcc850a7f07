"""How a run is executed, as one object: :class:`ExecutionSettings` (DESIGN section 11).

Built once from the command line (``harness run``, ``harness work``; ``harness launch`` passes
its workers ``harness work`` arguments), merged with what the run's grid sets (``[train] compile``,
``micro_batch_size``, ``loggers``, ``routing``: :data:`harness.design.train_table.EXECUTION_KEYS`) once, by
:meth:`ExecutionSettings.for_run` when the run is built, and passed whole: the worker loop
(:func:`harness.scheduling.workers.loop.work`) -> :func:`harness.train.runner.train_run` -> each
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
from typing import TYPE_CHECKING, Any

from harness.models.numerics import DEFAULT_ROUTING

if TYPE_CHECKING:
    from harness.design.config import RunConfig


@dataclass(frozen=True)
class ExecutionSettings:
    """Where and how one run trains; none of it enters the protocol hash.

    Attributes:
        progress: show progress (a bar on a terminal, else lines; ``$HARNESS_PROGRESS``).
        accelerator: ``auto``, ``cpu``, ``gpu``, ``cuda`` or ``mps`` (Lightning's).
        devices: ranks per node, a positive int or ``auto`` (every visible GPU on a GPU, 1 elsewhere).
        strategy: Lightning strategy (``auto`` is ``ddp`` when this process starts several ranks).
        num_nodes: nodes of the run, each rank started by torchrun or srun.
        micro_batch_size: sequences per forward+backward on one rank (DESIGN section 11): a step's
            global batch runs as micro-batches of this many sequences, gradients accumulating; ``auto``:
            the largest that fits, probed on CUDA, the whole per-rank batch on a CPU
            (:mod:`harness.train.microbatch`); ``None``: the grid's ``[train] micro_batch_size``, else ``auto``.
        loggers: trackers streaming the run's curves (:data:`harness.design.train_table.TRACKERS`), besides
            the grid's ``[train] loggers``.
        threads: torch CPU threads per process (0: torch's default; rank 0's count for a child rank).
        stop_after_tokens: checkpoint and stop after this many tokens (a planned stop), ``None``: no stop.
        compile: wrap the model in ``torch.compile`` (``True``, ``False``, ``auto``: on CUDA, not on a
            CPU, :func:`resolve_compile`); ``None``: the grid's ``[train] compile``, else ``auto``.
        routing: how routing sites are computed, ``two_phase`` or ``per_site``
            (:data:`harness.models.numerics.ROUTING_PATHS`: the same function, each path with its own numerics
            revision, recorded per run); ``None``: the grid's ``[train] routing``, else
            :data:`~harness.models.numerics.DEFAULT_ROUTING`.
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
    compile: bool | str | None = None
    routing: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "loggers", tuple(self.loggers))  # JSON gives a list back

    def replace(self, **changes: Any) -> ExecutionSettings:
        """A copy with ``changes`` (field names; :func:`dataclasses.replace`).

        Raises:
            TypeError: a name that is not a field.
        """
        return dataclasses.replace(self, **changes)

    def for_run(self, config: RunConfig) -> ExecutionSettings:
        """These settings for the run ``config``: the one place where the command line's settings and the
        ones its grid sets (:meth:`~harness.design.config.RunConfig.execution`) meet. A ``compile`` or
        ``micro_batch_size`` left ``None`` here takes the grid's, else ``auto``; a ``routing`` left ``None``
        the grid's, else :data:`~harness.models.numerics.DEFAULT_ROUTING`; the loggers are the grid's, then
        these. Applying it twice gives the same settings (a child rank applies it again).

        Raises:
            ValueError: a bad value in the grid's ``[train]`` table.
        """
        grid = config.execution()
        return self.replace(
            compile=grid.get("compile", "auto") if self.compile is None else self.compile,
            micro_batch_size=grid.get("micro_batch_size", "auto")
            if self.micro_batch_size is None
            else self.micro_batch_size,
            loggers=tuple(dict.fromkeys((*grid.get("loggers", ()), *self.loggers))),
            routing=grid.get("routing", DEFAULT_ROUTING) if self.routing is None else self.routing,
        )

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


def resolve_compile(setting: bool | str, device_type: str) -> bool:
    """The ``compile`` setting made concrete: ``auto`` compiles on CUDA only (DESIGN section 11)."""
    return device_type == "cuda" if setting == "auto" else bool(setting)


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


__all__ = ["ExecutionSettings", "resolve_compile", "parse_devices", "set_threads"]
