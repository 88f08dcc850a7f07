"""Files: where results live by default, and replacing a file so no reader or crash sees half of it.

The results folder (``--results``) defaults to ``$HARNESS_RESULTS`` or ``./results``
(:func:`default_results`).

Every file the harness replaces (result files, checkpoints and their config, bench JSON,
report files, corpus-cache entries, trained tokenizers) goes through :func:`atomic_path`
or :func:`atomic_write`: write a temporary file in the same folder, flush and fsync it,
rename it onto the target (atomic on POSIX), then fsync the folder so the rename itself
survives a power loss. Temporary names start with ``.`` and end in ``.tmp``, so readers
that list ``*.json`` (:mod:`harness.store.ingest`) never pick one up.

A folder built whole (a prepared corpus) is written under a temporary name, its files
fsynced (:func:`fsync_file`), then renamed into place and its parent fsynced
(:func:`fsync_dir`). Locks between processes use ``filelock.FileLock`` (a well-kept
library), not code of ours.
"""

from __future__ import annotations

import errno
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path


def default_results() -> Path:
    """The results folder when ``--results`` is not given: ``$HARNESS_RESULTS``, else ``./results``."""
    return Path(os.environ.get("HARNESS_RESULTS", "results"))


FULL_BELOW = 2**20  # a file system with less free space than this (bytes) is said to be full


def fmt_bytes(n: float) -> str:
    """``512 KiB``, ``7.3 MiB``, ``1.2 GiB``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit in ("B", "KiB") else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def free_bytes(path: str | os.PathLike) -> int:
    """Free bytes (for this user) on the file system holding ``path`` or its nearest existing folder; 0 if unknown."""
    path = Path(path)
    for folder in (path, *path.parents):
        try:
            return shutil.disk_usage(folder).free
        except OSError:
            continue
    return 0


def full_disk(path: str | os.PathLike) -> str | None:
    """``the disk holding PATH is full (N free)`` when it has less than :data:`FULL_BELOW` free, else
    ``None``: said beside an error whose own words (DuckDB's) do not mention the disk."""
    free = free_bytes(path)
    return f"the disk holding {path} is full ({fmt_bytes(free)} free)" if free < FULL_BELOW else None


def full_place(path: str | os.PathLike, results_dir: str | os.PathLike) -> Path:
    """Where to say a disk is full when writing ``path`` (for ``results_dir``'s run) failed with ENOSPC:
    ``path`` when it lies in ``results_dir`` or its own disk is full (under :data:`FULL_BELOW` free),
    else ``results_dir``. A file elsewhere on a disk with room (a library's staging file in the
    system temp folder) names the wrong disk and the wrong free space."""
    path, results_dir = Path(path), Path(results_dir)
    inside = os.path.abspath(path).startswith(os.path.abspath(results_dir) + os.sep)
    return path if inside or free_bytes(path) < FULL_BELOW else results_dir


RESULTS_ID_NAME = ".harness-id"  # RESULTS/.harness-id: the folder's stable id (a queue's grids name it)


def results_id(folder: str | os.PathLike, *, create: bool = False) -> str | None:
    """The stable id of the results folder ``folder`` (``RESULTS/.harness-id``, a random hex
    string written once), or ``None`` when it has none and ``create`` is false. A queue records
    the id of the folder its grid's results go to, so a worker on another folder (a node that
    mounts it elsewhere, or not at all) refuses that grid's runs instead of splitting them.

    The id is published whole: written and fsynced under a temporary name, then hard-linked into
    place, which fails when another process got there first (whose id then stays). A reader never
    sees the file empty, so two workers starting on one new folder agree on its id (an empty id,
    read by the second worker while the first was writing it, later read as "replaced by another
    folder"). Where the file system has no hard links, the file is created exclusively and a reader
    that finds it empty waits up to :data:`ID_WAIT_S` for its writer.

    Raises:
        OSError: the id cannot be written (``create``).
    """
    path = Path(folder) / RESULTS_ID_NAME
    found = _read_id(path)
    if found is not None or not create:
        return found or None
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".harness-id.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    with open(tmp, "w") as f:
        f.write(os.urandom(16).hex() + "\n")
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass  # another process published its id first: that one stays
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        _create_exclusive(path, tmp.read_text())  # no hard links here
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)
    return _read_id(path) or None


ID_WAIT_S = 5.0  # how long a reader waits for an id file being written (file systems without hard links)


def _read_id(path: Path) -> str | None:
    """The id in ``path``; ``None`` when there is no file; ``""`` when it stayed empty for :data:`ID_WAIT_S`
    (its writer died mid-write)."""
    deadline = time.monotonic() + ID_WAIT_S
    while True:
        try:
            text = path.read_text().strip()
        except FileNotFoundError:
            return None
        if text or time.monotonic() >= deadline:
            return text
        time.sleep(0.01)


