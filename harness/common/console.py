"""What harness processes print: the progress mode, terminals several workers share, quiet retries.

Progress of a training run goes to stderr (:class:`harness.train.progress.RunCallback`). How
is set by ``$HARNESS_PROGRESS`` (:func:`progress_mode`):

* ``auto`` (default): a live bar when stderr is a terminal that no other harness process is
  training on; otherwise (a file, a pipe, a log collector, or a terminal shared with another
  worker) complete lines, each prefixed with the run, one per 10 % of the budget and at
  least one a minute;
* ``lines``: always lines;
* ``off``: no progress output (as ``--quiet``).

Sharing a terminal. Every process that shows progress on a terminal registers there for as
long as it trains (:class:`SharedTerminal`): it holds a lock (``filelock``) on its own file
in a folder named after the terminal device, under the temp folder. A process whose lock
file another live process holds is alive (the kernel drops the lock when a process dies), so
:meth:`SharedTerminal.others` counts the other processes training on this terminal right now
without asking the queue. A bar switches to lines as soon as a second one appears, so two
workers started in one terminal never draw over each other's carriage-return bars.

Long steps. On a terminal, a step that takes seconds before any progress can show (importing torch,
preparing the corpus, building the model; reading the store and drawing the figures of a report)
says what it is doing first, one line on stderr (:func:`phase`), unless progress is off (``--quiet``,
``$HARNESS_PROGRESS=off``).

Quiet retries. Internal retries that usually succeed (a DuckDB ingest deferred while another
process holds the database, a queue storage briefly unreachable) are *debug* messages of the
``harness`` logger: ``--verbose`` on any command shows them (:func:`setup_logging`).
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import TextIO

PROGRESS_ENV = "HARNESS_PROGRESS"
PROGRESS_MODES = ("auto", "lines", "off")
LINE_EVERY_FRACTION = 0.1  # a progress line per tenth of the budget ...
LINE_EVERY_S = 60.0  # ... and at least one a minute (seconds), for long runs

log = logging.getLogger("harness")


def progress_mode() -> str:
    """``$HARNESS_PROGRESS`` (default ``auto``), lower-cased.

    Raises:
        ValueError: a value other than ``auto``, ``lines`` or ``off``.
    """
    mode = os.environ.get(PROGRESS_ENV, "").strip().lower() or "auto"
    if mode not in PROGRESS_MODES:
        raise ValueError(
            f"${PROGRESS_ENV}={os.environ[PROGRESS_ENV]!r} not understood; allowed: "
            f"{', '.join(PROGRESS_MODES)} (auto: a bar on a terminal no other worker shares, else lines)"
        )
    return mode


def terminal_id(stream: TextIO | None = None) -> str | None:
    """The terminal device ``stream`` (default stderr) writes to, as text, or None if it is not one."""
    stream = sys.stderr if stream is None else stream
    try:
        if not stream.isatty():
            return None
        return f"{os.fstat(stream.fileno()).st_rdev:x}"
    except (AttributeError, OSError, ValueError):  # a stream without a descriptor (pytest's capture)
        return None


def _registry(term: str) -> Path:
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"harness-{uid}" / "terminals" / term


class SharedTerminal:
    """This process, registered as showing progress on the terminal of ``stream`` (see the module
    docstring), inside a ``with`` block. On a stream that is not a terminal it registers nothing
    and :meth:`others` is 0.

    Args:
        stream: the stream progress goes to (default: stderr).
        folder: the registry folder (default: one per terminal device under the temp folder).
    """

    def __init__(self, stream: TextIO | None = None, *, folder: Path | None = None) -> None:
        term = terminal_id(stream)
        self.folder = folder if folder is not None else (_registry(term) if term else None)
        self._lock = None

    def __enter__(self) -> SharedTerminal:
        if self.folder is None:
            return self
        from filelock import FileLock, Timeout  # lazy: only when several workers share a terminal

        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            lock = FileLock(self.folder / f"{os.getpid()}.lock", timeout=0)
            lock.acquire()
        except (OSError, Timeout):  # an unwritable temp folder: progress still works, unshared
            self.folder = None
            return self
        self._lock = lock
        return self

    def others(self) -> int:
        """How many other processes are registered on this terminal and alive."""
        if self._lock is None:
            return 0
        from filelock import FileLock, Timeout  # lazy: only when several workers share a terminal

        n = 0
        mine = Path(self._lock.lock_file).name
        try:
            entries = [p for p in self.folder.iterdir() if p.suffix == ".lock" and p.name != mine]
        except OSError:
            return 0
        for path in entries:
            probe = FileLock(path, timeout=0)
            try:
                probe.acquire()
            except Timeout:
                n += 1  # held: its process is alive
            except OSError:
                continue
            else:  # nobody holds it: a process that died (or one that created it a moment ago)
                probe.release()
                try:
                    if time.time() - path.stat().st_mtime > 5:  # spare a newcomer about to lock it
                        path.unlink(missing_ok=True)
                except OSError:
                    pass
        return n

    def __exit__(self, *exc) -> None:
        if self._lock is not None:
            path = Path(self._lock.lock_file)
            path.unlink(missing_ok=True)
            self._lock.release()
            self._lock = None


def phase(text: str, *, show: bool = True) -> None:
    """The line ``text`` on stderr, now, saying what a long step is doing (e.g. ``[rd_attnres s0]
    preparing the corpus ...``), when stderr is a terminal: a person is waiting on it. Nothing in a file or
    a pipe (a log keeps the results; a refused command's error stays its one line), nothing when ``show``
    is false (``--quiet``) or ``$HARNESS_PROGRESS`` is ``off``. A bad ``$HARNESS_PROGRESS`` is the
    command's own error line, not this function's."""
    if (
        not show
        or os.environ.get(PROGRESS_ENV, "").strip().lower() == "off"
        or terminal_id(sys.stderr) is None
    ):
        return
    print(text, file=sys.stderr, flush=True)


class _Stderr(logging.Handler):
    """Writes to whatever ``sys.stderr`` is at the time (a test's capture, a redirected stream)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            print(self.format(record), file=sys.stderr, flush=True)
        except Exception:
            self.handleError(record)


_HANDLER = _Stderr()


class OneLineWarning(UserWarning):
    """A warning the harness's commands show as the one line ``warning: MESSAGE`` (no file, line or
    source), e.g. a tracker that failed (:mod:`harness.train.trackers`)."""


_format_warning = warnings.formatwarning


def _one_line(message, category, filename, lineno, line=None) -> str:
    if issubclass(category, OneLineWarning):
        return f"warning: {message}\n"
    return _format_warning(message, category, filename, lineno, line)


def setup_logging(verbose: bool = False) -> None:
    """Show the ``harness`` logger's messages on stderr: info and up, debug too with ``verbose``
    (internal retries, deferred ingests). Idempotent."""
    if _HANDLER not in log.handlers:
        log.addHandler(_HANDLER)
    warnings.formatwarning = _one_line
    log.setLevel(logging.DEBUG if verbose else logging.INFO)


__all__ = [
    "PROGRESS_ENV",
    "PROGRESS_MODES",
    "LINE_EVERY_FRACTION",
    "LINE_EVERY_S",
    "log",
    "progress_mode",
    "terminal_id",
    "SharedTerminal",
    "phase",
    "OneLineWarning",
    "setup_logging",
]
