"""The variant catalogue: spec files found on disk, composed specs resolved (DESIGN section 3).

Specs live in the built-in folder ``harness/models/specs/`` (parent, treatment, references),
``harness/models/specs/controls/`` (a link to the top-level ``controls/`` folder: controls and composed
variants such as ``rd_offset``) and
any folder on ``$HARNESS_SPEC_PATH`` (``os.pathsep``-separated). A file with a ``base`` key is a
composed spec (:mod:`harness.models.compose`): it is resolved after every file is read, so a
base may live in any folder, and a composed spec may itself be a base.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from pathlib import Path

from harness.models.compose import compose, spec_toml
from harness.models.spec import VariantSpec, parse_spec, parse_spec_text


def load_spec_file(path: str | os.PathLike, text: str | None = None) -> VariantSpec:
    """Read and validate one spec TOML file (errors name the file); ``text``: its contents, already read."""
    path = Path(path)
    spec = parse_spec_text(path.read_text(encoding="utf-8-sig") if text is None else text, where=str(path))
    if spec.name != path.stem:
        raise ValueError(f"{path}: name={spec.name!r} must equal the file name {path.stem!r}")
    return spec


def spec_dirs() -> list[Path]:
    """Folders searched for specs: built-ins, the controls, ``$HARNESS_SPEC_PATH``."""
    return [
        *_shipped_dirs(),
        *map(Path, filter(None, os.environ.get("HARNESS_SPEC_PATH", "").split(os.pathsep))),
    ]


def _shipped_dirs() -> list[Path]:
    """The harness's own spec folders: built-ins (``specs/``) and controls (``specs/controls/``, in a
    checkout a link to the top-level ``controls/`` folder; in a wheel the files themselves)."""
    specs = Path(__file__).with_name("specs")
    return [specs, specs / "controls"]


def is_shipped(spec: VariantSpec) -> bool:
    """Whether ``spec`` was read from the harness's own folders (built-ins, ``controls/``),
    not from ``$HARNESS_SPEC_PATH``: a worker elsewhere has the shipped ones."""
    return Path(spec.source).parent in _shipped_dirs()


def _read(path: Path, text: str) -> dict:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: not valid TOML: {exc}") from None


def load_specs() -> dict[str, VariantSpec]:
    """All variant specs by name, composed ones resolved against their base.

    Raises:
        ValueError: two files define the same variant name; a composed spec whose base is
            unknown or that is its own base (directly or through others); or as
            :func:`load_spec_file` and :func:`harness.models.compose.compose`.
    """
    paths: dict[str, Path] = {}
    for folder in spec_dirs():
        for path in sorted(folder.glob("*.toml")):
            if path.stem in paths:
                raise ValueError(f"variant {path.stem!r} defined twice: {paths[path.stem]} and {path}")
            paths[path.stem] = path
    texts = {  # each file read once; -sig: a byte-order mark (Windows editors) is not TOML
        name: path.read_text(encoding="utf-8-sig") for name, path in paths.items()
    }
    raw = {name: _read(path, texts[name]) for name, path in paths.items()}
    specs: dict[str, VariantSpec] = {}

    def resolve(name: str, chain: tuple[str, ...]) -> dict:
        data = raw[name]
        if "base" not in data:
            return data
        base = data["base"]
        if not isinstance(base, str):  # e.g. base = ["rd_attnres"]: one spec is composed on one base
            raise ValueError(
                f"{paths[name]}: base = {base!r}: must be one variant name, e.g. base = \"rd_attnres\""
            )
        if base not in raw:
            raise ValueError(
                f"{paths[name]}: base {base!r} is not a variant; variants: {', '.join(sorted(raw))}"
            )
        if base in chain:
            raise ValueError(f"{paths[name]}: base {base!r} composes a cycle: {' -> '.join((*chain, base))}")
        return compose(resolve(base, (*chain, base)), data, where=str(paths[name]))

    for name, path in paths.items():
        if "base" not in raw[name]:
            specs[name] = load_spec_file(path, texts[name])
            continue
        merged = resolve(name, (name,))
        spec = dataclasses.replace(parse_spec(merged, where=str(path)), text=spec_toml(merged))
        if spec.name != path.stem:
            raise ValueError(f"{path}: name={spec.name!r} must equal the file name {path.stem!r}")
        specs[name] = dataclasses.replace(spec, base=raw[name]["base"])
    return specs