def _create_exclusive(path: Path, text: str) -> None:
    """Create ``path`` holding ``text`` unless it exists (``O_EXCL``; a reader may see it empty meanwhile)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def fsync_file(path: str | os.PathLike) -> None:
    """Flush a written file's data to the disk (``fsync`` on a read-only descriptor)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(folder: str | os.PathLike) -> None:
    """fsync a folder, making renames and new entries in it durable (no-op where unsupported)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # e.g. Windows cannot open a folder
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems refuse fsync on a folder; the rename is still atomic
    finally:
        os.close(fd)


def check_output_file(path: Path, option: str) -> None:
    """Refuse an output file that cannot be written, before the work that fills it (so a long run's result
    is not lost at its end); nothing is created.

    Raises:
        ValueError: ``path`` is a folder, or a file stands where one of its folders would be.
        PermissionError: its nearest existing folder is not writable (the environment's fault).
    """
    if path.is_dir():
        raise ValueError(f"{option} {path}: is a folder; give a file's path")
    folder = path.parent
    while not folder.exists() and folder != folder.parent:  # the folders the writer would create
        folder = folder.parent
    if not folder.is_dir():
        raise ValueError(f"{option} {path}: {folder} is a file, not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PermissionError(errno.EACCES, f"{option}: folder not writable", str(folder))


@contextmanager
def atomic_path(
    path: str | os.PathLike,
    *,
    commit: Callable[[], AbstractContextManager] | None = None,
    root: str | os.PathLike | None = None,
) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on a clean exit make it ``path`` atomically.

    Whatever the block writes to the yielded path (by any means: ``open``, numpy,
    ``trainer.save_checkpoint``) is fsynced, renamed onto ``path`` and the folder fsynced.
    If the block raises, the temporary file is removed and ``path`` is untouched.
    The folder is created if needed; with ``root`` (a folder above ``path``: the results folder),
    only below ``root``: a missing ``root`` raises ``FileNotFoundError`` and nothing is created, so
    a results folder that went away is never re-created by a late write.

    ``commit``: the rename happens inside ``with commit():`` (e.g. a lease held against
    takeover, :mod:`harness.train.fencing`); if entering it raises, nothing is renamed and the
    folders this call created are removed again (a write refused because its results folder went
    away leaves no trace where the folder was).
    """
    path = Path(path)
    created = _make_parents(path.parent, None if root is None else Path(root))
    tmp: Path | None = None
    try:  # the name is held before the file exists: a Ctrl-C just after os.open leaves no empty temporary
        while tmp is None:
            tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
            try:  # mode 0o666 less the umask, as open() gives (tempfile.mkstemp would give 0o600)
                os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            except FileExistsError:
                tmp = None  # another's file, never ours to remove
        yield tmp
        fsync_file(tmp)
    except BaseException:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        raise
    try:
        with commit() if commit is not None else nullcontext():
            os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        for folder in reversed(created):  # deepest first; a folder someone wrote into since stays
            try:
                folder.rmdir()
            except OSError:
                break
        raise
    fsync_dir(path.parent)


@contextmanager
def undone_if_refused(folder: str | os.PathLike) -> Iterator[None]:
    """What the block creates below ``folder`` (``folder`` itself if it was absent) is removed when the
    block raises ``ValueError`` (a refusal: a refused command leaves the file system as it found it),
    then the error goes on. For a cache a check fills before it can say no (the queue's corpus sizing
    builds the shards a worker would reuse). Paths that were there before are never touched.
    """
    folder = Path(folder)
    existed = folder.exists()
    before = set(folder.rglob("*")) if existed else set()
    try:
        yield
    except ValueError:
        if not existed:
            shutil.rmtree(folder, ignore_errors=True)
        else:
            for path in sorted(set(folder.rglob("*")) - before, key=lambda q: len(q.parts)):
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
        raise


def _make_parents(folder: Path, root: Path | None) -> list[Path]:
    """Create ``folder`` and its missing ancestors below ``root``; the ones this call created,
    outermost first. Raises ``FileNotFoundError`` when ``root`` is missing."""
    missing = []
    while not folder.is_dir():
        if folder == root:
            raise FileNotFoundError(errno.ENOENT, "the results folder is missing", str(root))
        missing.append(folder)
        if folder.parent == folder:
            break
        folder = folder.parent
    created = []
    for f in reversed(missing):
        try:
            f.mkdir()
        except FileExistsError:
            continue  # another writer made it: not ours to remove
        created.append(f)
    return created


def atomic_write(
    path: str | os.PathLike,
    data: str | bytes,
    *,
    commit: Callable[[], AbstractContextManager] | None = None,
    root: str | os.PathLike | None = None,
) -> Path:
    """Replace ``path`` with ``data`` (text is written as UTF-8) atomically; returns ``path``.
    ``commit`` and ``root`` as :func:`atomic_path`."""
    with atomic_path(path, commit=commit, root=root) as tmp:
        tmp.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return Path(path)


__all__ = [
    "default_results",
    "RESULTS_ID_NAME",
    "results_id",
    "FULL_BELOW",
    "fmt_bytes",
    "free_bytes",
    "full_disk",
    "full_place",
    "atomic_path",
    "check_output_file",
    "atomic_write",
    "fsync_file",
    "fsync_dir",
]
