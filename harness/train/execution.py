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

from harness.design.settings import BY_NAME, TABLE_EXECUTION

if TYPE_CHECKING:
    from harness.design.config import RunConfig


#: The declared default of each setting only the command line sets (:mod:`harness.design.settings`).
_DEFAULT = {name: s.default for name, s in BY_NAME.items() if not s.in_table}


@dataclass(frozen=True)
class ExecutionSettings:
    """Where and how one run trains; none of it enters the protocol hash. Each field's meaning, default and
    whether it re-rounds a run: its declaration in :data:`harness.design.settings.SETTINGS` (the same name),
    except:

    Attributes:
        progress: show progress (a bar on a terminal, else lines; ``$HARNESS_PROGRESS``).
        accelerator: ``auto``, ``cpu``, ``gpu``, ``cuda`` or ``mps`` (Lightning's).
        strategy: Lightning strategy (``auto`` is ``ddp`` when this process starts several ranks).
        compile, micro_batch_size, routing: ``None`` here takes the grid's ``[train]`` value, else the declared
            default (:meth:`for_run`).
        loggers: trackers streaming the run's curves, besides the grid's ``[train] loggers``.
        threads: for a child rank, rank 0's count.
    """

    progress: bool = True
    accelerator: str = "auto"
    devices: int | str = _DEFAULT["devices"]
    strategy: str = "auto"
    num_nodes: int = _DEFAULT["num_nodes"]
    micro_batch_size: int | str | None = None
    loggers: tuple[str, ...] = ()
    threads: int = _DEFAULT["threads"]
    stop_after_tokens: int | None = _DEFAULT["stop_after_tokens"]
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
        ones its grid sets (:meth:`~harness.design.config.RunConfig.execution`) meet. A setting a ``[train]``
        table may set (:data:`harness.design.settings.TABLE_EXECUTION`: ``compile``, ``micro_batch_size``,
        ``routing``) left ``None`` here takes the grid's, else its declared default (``auto``, ``auto``,
        :data:`~harness.models.numerics.DEFAULT_ROUTING`); the loggers are the grid's, then these. Applying it
        twice gives the same settings (a child rank applies it again).

        Raises:
            ValueError: a bad value in the grid's ``[train]`` table.
        """
        grid = config.execution()
        changes: dict[str, Any] = {}
        for setting in TABLE_EXECUTION:
            mine = getattr(self, setting.name)
            if setting.kind == "tuple":
                changes[setting.name] = tuple(dict.fromkeys((*grid.get(setting.name, ()), *mine)))
            else:
                changes[setting.name] = grid.get(setting.name, setting.default) if mine is None else mine
        return self.replace(**changes)

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


def check_threads(threads: int) -> None:
    """``--threads N`` checked without loading torch (:func:`set_threads` sets it).

    Raises:
        ValueError: ``N`` below 0 or above this machine's CPU cores (``os.cpu_count()``).
    """
    cores = os.cpu_count() or 1
    if not 0 <= threads <= cores:
        raise ValueError(
            f"--threads {threads}: expected 0 (torch's default) to {cores} (this machine's CPU cores)"
        )


def set_threads(threads: int) -> None:
    """``--threads N`` of ``harness run`` / ``harness work``: torch's CPU threads (0 = torch's default).

    Raises:
        ValueError: ``N`` out of range (:func:`check_threads`).
    """
    check_threads(threads)
    if threads:
        import torch  # lazy: torch loads only to train

        torch.set_num_threads(threads)


__all__ = ["ExecutionSettings", "check_threads", "resolve_compile", "parse_devices", "set_threads"]
