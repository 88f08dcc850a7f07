"""A ``[train]`` key's type, and its value read from text (DESIGN section 4).

:func:`train_keys` lists every key a ``[train]`` table may hold with the type of its values (the grid
check, :func:`harness.scheduling.grids.grid.check_train`, tests a TOML value against it);
:func:`parse_train_value` converts a command-line string (``harness run --set KEY=VALUE``,
``--micro-batch-size``) to that type.

Owns reading a ``[train]`` value from text. Must not decide which keys are execution settings
(:func:`harness.design.train_table.split_train` does) nor hold defaults (:mod:`harness.design.config`).
"""

from __future__ import annotations

from dataclasses import fields

from harness.design.config import TrainConfig
from harness.design.train_table import AUTO_FIELDS, EXECUTION_KEYS


def train_keys() -> dict[str, str]:
    """Every key a ``[train]`` table may hold -> the type of its values (``int``, ``float``, ``str``,
    ``bool``, ``tuple``): :class:`TrainConfig`'s fields, then :data:`EXECUTION_KEYS`."""
    return {**{f.name: str(f.type) for f in fields(TrainConfig)}, **EXECUTION_KEYS}


def parse_train_value(key: str, raw: str):
    """Convert a command-line string to the type of ``[train]`` key ``key`` (``--set KEY=VALUE``,
    ``--micro-batch-size``): a :class:`TrainConfig` field or an execution setting (:data:`EXECUTION_KEYS`).

    Ints accept ``_`` separators (``100_000``); bools accept true/false/1/0/yes/no; a tuple is
    comma-separated; ``auto`` where :data:`AUTO_FIELDS` allows it.

    Raises:
        ValueError: unknown key (listing the allowed ones) or a value of the wrong type.
    """
    types = train_keys()
    if key not in types:
        raise ValueError(f"unknown training setting {key!r}; allowed: {sorted(types)}")
    kind, text = types[key], raw.strip()
    if key in AUTO_FIELDS and text.lower() == "auto":
        return "auto"
    try:
        if kind == "int":
            return int(text.replace("_", ""))
        if kind == "float":
            return float(text.replace("_", ""))
        if kind == "tuple":
            return tuple(t.strip() for t in text.split(",") if t.strip())
        if kind == "bool":
            low = text.lower()
            if low in ("true", "1", "yes", "on"):
                return True
            if low in ("false", "0", "no", "off"):
                return False
            raise ValueError
    except ValueError:
        allowed = f"{'an' if kind == 'int' else 'a'} {kind}" + (" or 'auto'" if key in AUTO_FIELDS else "")
        raise ValueError(f"{key}={raw!r} is not {allowed}") from None
    return text
