"""The ``[train]`` table's two halves (DESIGN sections 4 and 11), split in this one place: the protocol's
settings (:class:`harness.design.config.TrainConfig`'s fields, in the protocol hash) and the execution
settings (:data:`EXECUTION_KEYS`: ``compile``, ``micro_batch_size``, ``loggers``).

Execution settings change how a run is computed, never what: fields of
:class:`harness.train.execution.ExecutionSettings`, outside the protocol hash. A grid (or ``harness run
--set``) keeps writing them in ``[train]``, as before they left :class:`~harness.design.config.TrainConfig`.
:func:`split_train` is the only reader that decides which key is which: :func:`harness.design.config.train_config`
takes its protocol half, :meth:`harness.design.config.RunConfig.execution` its execution half (checked at
queue time, merged with the command line's once by :meth:`harness.train.execution.ExecutionSettings.for_run`).
:func:`check_value` is the value-type rule both halves share.

Owns the execution keys, their value rules and the split. Must not know :class:`TrainConfig`'s fields or
defaults (:mod:`harness.design.config` does), nor read a command line.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from harness.models.numerics import ROUTING_PATHS

#: Live-curve trackers a run can stream to (``[train] loggers``, ``--logger``; harness.train.trackers).
TRACKERS = ("tensorboard", "wandb", "mlflow", "csv")
#: Execution settings a grid's ``[train]`` table may set, with the type of their values: ``compile``
#: (wrap the model in ``torch.compile``; ``auto``: on CUDA, not on a CPU), ``micro_batch_size``
#: (sequences per forward+backward on one rank; ``auto``: the largest that fits, :mod:`harness.train.microbatch`)
#: ``loggers`` (trackers that show the run's curves live, :data:`TRACKERS`; a TOML list, ``--set
#: loggers=a,b``) and ``routing`` (how routing sites are computed, :data:`~harness.models.numerics.ROUTING_PATHS`:
#: the same function, rounded differently, so each path has its numerics revision). Outside
#: :class:`TrainConfig` and the protocol hash (DESIGN sections 11 and 13).
EXECUTION_KEYS = {"compile": "bool", "micro_batch_size": "int", "loggers": "tuple", "routing": "str"}
#: The settings that also take ``"auto"`` (resolved per machine).
AUTO_FIELDS = ("compile", "micro_batch_size")


def check_value(key: str, value, kind: str):
    """``value`` of setting ``key`` (type ``kind``; ``auto`` where :data:`AUTO_FIELDS` allows it), an int
    widened to a float where a float is asked for.

    Raises:
        ValueError: ``key=value must be a(n) kind [or 'auto']``.
    """
    if key in AUTO_FIELDS and value == "auto":
        return value
    py = {"int": int, "float": float, "bool": bool, "str": str}[kind]
    if py is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, py) and not (py is int and isinstance(value, bool)):
        return value
    auto = " or 'auto'" if key in AUTO_FIELDS else ""
    raise ValueError(f"{key}={value!r} must be {'an' if kind == 'int' else 'a'} {kind}{auto}")


def check_loggers(names) -> tuple[str, ...]:
    """``names`` (a list or tuple of :data:`TRACKERS` names) as a tuple, each once, in order.

    Raises:
        ValueError: not a list of strings, or an unknown tracker (the message lists the allowed ones).
    """
    if (
        isinstance(names, str)
        or not isinstance(names, (list, tuple))
        or not all(isinstance(n, str) for n in names)
    ):
        raise ValueError(f"loggers={names!r} must be a list of names; allowed: {', '.join(TRACKERS)}")
    bad = [n for n in names if n not in TRACKERS]
    if bad:
        raise ValueError(f"logger {bad[0]!r} is not known; allowed: {', '.join(TRACKERS)}")
    return tuple(dict.fromkeys(names))


def execution_overrides(table: Mapping) -> dict:
    """The execution settings a ``[train]`` table (a grid's, ``--set``'s, :attr:`RunConfig.train`) sets,
    checked: key of :data:`EXECUTION_KEYS` -> value (``loggers`` a tuple); its other keys are ignored.

    Raises:
        ValueError: a value of the wrong type, a ``micro_batch_size`` below 1, an unknown tracker or
            routing path.
    """
    out = {}
    for key, kind in EXECUTION_KEYS.items():
        if key not in table:
            continue
        value = table[key]
        out[key] = check_loggers(value) if kind == "tuple" else check_value(key, value, kind)
        if key == "micro_batch_size" and value != "auto" and value <= 0:
            raise ValueError(f"micro_batch_size={value} must be 'auto' or a positive number of sequences")
        if key == "routing" and value not in ROUTING_PATHS:
            raise ValueError(f"routing={value!r} is not a routing path; allowed: {', '.join(ROUTING_PATHS)}")
    return out


class TrainTable(NamedTuple):
    """A ``[train]`` table split in two: ``protocol`` (every key that is not an execution setting, for
    :class:`~harness.design.config.TrainConfig`, unchecked here) and ``execution`` (the execution settings,
    checked: :func:`execution_overrides`)."""

    protocol: dict
    execution: dict


def split_train(table: Mapping) -> TrainTable:
    """The one split of a ``[train]`` table (a grid's, ``--set``'s, :attr:`RunConfig.train
    <harness.design.config.RunConfig.train>`) into its protocol and execution halves.

    Raises:
        ValueError: an execution setting of the wrong type (:func:`execution_overrides`).
    """
    execution = execution_overrides(table)
    return TrainTable({k: v for k, v in table.items() if k not in EXECUTION_KEYS}, execution)


__all__ = [
    "TRACKERS",
    "EXECUTION_KEYS",
    "AUTO_FIELDS",
    "check_value",
    "check_loggers",
    "execution_overrides",
    "TrainTable",
    "split_train",
]
