"""Where a grid's corpus is, checked by what it is: re-pointing and a worker's look (DESIGN sections 4
and 10; docs/scaling-out.md).

A grid's corpus is its document fingerprint (:mod:`harness.corpus.fingerprint`), recorded in the
queue with the corpus's file name and the path workers read it from
(:meth:`~harness.scheduling.queue.run_queue.RunQueue.bind_corpus`, :func:`binding`). ``harness
import``, ``queue``, ``topup`` and ``work`` take ``--corpus PATH``: :func:`check_repoint` reads the
fingerprint of the text at PATH and refuses another text with one line naming both fingerprints,
before anything is written.

A worker resolves each claimed run's corpus with :class:`CorpusLocator`: its own ``--corpus``, else
the path the queue records, else the run's config; the text there is checked once per grid and path
against the fingerprint `queue` recorded (the prepared cache's manifest answers without reading it).
A corpus that is not there is the machine's fault, not the run's
(:class:`~harness.common.faults.CorpusMissing`), and another text there (a ``--corpus`` of another
text, a corpus changed since the grid was queued) a configuration error (``ValueError``): each said in
one line naming the path, the fingerprints and the commands that re-point the grid. The worker then
releases the run with no retry spent and stops (:func:`harness.scheduling.workers.retry.located`).

The queue and a claim are used through what they offer (``queue.corpus_of``, ``queue.runs``;
``claim.grid``, ``claim.config``): this package sits below the scheduling that defines them.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple

from harness.common.faults import CorpusMissing
from harness.corpus.cached import fingerprint_of
from harness.corpus.key import CorpusKey, repointed
from harness.corpus.spec import corpus_name, exists, is_local, parse_ref


def expected_corpus(record: dict | None, key: CorpusKey, cache_dir: Path | None) -> tuple[str, str] | None:
    """``(fingerprint, name)`` a grid's corpus must have: the queue's ``record`` of it
    (:meth:`~harness.scheduling.queue.run_queue.RunQueue.corpus_of`), else the reference in ``key``
    (an imported run), else the fingerprint of ``key``'s own corpus where it is here; ``None`` for a hub
    corpus or a queue with no record whose path is gone (nothing to check against)."""
    if record is not None:
        return record["fingerprint"], record["name"]
    ref = parse_ref(key.corpus)
    if ref is not None:
        return ref
    if is_local(key.corpus) and exists(key.corpus):
        fp = fingerprint_of(key, cache_dir)
        return (fp, corpus_name(key.corpus)) if fp is not None else None
    return None


def repoint_hint(grid: str) -> str:
    """The commands that point ``grid`` at a copy of its corpus on this machine whatever the grid, for a
    line saying it is not here (or not its text): ``harness work --corpus`` (one worker) and ``harness
    queue GRID.toml --corpus`` (every worker; ``harness topup`` re-points only a grid it can add seeds to)."""
    return (
        f"`harness work --corpus PATH` (this worker) or `harness queue {grid}.toml --corpus PATH` (every "
        f"worker; {grid}.toml: the grid's file, RESULTS/grids/{grid}.toml for an imported grid)"
    )


def check_repoint(
    expected: tuple[str, str] | None,
    key: CorpusKey,
    path: str,
    cache_dir: Path | None,
    *,
    grid: str,
    recorded: bool = False,
) -> str:
    """The document fingerprint of the corpus at ``path`` read with ``key``'s settings, refused unless
    it is ``expected``'s (``None``: anything goes).

    Args:
        recorded: ``path`` is where the queue (or the run's config) says the grid's corpus is, not a
            ``--corpus`` given now: another text there is a corpus changed since the grid was queued.

    Raises:
        FileNotFoundError: nothing at ``path``.
        ValueError: another text: one line naming both fingerprints (the caller has changed nothing).
    """
    if not exists(path):
        raise FileNotFoundError(f"--corpus {path} not found")
    fp = fingerprint_of(repointed(key, path), cache_dir)
    if expected is not None and fp != expected[0] and recorded:
        raise ValueError(
            f"corpus {expected[1]} of grid {grid} at {path} has fingerprint {fp}, not the fingerprint "
            f"{expected[0]} the grid was queued with: its text changed since (put the queued text back, or "
            f"point the grid at a copy of it with {repoint_hint(grid)})"
        )
    if expected is not None and fp != expected[0]:
        raise ValueError(
            f"--corpus {path} has fingerprint {fp}; grid {grid} was trained on corpus {expected[1]} of "
            f"fingerprint {expected[0]}: another text, nothing changed (give the same corpus, or queue a new grid)"
        )
    return fp


class Binding(NamedTuple):
    """A grid's corpus as :meth:`~harness.scheduling.queue.run_queue.RunQueue.bind_corpus` records it, and
    whether it was checked against a fingerprint the grid already had (``checked``)."""

    fingerprint: str
    name: str
    path: str
    checked: bool


def binding(queue, grid: str, key: CorpusKey, path: str, cache_dir: Path | None) -> Binding | None:
    """The :class:`Binding` of ``grid`` read from ``path`` (``key``'s settings), checked against what
    the grid already reads (:func:`expected_corpus` of the queue's record, else of a run queued before);
    ``None`` for a hub corpus (its spec is its identity).

    Args:
        queue: the run queue (``None``: none yet, nothing to check against).

    Raises:
        FileNotFoundError / ValueError: as :func:`check_repoint` (nothing is changed).
    """
    if not is_local(path):
        return None
    queued = next(iter(queue.runs(grid).values()), None) if queue is not None else None
    record = queue.corpus_of(grid) if queue is not None else None
    # a new grid has nothing to check against (and its text is read once, below)
    expected = (
        expected_corpus(record, queued.config.corpus_key() if queued else key, cache_dir)
        if queued or record
        else None
    )
    fp = check_repoint(expected, key, path, cache_dir, grid=grid)
    name = expected[1] if expected is not None else corpus_name(path)
    return Binding(fp, name, path, expected is not None)


def here(queue, grid: str, corpus: str | None, source: str) -> tuple[str | None, str]:
    """``(corpus, source)`` with a corpus reference (an imported grid's TOML) replaced by the path the
    queue records for ``grid``; anything else as it is.

    Raises:
        FileNotFoundError: a reference with no recorded path: one line asking for ``--corpus PATH``.
    """
    ref = parse_ref(corpus or "")
    if ref is None:
        return corpus, source
    record = queue.corpus_of(grid) if queue is not None else None
    if record is not None and record.get("path") and record["fingerprint"] == ref[0]:
        return record["path"], f"the path the queue records for grid {grid}"
    raise FileNotFoundError(
        f"corpus {ref[1]} (fingerprint {ref[0]}) of grid {grid} ({source}) is not on this machine as far as "
        "the queue knows: pass --corpus PATH (checked against that fingerprint)"
    )


def missing_line(grid: str, path: str | None, expected: tuple[str, str] | None) -> str:
    """The line a worker stops with when ``grid``'s corpus is not here (see :class:`CorpusMissing`)."""
    fp, name = expected if expected is not None else ("unknown", corpus_name(path or ""))
    where = f"not found at {path}" if path else "not on this machine (the grid records no path for it)"
    return (
        f"corpus {name} (fingerprint {fp}) of grid {grid} is {where}; "
        f"point the grid at a copy with {repoint_hint(grid)}"
    )


class CorpusLocator:
    """Resolves each claimed run's corpus for one worker (see the module docstring).

    Args:
        override: the worker's ``--corpus`` (``None``: the queue's record or the run's config).
        cache_dir: the prepared-corpus cache (a prepared folder gives a fingerprint without reading text).
    """

    def __init__(self, override: str | None, cache_dir: Path | None) -> None:
        self.override = os.path.abspath(os.path.expanduser(override)) if override else None
        self.cache_dir = cache_dir
        self._expected: dict[str, tuple[str, str] | None] = {}  # grid -> what --corpus must be, once known
        self._checked: set[tuple[str, str]] = set()  # (grid, path) whose text was found to be the grid's

    def path_for(
        self, record: dict | None, grid: str, key: CorpusKey
    ) -> tuple[str | None, tuple[str, str] | None]:
        """``(path, expected)`` of the corpus of a run of ``grid`` reading ``key`` here (``path`` None:
        none known) and the fingerprint and name it must have, given the queue's ``record`` of the grid's
        corpus. The text at ``path`` is checked against that fingerprint once per grid and path (from the
        prepared cache's manifest where it holds the key, else by reading the text).

        Raises:
            ValueError: the text at ``path`` is another (the worker's ``--corpus``, or the grid's corpus
                changed since it was queued): one line naming both fingerprints.
        """
        if not is_local(key.corpus) and parse_ref(key.corpus) is None:
            return key.corpus, None  # a hub spec: its name is its identity
        if self.override is not None:
            path = self.override
            if grid not in self._expected and exists(path):  # the grid's own text is read at most once
                self._expected[grid] = expected_corpus(record, key, self.cache_dir)
            expected = self._expected.get(grid)
        else:
            expected = (
                (record["fingerprint"], record["name"]) if record is not None else parse_ref(key.corpus)
            )
            path = record.get("path") if record is not None else None
            path = path or (key.corpus if is_local(key.corpus) else None)
        if path is not None and expected is not None and (grid, path) not in self._checked and exists(path):
            recorded = self.override is None
            check_repoint(expected, key, path, self.cache_dir, grid=grid, recorded=recorded)
            self._checked.add((grid, path))
        return path, expected

    def check_queue(self, queue, grids: Iterable[str]) -> None:
        """Check, before any run is claimed, the corpus this worker would read for each of ``grids`` that
        has a run queued (``harness launch --corpus``, ``harness work --corpus``): refused as a claim would
        be, without claiming (nothing is released; the texts read are remembered for the claims).

        Args:
            queue: the run queue (its ``runs`` and ``corpus_of``).
            grids: the grids the workers may take runs of.

        Raises:
            ValueError: the text at the path is not the grid's (one line naming both fingerprints).
        """
        for grid in grids:
            queued = next((r for r in queue.runs(grid).values() if r.state == "queued"), None)
            if queued is not None:
                self.path_for(queue.corpus_of(grid), grid, queued.config.corpus_key())

    def locate(self, queue, call: Callable[..., Any], claim):
        """``claim`` with its config's ``corpus`` set to the path this worker reads (unchanged when it is
        the same).

        Args:
            queue: the run queue (its ``corpus_of``).
            call: runs a queue operation (retried while the storage is unreachable): ``call(method, *args)``.
            claim: the claimed run (its ``grid`` and ``config``).

        Raises:
            CorpusMissing: the corpus is not here (one line naming where it was looked for).
            ValueError / FileNotFoundError: the text there is not the grid's (given by ``--corpus``, or
                changed since the grid was queued), or it went away while it was read.
        """
        path, expected = self.path_for(
            call(queue.corpus_of, claim.grid), claim.grid, claim.config.corpus_key()
        )
        if path is None or not exists(path):
            raise CorpusMissing(missing_line(claim.grid, path, expected))
        if path == claim.config.corpus:
            return claim
        return dataclasses.replace(claim, config=dataclasses.replace(claim.config, corpus=path))


__all__ = [
    "Binding",
    "CorpusLocator",
    "binding",
    "check_repoint",
    "expected_corpus",
    "here",
    "missing_line",
    "repoint_hint",
]
