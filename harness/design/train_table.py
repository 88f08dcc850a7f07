"""The ``[train]`` table (DESIGN sections 4 and 11): its execution keys, the one rule for a value's type
(with ``auto``), a value read from text, and the one split into the protocol's settings and the
execution settings.

A ``[train]`` table (a grid's, ``harness run --set``'s, :attr:`harness.design.config.RunConfig.train`)
holds :class:`harness.design.config.TrainConfig`'s fields (the protocol's settings, in the protocol
hash; :func:`harness.design.config.train_keys` lists every key with its type) and the execution
settings of :data:`EXECUTION_KEYS` (``compile``, ``micro_batch_size``, ``loggers``, ``routing``: how a run is
computed, never what; fields of :class:`harness.train.execution.ExecutionSettings`, outside the
protocol hash). Every one is declared once, in :mod:`harness.design.settings`. Here, once:

* :func:`value_problem` / :func:`check_value` -- the value-type rule every reader applies: the grid's
  check, :class:`~harness.design.config.TrainConfig`, :func:`execution_overrides` and :func:`parse_value`;
  ``auto`` where :data:`AUTO_FIELDS` allows it;
* :func:`parse_value` -- a value read from text (``--set KEY=VALUE``, ``--micro-batch-size``, ``--space``);
* :func:`split_train` -- the only reader that decides which key is which:
  :func:`harness.design.config.train_config` takes its protocol half,
  :meth:`harness.design.config.RunConfig.execution` its execution half (checked at queue time, merged
  with the command line's once by :meth:`harness.train.execution.ExecutionSettings.for_run`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from harness.design.settings import BY_NAME, TABLE_EXECUTION, TRACKERS

#: Execution settings a grid's ``[train]`` table may set -> the type of their values (their declarations:
#: :data:`harness.design.settings.TABLE_EXECUTION`). Outside :class:`TrainConfig` and the protocol hash
#: (DESIGN sections 11 and 13).
EXECUTION_KEYS = {s.name: s.kind for s in TABLE_EXECUTION}
#: The ``[train]`` settings that also take ``"auto"`` (resolved per machine).
AUTO_FIELDS = tuple(s.name for s in BY_NAME.values() if s.auto and s.in_table)


#: The Python types of each kind of ``[train]`` value (a float key takes an int too; a bool is no int).
_PY_TYPES = {"int": int, "float": (int, float), "bool": bool, "str": str}


def value_problem(key: str, value, kind: str) -> str | None:
    """What is wrong with ``value`` as setting ``key`` of type ``kind`` (``int``, ``float``, ``str``,
    ``bool``), as ``"<value> is not a(n) <kind>[ or 'auto']"``; ``None`` when it is fine. ``auto`` is
    fine where :data:`AUTO_FIELDS` allows it; a ``tuple`` (``loggers``) is :func:`check_loggers`'s."""
    if (key in AUTO_FIELDS and value == "auto") or kind not in _PY_TYPES:
        return None
    if isinstance(value, _PY_TYPES[kind]) and (kind == "bool" or not isinstance(value, bool)):
        return None
    auto = " or 'auto'" if key in AUTO_FIELDS else ""
    return f"{value!r} is not {'an' if kind == 'int' else 'a'} {kind}{auto}"


def check_value(key: str, value, kind: str):
    """``value`` of setting ``key`` (type ``kind``), checked by the one rule (:func:`value_problem`; a
    ``tuple`` by :func:`check_loggers`); an int widened to a float where a float is asked for.

    Raises:
        ValueError: ``key=value is not a(n) kind [or 'auto']``; a ``tuple`` as :func:`check_loggers`.
    """
    if kind == "tuple":
        return check_loggers(value)
    problem = value_problem(key, value, kind)
    if problem is not None:
        raise ValueError(f"{key}={problem}")
    if kind == "float" and value != "auto":
        return float(value)
    return value


def parse_value(key: str, raw: str, keys: Mapping[str, str]):
    """``raw`` (a command-line string: ``--set KEY=VALUE``, ``--micro-batch-size``, a ``--space`` choice)
    read as the value of ``key``, whose type ``keys`` gives (:func:`harness.design.config.train_keys`, or
    :data:`EXECUTION_KEYS` for an execution setting), then checked by :func:`check_value`.

    Ints accept ``_`` separators (``100_000``); bools accept true/false/1/0/yes/no/on/off; a tuple is
    comma-separated; ``auto`` where :data:`AUTO_FIELDS` allows it.

    Raises:
        ValueError: unknown key (listing the allowed ones) or a value of the wrong type.
    """
    if key not in keys:
        raise ValueError(f"unknown training setting {key!r}; allowed: {sorted(keys)}")
    kind, text = keys[key], raw.strip()
    if key in AUTO_FIELDS and text.lower() == "auto":
        return "auto"
    try:
        if kind == "int":
            value = int(text.replace("_", ""))
        elif kind == "float":
            value = float(text.replace("_", ""))
        elif kind == "tuple":
            value = tuple(t.strip() for t in text.split(",") if t.strip())
        elif kind == "bool":
            low = text.lower()
            if low not in ("true", "1", "yes", "on", "false", "0", "no", "off"):
                raise ValueError
            value = low in ("true", "1", "yes", "on")
        else:
            value = text
    except ValueError:
        allowed = f"{'an' if kind == 'int' else 'a'} {kind}" + (" or 'auto'" if key in AUTO_FIELDS else "")
        raise ValueError(f"{key}={raw!r} is not {allowed}") from None
    return check_value(key, value, kind)


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
    for setting in TABLE_EXECUTION:
        if setting.name not in table:
            continue
        out[setting.name] = check_value(setting.name, table[setting.name], setting.kind)
        if setting.kind != "tuple":  # loggers: checked by check_loggers
            setting.check(table[setting.name])
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
    "EXECUTION_KEYS",
    "AUTO_FIELDS",
    "value_problem",
    "check_value",
    "parse_value",
    "check_loggers",
    "execution_overrides",
    "TrainTable",
    "split_train",
]
