"""What a corpus reference is, and where a command's corpus comes from (DESIGN sections 1.1 and 4;
docs/sharing.md).

A corpus is named by one of

* a local path: a file, a folder or a glob (``.jsonl``/``.ndjson``, ``.parquet``, ``.txt``;
  :mod:`harness.corpus.readers` reads them);
* ``hf:OWNER/NAME[:CONFIG]``: a Hugging Face hub dataset (:func:`parse_hub_spec`);
* ``corpus-sha256:<fingerprint>:<name>``: a *reference*, the portable stand-in of a local corpus where
  a path must not travel (an archive, :func:`corpus_ref`). A reference is not a path: a command meeting
  one asks for ``--corpus PATH``, checked against its fingerprint (:mod:`harness.corpus.locate`).

A command's corpus is chosen by one precedence (:func:`choose_corpus`): ``--corpus``, else
``$HARNESS_CORPUS`` (both relative to the working directory), else the grid's ``corpus`` (relative to
the grid file's folder). :func:`exists` is the one check that a local path or glob is there;
:func:`check_corpus` refuses, with one line naming where the spec came from, a path that is not and a
reference given where a path is needed.
"""

from __future__ import annotations

import glob
import os
import re
from pathlib import Path

HUB_PREFIX = "hf:"
#: The prefix of a corpus reference (:func:`corpus_ref`).
REF_PREFIX = "corpus-sha256:"
_REF = re.compile(r"corpus-sha256:([0-9a-f]{64}):(.*)", re.DOTALL)
_HUB_RE = re.compile(r"^(?P<name>[\w.-]+/[\w.-]+)(?::(?P<config>[\w.-]+))?$")
#: What a corpus spec may be, for messages.
SPEC_FORMS = "a file, directory, glob or hf:OWNER/NAME:CONFIG"


def parse_hub_spec(spec: str) -> tuple[str, str | None]:
    """Split ``hf:OWNER/NAME[:CONFIG]`` into ``(OWNER/NAME, CONFIG or None)``.

    Raises:
        ValueError: the spec does not have that form.
    """
    match = _HUB_RE.match(spec[len(HUB_PREFIX) :]) if spec.startswith(HUB_PREFIX) else None
    if not match:
        raise ValueError(
            f"hub corpus spec {spec!r} is malformed; expected hf:OWNER/NAME or hf:OWNER/NAME:CONFIG, "
            "e.g. hf:HuggingFaceFW/fineweb-edu:sample-10BT"
        )
    return match["name"], match["config"]


def corpus_ref(fingerprint: str, name: str) -> str:
    """The portable stand-in of a local corpus: ``corpus-sha256:<fingerprint>:<name>``.

    Args:
        fingerprint: the document fingerprint (64 hex digits, :mod:`harness.corpus.fingerprint`).
        name: the corpus's file or folder name (no directory), to tell a reader what it was.

    Raises:
        ValueError: a fingerprint that is not 64 lowercase hex digits.
    """
    if not re.fullmatch(r"[0-9a-f]{64}", fingerprint or ""):
        raise ValueError(f"corpus fingerprint {fingerprint!r} is not 64 lowercase hex digits")
    return f"{REF_PREFIX}{fingerprint}:{name}"


def parse_ref(spec: str) -> tuple[str, str] | None:
    """``(fingerprint, name)`` of a corpus reference, ``None`` for anything else (a path, ``hf:``)."""
    match = _REF.fullmatch(spec or "")
    return (match.group(1), match.group(2)) if match else None


def is_local(spec: str) -> bool:
    """True for a corpus given by a path (or glob) on this machine: not a hub spec, not a reference."""
    return bool(spec) and not spec.startswith(HUB_PREFIX) and parse_ref(spec) is None


