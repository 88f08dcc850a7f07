"""A grid's results as one portable file: writing it and reading it back, checked (issue 47).

The archive is a gzip-compressed tar file (standard library :mod:`tarfile`) whose members are::

    manifest.json     format, version, grid, when and by which code it was written (git commit and
                      the SHA-256 of requirements.lock), each run's protocol hash and status, and
                      the SHA-256 and size of every other member
    queue.json        the queue's view of the grid: one object per run (its RunConfig as queued,
                      state, attempt, val_nll, wall_s, error), so `topup` and `work` can continue it
    runs/<file>.json  the grid's result files, byte for byte (curves, routing and degeneracy
                      records, failures: db.validate's format); no checkpoints
    grid.toml         the grid's TOML, when it was given

The analysis plan and the settings of every run travel in the queued configs (``analysis``,
``train``). Members are written in name order with fixed owner and time, and gzip's header time
is 0, so the same results give the same file.

:func:`read_archive` is the check an import runs before it writes anything: the file must be a
gzip tar (else "not a harness archive"), complete (else "truncated or damaged"), hold exactly
the manifest's members with their hashes (else "tampered or damaged"), and every result file
must be valid, of the manifest's grid, and carry the protocol hash the manifest records for its
run (else "protocol mismatch"). Each raises :class:`ArchiveError` with one line.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from db.validate import result_filename, validate_result
from harness.common.files import atomic_path
from harness.common.terms import check_grid_name

ARCHIVE_FORMAT = "rd-harness grid archive"
ARCHIVE_VERSION = 1
MANIFEST, QUEUE, GRID_TOML = "manifest.json", "queue.json", "grid.toml"
RUN_MEMBER = re.compile(r"runs/[^/\\]+\.json")  # one level, no path tricks (.., absolute, links)


class ArchiveError(ValueError):
    """An archive that cannot be imported: the message is one line naming the file and why."""


@dataclass(frozen=True)
class Archive:
    """A read and verified archive: ``manifest`` (dict), ``members`` (name -> bytes, every member
    but the manifest), ``results`` (run_id -> the result file's bytes), ``queue`` (list of dicts)."""

    manifest: dict
    members: dict[str, bytes]
    results: dict[str, bytes]
    queue: list[dict]

    @property
    def grid(self) -> str:
        return self.manifest["grid"]


def sha256(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def write_archive(
    out: str | os.PathLike,
    *,
    grid: str,
    results: dict[str, bytes],
    queue: list[dict],
    code: dict,
    grid_toml: bytes | None = None,
) -> dict:
    """Write the archive of ``grid`` to ``out`` atomically (a temporary file beside it, renamed).

    Args:
        results: run_id -> the bytes of its result file (``RESULTS/runs/...``).
        queue: the queue's view of the grid (see the module docstring), JSON-able.
        code: ``{"commit": ..., "lock_sha256": ...}`` of the code that writes the archive.
        grid_toml: the grid's TOML, if known.

    Returns:
        The manifest written.

    Raises:
        ValueError: a result file that is invalid or of another grid (naming it).
    """
    members = {QUEUE: json.dumps(queue, sort_keys=True, indent=1).encode()}
    if grid_toml is not None:
        members[GRID_TOML] = grid_toml
    runs = {}
    for run_id, data in sorted(results.items()):
        run = validate_result(json.loads(data))["run"]
        if run["grid"] != grid or run["run_id"] != run_id:
            raise ValueError(f"result file of {run_id} belongs to run {run['run_id']} of grid {run['grid']}")
        name = f"runs/{result_filename(run_id)}"
        members[name] = data
        runs[run_id] = {"file": name, "protocol_hash": run.get("protocol_hash"), "status": run["status"]}
    manifest = {
        "format": ARCHIVE_FORMAT,
        "version": ARCHIVE_VERSION,
        "grid": grid,
        "code": code,
        "runs": runs,
        "members": {n: {"sha256": sha256(d), "bytes": len(d)} for n, d in sorted(members.items())},
    }
    with atomic_path(out) as tmp, open(tmp, "wb") as raw:
        with (
            gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as gz,
            tarfile.open(fileobj=gz, mode="w") as tar,
        ):
            blob = json.dumps(manifest, sort_keys=True, indent=1).encode()
            for name, data in [(MANIFEST, blob), *sorted(members.items())]:
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(data), 0o644, 0
                tar.addfile(info, io.BytesIO(data))
    return manifest


def _members(path: Path) -> dict[str, bytes]:
    """Every member of the tar file ``path`` as bytes; only plain files with allowed names."""
    out: dict[str, bytes] = {}
    try:
        with tarfile.open(path, mode="r:gz") as tar:
            for info in tar:
                if not info.isfile() or not (
                    info.name in (MANIFEST, QUEUE, GRID_TOML) or RUN_MEMBER.fullmatch(info.name)
                ):
                    raise ArchiveError(
                        f"{path}: member {info.name!r} is not part of a harness archive "
                        f"(allowed: plain files {MANIFEST}, {QUEUE}, {GRID_TOML}, runs/*.json)"
                    )
                if info.name in out:
                    raise ArchiveError(f"{path}: member {info.name!r} appears twice")
                out[info.name] = tar.extractfile(info).read()
    except (EOFError, zlib.error) as exc:
        raise ArchiveError(f"{path} is truncated or damaged ({exc}); write the archive again") from None
    except (tarfile.TarError, gzip.BadGzipFile) as exc:
        if out:  # members were read, then the stream broke off
            raise ArchiveError(f"{path} is truncated or damaged ({exc}); write the archive again") from None
        raise ArchiveError(
            f"{path} is not a harness archive (not a gzip-compressed tar file: {exc}); "
            "make one with `harness archive --grid NAME --out FILE.tar.gz`"
        ) from None
    return out


def _manifest(path: Path, members: dict[str, bytes]) -> dict:
    """The checked manifest of the archive ``path``: its format, and every member with its hash."""
    try:
        manifest = json.loads(members.pop(MANIFEST))
        ok = manifest.get("format") == ARCHIVE_FORMAT
    except (KeyError, ValueError, AttributeError):
        ok = False
    if not ok:
        raise ArchiveError(f"{path} is not a harness archive (no {MANIFEST} of format {ARCHIVE_FORMAT!r})")
    if manifest.get("version") != ARCHIVE_VERSION:
        raise ArchiveError(
            f"{path}: archive version {manifest.get('version')!r}; this harness reads version {ARCHIVE_VERSION}"
        )
    listed = manifest["members"]
    missing = sorted(set(listed) - set(members))
    if missing:
        raise ArchiveError(f"{path} is truncated or damaged: member {missing[0]} of its manifest is missing")
    for name, data in sorted(members.items()):
        if name not in listed:
            raise ArchiveError(f"{path}: member {name} is not in its manifest (tampered or damaged)")
        if sha256(data) != listed[name]["sha256"]:
            raise ArchiveError(
                f"{path}: member {name} does not match its SHA-256 in the manifest (tampered or damaged)"
            )
    return manifest


def read_archive(path: str | os.PathLike) -> Archive:
    """Read and verify the archive at ``path`` (see the module docstring); nothing is written.

    Raises:
        FileNotFoundError: no such file.
        ArchiveError: not an archive, truncated, tampered with, a grid name `harness queue` would
            refuse (``../x``), or a protocol mismatch (one line).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"archive {str(path)!r} does not exist (or is not a file)")
    members = _members(path)
    manifest = _manifest(path, members)
    try:  # the name becomes RESULTS/grids/NAME.toml and reports/NAME/: never a path out of the folder
        check_grid_name(manifest.get("grid"), str(path))
    except ValueError as exc:
        raise ArchiveError(str(exc)) from None
    grid, results = manifest["grid"], {}
    for run_id, entry in sorted(manifest["runs"].items()):
        try:
            run = validate_result(json.loads(members[entry["file"]]))["run"]
        except (KeyError, ValueError) as exc:
            raise ArchiveError(f"{path}: result file of {run_id} is missing or invalid ({exc})") from None
        if run["run_id"] != run_id or run["grid"] != grid:
            raise ArchiveError(
                f"{path}: {entry['file']} is run {run['run_id']} of grid {run['grid']}, not {run_id}"
            )
        if run.get("protocol_hash") != entry["protocol_hash"]:
            raise ArchiveError(
                f"{path}: protocol mismatch: run {run_id} has protocol hash {run.get('protocol_hash')}, "
                f"the manifest records {entry['protocol_hash']}"
            )
        results[run_id] = members[entry["file"]]
    queue = json.loads(members.get(QUEUE, b"[]"))
    foreign = [r["config"]["run_id"] for r in queue if r["config"]["grid"] != grid]
    if foreign:
        raise ArchiveError(f"{path}: queued run {foreign[0]} is not of grid {grid}")
    return Archive(manifest, members, results, queue)


__all__ = [
    "ARCHIVE_FORMAT",
    "ARCHIVE_VERSION",
    "Archive",
    "ArchiveError",
    "read_archive",
    "write_archive",
    "sha256",
]
