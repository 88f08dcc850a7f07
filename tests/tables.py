"""A committed CSV (a report's stats.csv, pairs.csv) or JSON against one this machine writes: the same cells, text
exactly and numbers to a relative 1e-9. The CSVs print floats at full precision, and their last digits follow
the CPU (numpy and BLAS pick their vector loops by CPU model: a p of 7.5e-10 moved in its 15th digit between
two CI machines), while a code change moves a statistic far beyond 1e-9."""

from __future__ import annotations

import csv
import io
import math


def same_table(new: bytes, old: bytes) -> bool:
    """Whether two CSVs hold the same cells: text equal, numbers within a relative 1e-9."""
    rows_new = list(csv.reader(io.StringIO(new.decode())))
    rows_old = list(csv.reader(io.StringIO(old.decode())))
    if len(rows_new) != len(rows_old) or any(len(a) != len(b) for a, b in zip(rows_new, rows_old)):
        return False
    for a, b in zip((c for row in rows_new for c in row), (c for row in rows_old for c in row)):
        if a == b:
            continue
        try:
            x, y = float(a), float(b)
        except ValueError:
            return False
        if not math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-300):
            return False
    return True


def same_json(new, old) -> bool:
    """Whether two parsed JSON values are equal: text, keys and lengths exactly, numbers within a relative 1e-9."""
    if isinstance(old, dict):
        return (
            isinstance(new, dict) and new.keys() == old.keys() and all(same_json(new[k], old[k]) for k in old)
        )
    if isinstance(old, list):
        return isinstance(new, list) and len(new) == len(old) and all(map(same_json, new, old))
    if isinstance(old, float) and isinstance(new, int | float) and not isinstance(new, bool):
        return math.isclose(new, old, rel_tol=1e-9, abs_tol=1e-300)
    return type(new) is type(old) and new == old