def corpus_name(spec: str) -> str:
    """The file or folder name of a corpus spec (a reference's recorded name; ``hf:`` specs whole)."""
    ref = parse_ref(spec)
    if ref is not None:
        return ref[1]
    if not is_local(spec):
        return spec
    return os.path.basename(os.path.normpath(spec)) or spec


def exists(path: str) -> bool:
    """True when a local corpus path (or glob) matches something here: the one path check."""
    return bool(glob.glob(path)) if glob.has_magic(path) else os.path.exists(path)


def resolve_corpus(spec: str, cwd: str | os.PathLike | None = None) -> str:
    """Absolute form of a corpus spec; ``hf:`` specs and references are returned unchanged.

    A relative path (or glob) is joined to ``cwd`` (default: the current working directory) and
    normalised; it is not required to exist here (see :func:`check_corpus`).

    Raises:
        ValueError: an empty spec (``--corpus ""``: it would name the working directory).
    """
    if not spec.strip():
        raise ValueError(f"corpus {spec!r} is an empty path; give {SPEC_FORMS}")
    if spec.startswith(HUB_PREFIX) or parse_ref(spec) is not None:  # no path
        return spec
    path = Path(spec).expanduser()
    if not path.is_absolute():
        path = Path(cwd or os.getcwd()) / path
    return os.path.normpath(path)


def choose_corpus(
    cli: str | None, written: str | None = None, *, folder: Path | None = None, where: str = ""
) -> tuple[str | None, str]:
    """The corpus of a command, by the one precedence every command uses (DESIGN section 1, grid
    files): ``--corpus``, else ``$HARNESS_CORPUS`` (both relative to the working directory), else the
    grid's ``corpus`` (relative to the grid file's folder, so a grid works from any directory).

    Args:
        cli: the command's ``--corpus`` value, or ``None`` (not given).
        written: the grid's ``corpus`` as written in its file, if the command reads a grid.
        folder: the grid file's folder (``None``: the working directory).
        where: where ``written`` comes from, for messages (e.g. ``key 'corpus' of G.toml``).

    Returns:
        ``(corpus, source)``: the absolute corpus (an ``hf:`` spec or a reference unchanged) and
        where it came from, for messages; ``(None, "")`` when none of the three gives one.

    Raises:
        ValueError: an empty ``--corpus`` (:func:`resolve_corpus`): given, it is never passed over.
    """
    if cli is not None:
        return resolve_corpus(cli), "--corpus"
    if os.environ.get("HARNESS_CORPUS"):
        return resolve_corpus(os.environ["HARNESS_CORPUS"]), "$HARNESS_CORPUS"
    if written:
        return resolve_corpus(written, folder), where
    return None, ""


def check_corpus(resolved: str, *, source: str) -> None:
    """Refuse a spec that names no local corpus here; ``hf:`` specs are not checked (they need a network).

    Args:
        resolved: the spec (:func:`resolve_corpus`).
        source: where it came from, for the message (e.g. ``"key 'corpus' of X.toml"``).

    Raises:
        FileNotFoundError: a reference (it names a fingerprint, not a place: ``--corpus PATH``), or a
            path or glob that matches nothing.
    """
    if resolved.startswith(HUB_PREFIX):
        return
    ref = parse_ref(resolved)
    if ref is not None:
        raise FileNotFoundError(
            f"corpus {ref[1]} (fingerprint {ref[0]}, from {source}) is a reference to a corpus, not a path: "
            "pass --corpus PATH (checked against that fingerprint)"
        )
    if not exists(resolved):
        raise FileNotFoundError(
            f"corpus {resolved} not found (from {source}); pass --corpus PATH or set $HARNESS_CORPUS"
        )


__all__ = [
    "HUB_PREFIX",
    "REF_PREFIX",
    "SPEC_FORMS",
    "parse_hub_spec",
    "corpus_ref",
    "parse_ref",
    "is_local",
    "corpus_name",
    "exists",
    "resolve_corpus",
    "choose_corpus",
    "check_corpus",
]
