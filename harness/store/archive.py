"""A grid's results as one portable file: writing it and reading it back, checked (so another group can continue a study from it).

The archive is a gzip-compressed tar file (standard library :mod:`tarfile`) whose members are::

    manifest.json     format, version, grid, the code that wrote the archive (``archived_by``: git
                      commit with its ``-dirty`` flag, SHA-256 of requirements.lock), the grid's corpus
                      (its document fingerprint and file name), each run's protocol hash, status and
                      training commit (``code_version``, ``-dirty`` kept), and the SHA-256 and size of
                      every other member
    queue.json        the queue's view of the grid: one object per run (its RunConfig as queued,
                      state, attempt, val_nll, wall_s, error), so `topup` and `work` can continue it
    runs/<file>.json  the grid's result files (curves, routing and degeneracy records, failures:
                      harness.store.validate's format); no checkpoints
    grid.toml         the grid's TOML, when it was given

Nothing in it names the machine that wrote it (:func:`portable`): the writer's host and owner
(``host:pid``) are dropped from result files, and each absolute path the caller names (the
corpus, the results folder) is replaced in every member by its stand-in (a corpus becomes
``corpus-sha256:<fingerprint>:<name>``); a file nothing names is kept byte for byte. The analysis
plan and the settings of every run travel in the queued configs (``analysis``, ``train``). Members
are written in run order (seeds numerically: ``s2`` before ``s10``, :func:`natural_key`; the queue
view by role, then variant and seed) with fixed owner and time, and gzip's header time is 0, so
the same results give the same file, and an archive imported and archived again by the same code
is the same file byte for byte.

:func:`read_archive` is the check an import runs before it writes anything: the file must be a
gzip tar (else "not a harness archive"), complete (else "truncated or damaged"), hold exactly
the manifest's members with their hashes (else "tampered or damaged"), and every result file
must be valid, of the manifest's grid, and carry the protocol hash the manifest records for its
run (else "protocol mismatch"); the manifest itself, which no hash covers, must agree with the members
(each run's training commit and status, the corpus fingerprint every result file records, the grid TOML's
name; no result member outside its runs: else "manifest mismatch"). Each raises :class:`ArchiveError`
with one line.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import tarfile
import tomllib
import zlib
from dataclasses import dataclass
from pathlib import Path

from harness.common.files import atomic_path
from harness.common.terms import check_grid_name, queue_order_key, run_order
from harness.store.validate import result_filename, validate_result

ARCHIVE_FORMAT = "rd-harness grid archive"
ARCHIVE_VERSION = 2
#: Versions :func:`read_archive` reads: 1 (paths and host kept; ``code`` the archiver's) and 2.
READ_VERSIONS = (1, 2)
#: Keys of a result file's ``run`` that name the machine that wrote it: dropped from an archive.
MACHINE_KEYS = ("host", "owner")
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

    @property
    def archived_by(self) -> dict:
        """``{"commit", "lock_sha256"}`` of the code that wrote the archive (version 1: ``code``)."""
        return self.manifest.get("archived_by") or self.manifest.get("code") or {}

    @property
    def corpus(self) -> dict | None:
        """``{"fingerprint", "name"}`` of the grid's corpus: the manifest's, else (version 1) the document
        fingerprint its result files record (``run.config.protocol.data.fingerprint``) and the file name
        of the path its queue names; ``None`` when neither says (a hub corpus, no result file)."""
        if "corpus" in self.manifest:
            return self.manifest["corpus"]
        for data in self.results.values():
            config = json.loads(data)["run"].get("config") or {}
            fp = ((config.get("protocol") or {}).get("data") or {}).get("fingerprint")
            spec = str(config.get("corpus") or "")
            if fp and spec and not spec.startswith("hf:"):
                return {"fingerprint": fp, "name": os.path.basename(os.path.normpath(spec))}
        return None


def sha256(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def natural_key(name: str) -> tuple:
    """Sort key of a run id or member name with its numbers in numeric order (``s2`` before ``s10``):
    :func:`harness.common.terms.run_order`."""
    return run_order(name)


def _replace_all(text: str, stand_ins: dict[str, str]) -> str:
    for path in sorted(stand_ins, key=len, reverse=True):  # a longer path first (one inside another)
        text = text.replace(path, stand_ins[path])
    return text


def _scrub(obj, stand_ins: dict[str, str]):
    """``obj`` (parsed JSON) with :data:`MACHINE_KEYS` dropped from mappings and each path in every string
    replaced by its stand-in."""
    if isinstance(obj, dict):
        return {k: _scrub(v, stand_ins) for k, v in obj.items() if k not in MACHINE_KEYS}
    if isinstance(obj, list):
        return [_scrub(v, stand_ins) for v in obj]
    if isinstance(obj, str):
        return _replace_all(obj, stand_ins)
    return obj


def portable(data: bytes, stand_ins: dict[str, str], *, result: bool) -> bytes:
    """A member's bytes with nothing naming the machine that wrote them (see the module docstring).

    Args:
        data: a result file (``result=True``: JSON as :func:`harness.store.runfile.write_result` writes it), or
            any other text member (the queue view is scrubbed as JSON by the caller; a TOML here).
        stand_ins: absolute path -> what replaces it (a longer path is replaced first).
        result: scrub as a result file: the run's :data:`MACHINE_KEYS` dropped, paths replaced, written
            back in the writer's format; a file that needed nothing is returned as it was.
    """
    if not result:
        return _replace_all(data.decode("utf-8"), stand_ins).encode("utf-8")
    obj = json.loads(data)
    clean = {k: (_scrub(v, stand_ins) if k == "run" else v) for k, v in obj.items()}
    if clean == obj:
        return data
    return json.dumps(clean, separators=(",", ":")).encode("utf-8")


def same_result(here: bytes, archived: bytes) -> bool:
    """True when a result file ``here`` and one from an archive record the same run: the same bytes, or
    the same once the machine's marks are set aside (:data:`MACHINE_KEYS`, the corpus's path or
    reference, the results folder: what :func:`portable` replaces)."""
    if here == archived:
        return True

    def content(data: bytes) -> dict:
        obj = json.loads(data)
        run = _scrub(obj.get("run") or {}, {})
        run["config"] = {k: v for k, v in (run.get("config") or {}).items() if k != "corpus"}
        run.pop("error", None)  # may name a path of the machine that wrote it
        return {**obj, "run": run}

    try:
        return content(here) == content(archived)
    except (ValueError, AttributeError):
        return False


def write_archive(
    out: str | os.PathLike,
    *,
    grid: str,
    results: dict[str, bytes],
    queue: list[dict],
    code: dict,
    grid_toml: bytes | None = None,
    stand_ins: dict[str, str] | None = None,
    corpus: dict | None = None,
    archived_before: dict | None = None,
) -> dict:
    """Write the archive of ``grid`` to ``out`` atomically (a temporary file beside it, renamed).

    Args:
        results: run_id -> the bytes of its result file (``RESULTS/runs/...``).
        queue: the queue's view of the grid (see the module docstring), JSON-able.
        code: ``{"commit": ..., "lock_sha256": ...}`` of the code that writes the archive.
        grid_toml: the grid's TOML, if known.
        stand_ins: absolute path -> its stand-in in every member (:func:`portable`).
        corpus: ``{"fingerprint", "name"}`` of the grid's corpus (``None``: a hub corpus, or not known).
        archived_before: ``{"archived_by", "members"}`` of the archive this grid was imported from: when
            the members are those same bytes, its ``archived_by`` is kept, so that an imported archive
            archived again is the same file whatever code re-archives it.

    Returns:
        The manifest written.

    Raises:
        ValueError: a result file that is invalid or of another grid (naming it).
    """
    stand_ins = stand_ins or {}
    order = sorted(queue, key=lambda r: queue_order_key(r["config"]["role"], r["config"]["run_id"]))
    members = {QUEUE: json.dumps(_scrub(order, stand_ins), sort_keys=True, indent=1).encode()}
    if grid_toml is not None:
        members[GRID_TOML] = portable(grid_toml, stand_ins, result=False)
    runs = {}
    for run_id in sorted(results, key=natural_key):
        run = validate_result(json.loads(results[run_id]))["run"]
        if run["grid"] != grid or run["run_id"] != run_id:
            raise ValueError(f"result file of {run_id} belongs to run {run['run_id']} of grid {run['grid']}")
        name = f"runs/{result_filename(run_id)}"
        members[name] = portable(results[run_id], stand_ins, result=True)
        runs[run_id] = {
            "code_version": run.get("code_version"),
            "file": name,
            "protocol_hash": run.get("protocol_hash"),
            "status": run["status"],
        }
    listed = {n: {"bytes": len(members[n]), "sha256": sha256(members[n])} for n in _member_order(members)}
    if archived_before is not None and archived_before.get("members") == listed:
        code = archived_before["archived_by"]
    manifest = {  # keys in name order; runs and members in run order (natural_key)
        "archived_by": code,
        "corpus": corpus,
        "format": ARCHIVE_FORMAT,
        "grid": grid,
        "members": listed,
        "runs": runs,
        "version": ARCHIVE_VERSION,
    }
    with atomic_path(out) as tmp, open(tmp, "wb") as raw:
        with (
            gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as gz,
            tarfile.open(fileobj=gz, mode="w") as tar,
        ):
            blob = json.dumps(manifest, indent=1).encode()
            for name, data in [(MANIFEST, blob), *((n, members[n]) for n in _member_order(members))]:
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(data), 0o644, 0
                tar.addfile(info, io.BytesIO(data))
    return manifest


def _member_order(members: dict[str, bytes]) -> list[str]:
    """Member names in archive order: the queue view and the TOML, then the result files in run order."""
    return sorted(members, key=lambda n: (n.startswith("runs/"), natural_key(n)))


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
    if manifest.get("version") not in READ_VERSIONS:
        raise ArchiveError(
            f"{path}: archive version {manifest.get('version')!r}; this harness reads versions "
            f"{', '.join(map(str, READ_VERSIONS))}"
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
        if run["grid"] != grid:
            raise ArchiveError(
                f"{path}: manifest mismatch: the manifest names grid {grid!r}, its run {run_id}'s result file "
                f"grid {run['grid']!r} (tampered or damaged)"
            )
        if run["run_id"] != run_id:
            raise ArchiveError(f"{path}: {entry['file']} is run {run['run_id']}, not {run_id}")
        if run.get("protocol_hash") != entry["protocol_hash"]:
            raise ArchiveError(
                f"{path}: protocol mismatch: run {run_id} has protocol hash {run.get('protocol_hash')}, "
                f"the manifest records {entry['protocol_hash']}"
            )
        for key, here in (("code_version", run.get("code_version")), ("status", run["status"])):
            if key in entry and entry[key] != here:
                raise ArchiveError(
                    f"{path}: manifest mismatch: run {run_id}'s result file records {key} {here}, "
                    f"the manifest {entry[key]} (tampered or damaged)"
                )
        results[run_id] = members[entry["file"]]
    unlisted = sorted(
        set(n for n in members if n.startswith("runs/")) - {e["file"] for e in manifest["runs"].values()}
    )
    if unlisted:
        raise ArchiveError(f"{path}: {unlisted[0]} is not a run of its manifest (tampered or damaged)")
    queue = json.loads(members.get(QUEUE, b"[]"))
    foreign = [r["config"]["run_id"] for r in queue if r["config"]["grid"] != grid]
    if foreign:
        raise ArchiveError(f"{path}: queued run {foreign[0]} is not of grid {grid}")
    _check_corpus(path, manifest, results)
    _check_grid_toml(path, grid, members.get(GRID_TOML))
    return Archive(manifest, members, results, queue)


def _check_corpus(path: Path, manifest: dict, results: dict[str, bytes]) -> None:
    """The manifest's corpus fingerprint is the one every result file's protocol records (the manifest is
    not under its own hashes: a changed fingerprint would make the real corpus "another text" forever).

    Raises:
        ArchiveError: a result file records another fingerprint (one line naming both).
    """
    if not manifest.get("corpus"):  # version 1 (read from the result files), or a hub corpus / not known
        return
    listed = manifest["corpus"].get("fingerprint")
    for run_id, data in results.items():
        config = json.loads(data)["run"].get("config") or {}
        recorded = ((config.get("protocol") or {}).get("data") or {}).get("fingerprint")
        if recorded and recorded != listed:
            raise ArchiveError(
                f"{path}: manifest mismatch: its corpus fingerprint is {listed}, run {run_id} was trained "
                f"on {recorded} (tampered or damaged)"
            )


def grid_toml_name(text: bytes) -> str | None:
    """The ``name`` a grid TOML's bytes give (``None``: none given); what an archive's ``grid.toml`` must
    agree with.

    Raises:
        ValueError: not UTF-8 TOML (the parser's words).
    """
    try:
        return tomllib.loads(text.decode("utf-8-sig")).get("name")
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"not valid TOML ({exc})") from None


def _check_grid_toml(path: Path, grid: str, text: bytes | None) -> None:
    """The archive's grid TOML names the manifest's grid.

    Raises:
        ArchiveError: not TOML, or another grid's name (one line).
    """
    if text is None:
        return
    try:
        name = grid_toml_name(text)
    except ValueError as exc:
        raise ArchiveError(f"{path}: its {GRID_TOML} is {exc}") from None
    if name != grid:
        raise ArchiveError(f"{path}: its {GRID_TOML} is grid {name!r}, the manifest's grid is {grid!r}")


__all__ = [
    "MACHINE_KEYS",
    "READ_VERSIONS",
    "grid_toml_name",
    "natural_key",
    "portable",
    "same_result",
    "ARCHIVE_FORMAT",
    "ARCHIVE_VERSION",
    "Archive",
    "ArchiveError",
    "read_archive",
    "write_archive",
    "sha256",
]
