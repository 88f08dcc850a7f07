"""Write tuned settings into a grid file, keeping its comments and layout (tomlkit).

``harness tune --show NAME --write-grid GRID.toml`` freezes a tuning study's best
parameters into the grid before it is queued (DESIGN section 9): into ``[train]`` (every
variant) or ``[train.VARIANT]`` (one variant). With a source grid and a new name
(``--grid SRC.toml --write-grid NEW.toml --grid-name NEW``) the result is a new grid file:
SRC's text with ``name = NEW`` and the settings, its relative corpus rewritten so it still
names the same folder from NEW's folder. :func:`corpus_by_content` names a grid's corpus by its content
instead of its path (an archive's grid file). The new text is checked as a grid
(:func:`harness.scheduling.grids.grid.parse_grid`) before it replaces the file atomically, so a
grid is never left half-written or invalid.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.common.files import atomic_write
from harness.corpus.spec import is_local, parse_ref, resolve_corpus
from harness.scheduling.grids.grid import load_grid, parse_grid


def write_train(
    path: str | os.PathLike,
    overrides: Mapping[str, Any],
    *,
    variant: str | None = None,
    source: str | os.PathLike | None = None,
    name: str | None = None,
) -> list[str]:
    """Set ``overrides`` (TrainConfig field -> value) in the grid file's ``[train]`` table, or in
    ``[train.VARIANT]`` with ``variant``; every other line and comment stays as it was.

    Args:
        path: the grid file to write.
        overrides: TrainConfig field -> value.
        variant: write ``[train.VARIANT]`` instead of ``[train]``.
        source: the grid file to start from (default: ``path`` itself); its relative corpus
            is rewritten relative to ``path``'s folder.
        name: the written grid's ``name`` (default: the source's).

    Returns:
        One line per change: ``train.lr: 0.002 -> 0.0035`` (``(unset)`` where it was not set),
        ``name: 'a' -> 'b'``, ``corpus: ...``.

    Raises:
        FileNotFoundError: no such grid file.
        ValueError: the file is not a valid grid before or after the edit (the message names
            the key), or ``variant`` is not one of its variants.
    """
    import tomlkit  # lazy: only a grid edit

    path = Path(path)
    source = Path(source) if source is not None else path
    grid = load_grid(source)  # refuse to edit a file that is not a grid already
    if variant is not None and variant not in grid.variants:
        raise ValueError(
            f"{source}: variant {variant!r} is not in its [variants] ({', '.join(grid.variants)})"
        )
    doc = tomlkit.parse(source.read_text(encoding="utf-8-sig"))  # as load_grid: a BOM is dropped
    changes = []
    if name is not None and name != grid.name:
        changes.append(f"name: {grid.name!r} -> {name!r}")
        doc["name"] = name
    folder, new_folder = source.resolve().parent, path.resolve().parent
    if (
        folder != new_folder
        and not grid.corpus.startswith("hf:")
        and not Path(grid.corpus).expanduser().is_absolute()
    ):
        moved = os.path.relpath(
            resolve_corpus(grid.corpus, folder), new_folder
        )  # the same folder from path's
        changes.append(f"corpus: {grid.corpus!r} -> {moved!r}")
        doc["corpus"] = moved
    if "train" not in doc:
        doc.add(tomlkit.nl())
        doc["train"] = tomlkit.table()
    table = doc["train"]
    label = "train"
    if variant is not None:
        if variant not in table:
            table[variant] = tomlkit.table()
        table, label = table[variant], f"train.{variant}"
    before = grid.train_by_variant.get(variant, {}) if variant else grid.train
    for key, value in overrides.items():
        changes.append(f"{label}.{key}: {before.get(key, '(unset)')!r} -> {value!r}")
        table[key] = value
    text = tomlkit.dumps(doc)
    parse_grid(tomllib.loads(text), path=path)  # the edited grid must still be a grid
    atomic_write(path, text.encode("utf-8"))
    return changes


#: The comment that replaces one on a grid file's corpus line when :func:`corpus_by_content` names it by content.
BY_CONTENT_COMMENT = (
    "the corpus by its content (harness archive): `harness queue` this file with --corpus PATH"
)


def corpus_by_content(text: bytes, ref: str) -> bytes:
    """The grid file ``text`` with its ``corpus`` path (relative or absolute, as the file names it) replaced
    by the reference ``ref`` (``corpus-sha256:<fingerprint>:<name>``, :func:`harness.corpus.spec.corpus_ref`),
    every other line and comment as it was: what ``harness archive`` shares (docs/sharing.md), since a path
    names the writer's machine and a relative one is read from wherever the file lands (an import's
    ``RESULTS/grids/``). A comment on the corpus line, which described the path, says what the reference is
    instead (:data:`BY_CONTENT_COMMENT`). ``text`` itself where its corpus is not a path (a hub spec, a
    reference already, no ``corpus`` key).

    Raises:
        ValueError: ``text`` is not TOML, or ``ref`` not a corpus reference.
    """
    import tomlkit  # lazy: only a grid edit

    if parse_ref(ref) is None:
        raise ValueError(f"{ref!r} is not a corpus reference (corpus-sha256:<fingerprint>:<name>)")
    source = text.decode("utf-8-sig")  # as load_grid: a BOM is dropped
    doc = tomlkit.parse(source)
    old = doc.get("corpus")
    if not isinstance(old, str) or not is_local(str(old)):
        return text
    new = tomlkit.string(ref)
    if old.trivia.comment:
        new.comment(BY_CONTENT_COMMENT)
        new.trivia.comment_ws = old.trivia.comment_ws
    doc["corpus"] = new
    out = tomlkit.dumps(doc)
    if {**tomllib.loads(source), "corpus": ref} != tomllib.loads(out):  # only the corpus changed
        raise ValueError("the grid file's corpus could not be replaced alone")
    return out.encode("utf-8")


__all__ = ["BY_CONTENT_COMMENT", "corpus_by_content", "write_train"]
