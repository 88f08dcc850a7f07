"""Write tuned settings into a grid file, keeping its comments and layout (tomlkit).

``harness tune --show NAME --write-grid GRID.toml`` freezes a tuning study's best
parameters into the grid before it is queued (DESIGN section 9): into ``[train]`` (every
variant) or ``[train.VARIANT]`` (one variant). The new text is checked as a grid
(:func:`harness.scheduling.grid.parse_grid`) before it replaces the file atomically, so a
grid is never left half-written or invalid.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.files import atomic_write


def write_train(path: str | os.PathLike, overrides: Mapping[str, Any], *, variant: str | None = None) -> list[str]:
    """Set ``overrides`` (TrainConfig field -> value) in the grid file's ``[train]`` table, or in
    ``[train.VARIANT]`` with ``variant``; every other line and comment stays as it was.

    Returns:
        One line per setting: ``train.lr: 0.002 -> 0.0035`` (``(unset)`` where it was not set).

    Raises:
        FileNotFoundError: no such grid file.
        ValueError: the file is not a valid grid before or after the edit (the message names
            the key), or ``variant`` is not one of its variants.
    """
    import tomlkit

    from harness.scheduling.grid import load_grid, parse_grid

    path = Path(path)
    grid = load_grid(path)  # refuse to edit a file that is not a grid already
    if variant is not None and variant not in grid.variants:
        raise ValueError(f"{path}: variant {variant!r} is not in its [variants] ({', '.join(grid.variants)})")
    doc = tomlkit.parse(path.read_text(encoding="utf-8"))
    if "train" not in doc:
        doc.add(tomlkit.nl())
        doc["train"] = tomlkit.table()
    table = doc["train"]
    label = "train"
    if variant is not None:
        if variant not in table:
            table[variant] = tomlkit.table()
        table, label = table[variant], f"train.{variant}"
    before = (grid.train_by_variant.get(variant, {}) if variant else grid.train)
    changes = []
    for key, value in overrides.items():
        changes.append(f"{label}.{key}: {before.get(key, '(unset)')!r} -> {value!r}")
        table[key] = value
    text = tomlkit.dumps(doc)
    parse_grid(tomllib.loads(text), path=path)  # the edited grid must still be a grid
    atomic_write(path, text.encode("utf-8"))
    return changes


__all__ = ["write_train"]
