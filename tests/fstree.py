"""The file system under a folder, as a value: a refused command leaves it as it found it.

``tree(root)`` maps every path below ``root`` (relative, POSIX) to what it is: a folder, a link
and its target, or a file and its SHA-256, so a file created and removed again leaves no trace
but a file written, truncated or left behind (an empty ``runs/``, a ``.lock``, a ``.harness-id``)
does. ``unchanged(*roots)`` asserts that around a block::

    with unchanged(tmp_path):
        assert cli(["import", str(archive), "--results", str(tmp_path / "res")]) == 2

A root that does not exist is recorded as absent, so a folder the command creates is caught too.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

ABSENT = "absent"


def tree(root: str | os.PathLike) -> dict[str, str] | str:
    """Every path below ``root`` -> ``"dir"``, ``"link -> TARGET"`` or ``"file SHA256"``
    (``root`` itself absent: :data:`ABSENT`). Links are not followed."""
    root = Path(root)
    if not root.exists() and not root.is_symlink():
        return ABSENT
    out: dict[str, str] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(folder, name)
            rel = p.relative_to(root).as_posix()
            if p.is_symlink():
                out[rel] = f"link -> {os.readlink(p)}"
            elif p.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = "file " + hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def changes(before: dict[str, str] | str, after: dict[str, str] | str) -> list[str]:
    """What differs between two :func:`tree` values, one readable line per path (and the root's own
    creation or removal)."""
    was, now = ({} if t == ABSENT else t for t in (before, after))
    out = (
        [f"root {'created' if before == ABSENT else 'removed'}"]
        if (before == ABSENT) != (after == ABSENT)
        else []
    )
    out += [f"added {p}" for p in sorted(set(now) - set(was))]
    out += [f"removed {p}" for p in sorted(set(was) - set(now))]
    out += [f"changed {p}" for p in sorted(set(was) & set(now)) if was[p] != now[p]]
    return out


@contextlib.contextmanager
def unchanged(*roots: str | os.PathLike) -> Iterator[None]:
    """Assert that nothing below any of ``roots`` was added, removed or changed by the block."""
    before = [tree(r) for r in roots]
    yield
    for root, was in zip(roots, before, strict=True):
        diff = changes(was, tree(root))
        assert not diff, f"{root} changed: " + "; ".join(diff[:10])
