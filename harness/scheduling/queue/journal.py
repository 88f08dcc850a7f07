"""The queue's journal file: Optuna's ``JournalFileBackend``, made to survive a torn write.

Optuna's journal is one JSON operation per line, appended under an ``O_EXCL`` lock file
(:class:`~optuna.storages.journal.JournalFileOpenLock`). Two kinds of damage happen:

* **A torn last line**: a writer killed in the middle of an append leaves bytes without a
  newline at the end. Optuna's reader already skips such a tail, but the next append
  would land on it and turn both into one corrupt line. :class:`QueueJournal` takes the
  same lock with :class:`MendingLock`, which, once it holds the lock (so no write is in
  progress), moves a torn tail to ``JOURNAL.torn`` and truncates the journal to its last
  whole line before the append: the next append starts on a fresh line, and the torn
  bytes are kept, not lost. A reader that meets a torn tail no writer is busy with says so
  once (a warning) and goes on.
* **A corrupt line elsewhere** (a disk error, an edit): Optuna raises a bare
  ``JSONDecodeError`` ("Invalid control character at: line 1 column 68") naming no file.
  :class:`QueueJournal` raises :class:`JournalCorrupt` instead, naming the file, the line
  and the repair: :func:`repair_journal` (``harness queue --repair``) writes a clean journal
  (the valid lines, in order) and keeps the damaged one as a backup.

The file format (one compact JSON operation per line) and the lock protocol stay Optuna's
(5.0.0, pinned): Optuna's own ``JournalFileBackend`` and ``optuna-dashboard`` read the file.
:class:`QueueJournal` implements Optuna's public backend interface itself, keeping its own
line offsets, so no private attribute of Optuna's is read; the one private name used, the operation
codes a repair's placeholder lines carry, is listed with its reason in ``tests/tooling/test_third_party_private.py``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from optuna.storages.journal import BaseJournalBackend, JournalFileOpenLock, JournalStorage
from optuna.storages.journal._storage import JournalOperation
from optuna.study import StudyDirection
from optuna.trial import TrialState

from harness.common.files import atomic_path, atomic_write

TORN_SUFFIX = ".torn"  # torn tails set aside, appended one per line
REPAIR_WORKER = "harness-repair"
# the journal's operation codes: Optuna has no public name for them (tests/tooling/test_third_party_private.py PRIVATE_USES)
_OP_CREATE_STUDY, _OP_CREATE_TRIAL = JournalOperation.CREATE_STUDY.value, JournalOperation.CREATE_TRIAL.value
_OP_RE = re.compile(rb'"op_code"\s*:\s*(\d+)')
_STUDY_RE = re.compile(rb'"study_id"\s*:\s*(\d+)')


def _stderr_warning(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


class JournalCorrupt(ValueError):
    """A line of the queue journal, other than a torn last one, is not an operation record.

    Attributes:
        path: the journal file.
        line: 1-based number of the bad line.
        reason: what is wrong with it (the JSON parser's message, its column).
    """

    def __init__(self, path: str | os.PathLike, line: int, reason: str):
        self.path, self.line, self.reason = str(path), int(line), reason
        super().__init__(
            f"queue journal {self.path}: line {self.line} is corrupt ({reason}), so the queue cannot be read "
            f"past it; stop every worker, then run `harness queue --repair --storage journal:{self.path}` "
            "(it writes a clean journal of the valid lines, in order, and keeps the damaged file as a backup)"
        )


#: The keys Optuna's replay reads from each operation (``optuna.storages.journal._storage``, 5.0.0,
#: ``JournalOperation`` codes 0-10; 10, DISCARD_TRIALS, is skipped by Optuna's replay).
_OP_KEYS: dict[int, tuple[str, ...]] = {
    0: ("study_name", "directions"),
    1: ("study_id",),
    2: ("study_id", "user_attr"),
    3: ("study_id", "system_attr"),
    4: ("study_id", "datetime_start"),
    5: ("trial_id", "param_name", "param_value_internal", "distribution"),
    6: ("trial_id", "state", "values"),
    7: ("trial_id", "step", "intermediate_value"),
    8: ("trial_id", "user_attr"),
    9: ("trial_id", "system_attr"),
    10: (),
}


def operation_problem(log: Any) -> str | None:
    """What keeps a parsed journal line from being an operation Optuna can replay (``None``: nothing):
    not an object, no integer ``op_code``, an unknown one, or a key its replay reads missing (Optuna
    would stop with ``AssertionError: Should not reach.`` or a bare ``KeyError``)."""
    if not isinstance(log, dict):
        return f"not an operation record: a JSON {type(log).__name__}, not an object"
    op = log.get("op_code")
    if not isinstance(op, int) or isinstance(op, bool):
        return "not an operation record: no integer op_code"
    if op not in _OP_KEYS:
        return f"not an operation record: unknown op_code {op} (known: 0-{max(_OP_KEYS)})"
    missing = [k for k in (("worker_id",) if op != 10 else ()) + _OP_KEYS[op] if k not in log]
    if missing:
        return f"not an operation record: op_code {op} without {', '.join(missing)}"
    return None


def _reason(exc: ValueError) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"not JSON: {exc.msg} (column {exc.colno})"
    return str(exc) or type(exc).__name__


def _last_newline_end(f, size: int) -> int:
    """Offset just past the last ``\\n`` of an open binary file of ``size`` bytes (0 if none)."""
    pos = size
    while pos > 0:
        step = min(1 << 16, pos)
        pos -= step
        f.seek(pos)
        i = f.read(step).rfind(b"\n")
        if i >= 0:
            return pos + i + 1
    return 0


def mend_torn_tail(path: str | os.PathLike, warn: Callable[[str], None] = _stderr_warning) -> int:
    """Move a torn last line (bytes after the last newline) to ``PATH.torn``; truncate the journal.

    Call only while holding the journal's lock (no append can be in progress then, so a
    tail without a newline belongs to a writer that died mid-append). The torn bytes are
    appended to ``PATH.torn`` and fsynced before the journal is truncated.

    Returns:
        The number of bytes set aside (0: the journal ended on a whole line).
    """
    path = str(path)
    with open(path, "r+b") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return 0
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return 0
        start = _last_newline_end(f, size)
        f.seek(start)
        torn = f.read()
        with open(path + TORN_SUFFIX, "ab") as side:
            side.write(torn + b"\n")
            side.flush()
            os.fsync(side.fileno())
        f.truncate(start)
        f.flush()
        os.fsync(f.fileno())
    warn(
        f"queue journal {path}: its last line was torn ({len(torn)} bytes without a newline: a writer "
        f"was killed mid-append); set aside in {path}{TORN_SUFFIX}, and the journal goes on on a fresh line"
    )
    return len(torn)


#: Optuna's lock file beside a journal: ``PATH.lock`` (its ``JournalFileOpenLock``).
LOCK_SUFFIX = ".lock"
RENAME_FILE_SUFFIX = (
    ".rename"  # Optuna's: a released lock file is renamed PATH.lock<uuid>.rename, then removed
)
_HELD_SIGNALS = {signal.SIGINT, signal.SIGTERM}


@contextmanager
def signals_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM back for a block of a few system calls (this thread's signal mask);
    one that came meanwhile is delivered when the block ends."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class MendingLock(JournalFileOpenLock):
    """Optuna's ``O_EXCL`` journal lock that, once acquired, mends a torn tail (:func:`mend_torn_tail`).

    Every writer of :class:`QueueJournal` appends under it, so no append ever lands on a
    torn line. The lock file is Optuna's (``PATH.lock``): writers that use the plain
    ``JournalFileOpenLock`` exclude and are excluded as before.
    """

    def __init__(self, journal: str, warn: Callable[[str], None] = _stderr_warning) -> None:
        super().__init__(journal)
        self.journal = journal
        # exists while some process holds the lock: Optuna's name for it (tests/scheduling/test_journal.py pins it)
        self.lock_file = journal + LOCK_SUFFIX
        self._warn = warn

    def acquire(self) -> bool:
        try:
            super().acquire()
        except RuntimeError as exc:  # Ctrl-C while waiting: Optuna's cleanup says "did not possess lock"
            if isinstance(exc.__context__, KeyboardInterrupt):
                raise exc.__context__ from None
            raise
        try:
            mend_torn_tail(self.journal, self._warn)
        except BaseException:
            self.release()
            raise
        return True

    def release(self) -> None:
        """Let go of the lock (rename the lock file aside, then remove it, as Optuna does) with SIGINT and
        SIGTERM held back until both are done: Optuna's own release, interrupted between them, raised
        ``FileNotFoundError: ...lock<uuid>.rename`` instead of the interrupt. A signal that
        came meanwhile is delivered once the lock is let go.

        Raises:
            RuntimeError: the lock file is not there (this process did not hold the lock).
        """
        aside = f"{self.lock_file}{uuid.uuid4()}{RENAME_FILE_SUFFIX}"
        with signals_held():
            try:
                os.rename(self.lock_file, aside)
            except OSError:
                raise RuntimeError("Error: did not possess lock") from None
            os.unlink(aside)

    @contextmanager
    def held(self) -> Iterator[None]:
        """Hold the lock for a block (no other process appends meanwhile)."""
        self.acquire()
        try:
            yield
        finally:
            self.release()


class QueueJournal(BaseJournalBackend):
    """Optuna's journal file format and lock protocol, with appends that mend a torn tail first
    and reads that name a bad line.

    A :class:`~optuna.storages.journal.BaseJournalBackend` (Optuna's public backend interface)
    rather than a subclass of ``JournalFileBackend``: the reader needs the byte offset of the
    first unread line, which that class keeps only in a private attribute, so this class keeps
    its own. The file is the same one JSON operation per line, so Optuna's own backend (and
    ``optuna-dashboard``) read what this one writes, and the other way round.

    Args:
        file_path: the journal file (created if missing, as Optuna does).
        warn: where the one-line warnings go (default: stderr).

    Attributes:
        path: the journal file.
        lock: the :class:`MendingLock` every append holds; :func:`harness.scheduling.workers.fence`
            holds it to check a lease and write a result with no append in between.

    Raises (from reads):
        JournalCorrupt: a whole line (one that ends in a newline) does not parse.
    """

    def __init__(self, file_path: str, warn: Callable[[str], None] = _stderr_warning) -> None:
        self.path = file_path
        self.lock = MendingLock(file_path, warn)
        if not os.path.exists(file_path):
            open(file_path, "ab").close()
        self._offsets: dict[int, int] = {0: 0}  # line number -> byte offset of its start, as read so far
        self._warn = warn
        self._warned_torn: set[int] = set()

    def read_logs(self, log_number_from: int) -> Iterator[dict[str, Any]]:
        """The operations from line ``log_number_from`` (0-based) on, as far as whole lines go.

        Bytes appended while it reads are left for the next call (the size is taken first). A
        last line without a newline is an append in progress (its writer holds the lock) or a
        torn one: skipped, with one warning for the latter.
        """
        n = log_number_from if log_number_from in self._offsets else 0
        with open(self.path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            offset = self._offsets[n]
            f.seek(offset)
            while offset < size:
                line = f.readline(size - offset)
                if not line.endswith(b"\n"):
                    self._torn_tail(n, offset, size)
                    return
                try:
                    log = json.loads(line)
                except ValueError as exc:
                    raise JournalCorrupt(self.path, n + 1, _reason(exc)) from None
                problem = operation_problem(log)  # valid JSON Optuna's replay would stop on
                if problem is not None:
                    raise JournalCorrupt(self.path, n + 1, problem)
                offset += len(line)
                n += 1
                self._offsets[n] = offset
                if n > log_number_from:
                    yield log

    def _torn_tail(self, n: int, start: int, size: int) -> None:
        """Line ``n`` (0-based) runs from ``start`` to the end (``size``) with no newline."""
        if start in self._warned_torn or os.path.exists(self.lock.lock_file):
            return  # warned already, or a writer is busy appending it
        if os.path.getsize(self.path) == size:
            self._warned_torn.add(start)
            self._warn(
                f"queue journal {self.path}: line {n + 1} is torn ({size - start} bytes without a "
                "newline: a writer was killed mid-append); it is skipped, and the next write sets it "
                f"aside in {self.path}{TORN_SUFFIX}"
            )

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        """Append operations as one write of whole lines, fsynced, under :attr:`lock` (Optuna's
        format: compact JSON, one per line)."""
        data = "".join(json.dumps(log, separators=(",", ":")) + "\n" for log in logs).encode("utf-8")
        with self.lock.held():
            append_whole(self.path, data)


def append_whole(path: str, data: bytes) -> None:
    """Append ``data`` (whole lines) to ``path`` and fsync it, or leave the file as it was: a write
    that fails part-way (a full disk) is cut off again, so no torn line is left for a reader to take
    for a writer killed mid-append (the corrupt-line error would stop every command). Call it holding the journal's lock.

    Raises:
        OSError: the write or fsync failed (ENOSPC, EDQUOT, EIO), with ``path`` as its file name.
    """
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        start = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except OSError as exc:
            os.ftruncate(fd, start)  # frees what the partial write took: truncating needs no space
            raise OSError(exc.errno, exc.strerror, path) from None
    finally:
        os.close(fd)


class QueueJournalStorage(JournalStorage):
    """Optuna's ``JournalStorage`` on a :class:`QueueJournal`; :attr:`journal` is that backend
    (its :attr:`~QueueJournal.lock` is what :func:`harness.scheduling.queue.storage.trial_lock` holds)."""

    def __init__(self, path: str, warn: Callable[[str], None] = _stderr_warning) -> None:
        self.journal = QueueJournal(path, warn)
        super().__init__(self.journal)


# ----------------------------------------------------------------------------- repair


@dataclass
class Repair:
    """What :func:`repair_journal` did.

    Attributes:
        path: the journal.
        lines: lines in the damaged journal (a torn tail counts as one).
        kept: lines copied unchanged.
        dropped: ``(line, reason)`` of every line left out.
        placeholders: ``(line, what)`` of bad lines replaced by a placeholder that keeps the
            numbering of studies and trials (a trial or study creation recognised in them).
        unidentified: bad lines whose operation could not be recognised: if one created a
            trial, the trials after it are numbered one lower than before.
        backup: where the damaged journal was copied (``None``: nothing to repair).
    """

    path: Path
    lines: int = 0
    kept: int = 0
    dropped: list[tuple[int, str]] = field(default_factory=list)
    placeholders: list[tuple[int, str]] = field(default_factory=list)
    unidentified: list[int] = field(default_factory=list)
    backup: Path | None = None


def _placeholder(line_no: int, raw: bytes) -> tuple[dict | None, str | None]:
    """A stand-in for a bad line that created a study or a trial, so later ids do not shift."""
    op = _OP_RE.search(raw)
    if op is None:
        return None, None
    op_code = int(op.group(1))
    if op_code == _OP_CREATE_TRIAL and (study := _STUDY_RE.search(raw)):
        return (
            {
                "op_code": _OP_CREATE_TRIAL,
                "worker_id": REPAIR_WORKER,
                "study_id": int(study.group(1)),
                "datetime_start": None,
                "state": TrialState.FAIL.value,
                "value": None,
                "values": None,
                "user_attrs": {"repair_placeholder": f"line {line_no}"},
            },
            f"a failed placeholder trial in study {int(study.group(1))}",
        )
    if op_code == _OP_CREATE_STUDY:
        return (
            {
                "op_code": _OP_CREATE_STUDY,
                "worker_id": REPAIR_WORKER,
                "study_name": f"harness-repair-placeholder-line-{line_no}",
                "directions": [StudyDirection.MINIMIZE.value],
            },
            "a placeholder study",
        )
    return None, f"op_code {op_code}"


def _clean_lines(data: bytes, report: Repair) -> list[bytes]:
    """The journal ``data``'s valid lines byte for byte, a bad line that created a trial (study) as a failed
    placeholder trial (study); counts, placeholders and dropped lines go to ``report``."""
    out: list[bytes] = []
    lines = data.splitlines(keepends=True)
    report.lines = len(lines)
    for i, raw in enumerate(lines, start=1):
        if raw.endswith(b"\n"):
            try:
                reason = operation_problem(json.loads(raw))
                if reason is None:
                    out.append(raw)
                    report.kept += 1
                    continue
            except ValueError as exc:
                reason = _reason(exc)
        else:
            reason = "torn (no newline at the end)"
        stand_in, what = _placeholder(i, raw) if raw.endswith(b"\n") else (None, None)
        if stand_in is not None:
            out.append((json.dumps(stand_in, separators=(",", ":")) + "\n").encode())
            report.placeholders.append((i, what))
        else:
            report.dropped.append((i, reason + (f", {what}" if what else "")))
            if raw.endswith(b"\n") and what is None:
                report.unidentified.append(i)
    return out


def repair_journal(path: str | os.PathLike, *, verify: Callable[[Any], None] | None = None) -> Repair:
    """Rewrite a damaged journal as its valid lines, in order; keep the damaged file as a backup.

    Under the journal's lock: the damaged file is copied to ``PATH.bak-<UTC time>``; every
    line that parses as an operation is kept byte for byte; a bad line that recognisably
    created a trial (or a study) becomes a failed placeholder trial (a placeholder study),
    so the ids of everything after it stay as they were; other bad lines and a torn tail
    are dropped. The clean journal is replayed by Optuna (and ``verify(storage)``, which
    may raise) before it replaces the damaged one (atomically); nothing changes on error.

    Run it with every worker stopped: a running worker keeps byte offsets into the old file.

    Raises:
        FileNotFoundError: no journal at ``path``.
        ValueError: from ``verify`` (e.g. a worker still holds a fresh lease); the
            journal is left as it was.
    """

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no queue journal at {path}")
    report = Repair(path=path)
    lock = JournalFileOpenLock(str(path))  # the plain lock: the backup keeps a torn tail as it was
    lock.acquire()
    try:
        data = path.read_bytes()
        out = _clean_lines(data, report)
        if not report.dropped and not report.placeholders:
            return report
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%fZ")
        with atomic_path(path) as tmp:
            tmp.write_bytes(b"".join(out))
            storage = QueueJournalStorage(str(tmp))  # replays every line, raises if it cannot
            storage.get_all_studies()
            if verify is not None:
                verify(storage)
            report.backup = atomic_write(path.with_name(f"{path.name}.bak-{stamp}"), data)
    finally:
        lock.release()
    return report


__all__ = [
    "TORN_SUFFIX",
    "JournalCorrupt",
    "operation_problem",
    "mend_torn_tail",
    "MendingLock",
    "signals_held",
    "QueueJournal",
    "append_whole",
    "QueueJournalStorage",
    "Repair",
    "repair_journal",
]
