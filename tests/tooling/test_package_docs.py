"""The docstrings that describe the layout stay true as modules come and go.

* Every package's ``__init__`` docstring names each of its modules (a ``.py`` file beside it, or a
  sub-package folder) with a cross-reference to the module's full dotted name,
  ``:mod:`harness.pkg.name``` or ``:mod:`~harness.pkg.name``` (the tilde shows the last part only).
  A word in prose does not count: "run", "queue" or ``init`` may be anything, a ``:mod:`` reference
  is one module.
* Every ``:mod:`harness...``` reference in the sources names a module that exists, so a module that
  moves cannot stay named at its old place.
* No module docstring carries the "Owns ... Must not ..." formula: what a module holds is said once,
  in its package's docstring (checked above); a module's own docstring states a constraint as an
  ordinary sentence with its reason, where one is not obvious.

The sources are read as text and parsed with :mod:`ast`; nothing is imported.
Run: ``python -m pytest -q tests/tooling/test_package_docs.py``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "harness"

#: ``:mod:`harness.x.m```, ``:mod:`~harness.x.m``` or ``:mod:`title <harness.x.m>```: group 1 is the module.
MOD_REF = re.compile(r":mod:`(?:[^`<]*<)?~?([\w.]+)>?`")
#: A sentence of the formula: "Owns the ... ." / "Must not ... ." at the start of a docstring's sentence.
FORMULA = re.compile(r"(?:^|[.:;]\s+)(Owns|Must not)\b", re.MULTILINE)


def dotted(path: Path, root: Path = ROOT) -> str:
    """``harness/x/m.py`` -> ``harness.x.m``; a package's folder or its ``__init__.py`` -> ``harness.x``."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules(package: Path) -> list[str]:
    """The modules of ``package`` (a folder with ``__init__.py``): its ``.py`` files other than
    ``__init__.py`` and its sub-package folders, by name, sorted. Data files and folders without an
    ``__init__.py`` (``models/specs/``, ``store/schema.sql``) are not modules."""
    files = {p.stem for p in package.glob("*.py") if p.name != "__init__.py"}
    subpackages = {d.name for d in package.iterdir() if d.is_dir() and (d / "__init__.py").is_file()}
    return sorted(files | subpackages)


def docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text(), str(path))) or ""


def unnamed(package: Path, root: Path = ROOT) -> list[str]:
    """The modules of ``package`` that its ``__init__`` docstring does not name with a ``:mod:``
    reference to their full dotted name."""
    named = set(MOD_REF.findall(docstring(package / "__init__.py")))
    prefix = dotted(package, root)
    return [m for m in package_modules(package) if f"{prefix}.{m}" not in named]


def packages(root: Path = ROOT) -> list[Path]:
    return sorted(p.parent for p in (root / "harness").rglob("__init__.py"))


def test_every_package_docstring_names_each_of_its_modules():
    assert len(packages()) >= 15  # harness and its sub-packages: the search sees them all
    missing = [
        f"{(pkg / '__init__.py').relative_to(ROOT).as_posix()}: {', '.join(gone)}"
        for pkg in packages()
        if (gone := unnamed(pkg))
    ]
    assert not missing, (
        "name each module in its package's docstring, as :mod:`harness.pkg.module` (or "
        ":mod:`~harness.pkg.module`) with what it holds:\n" + "\n".join(missing)
    )


def test_the_check_sees_a_module_that_prose_mentions_but_does_not_name(tmp_path):
    pkg = tmp_path / "harness" / "grids"
    (pkg / "queue").mkdir(parents=True)
    (pkg / "queue" / "__init__.py").write_text('"""A sub-package."""\n')
    (pkg / "specs").mkdir()  # data, not a module
    for name in ("grid", "run", "init", "edit"):
        (pkg / f"{name}.py").write_text("")
    (pkg / "__init__.py").write_text(
        '"""Grids: :mod:`harness.grids.grid` reads one, :mod:`~harness.grids.edit` edits one; each\n'
        "run is queued (``queue``, `run.py`); init means nothing here (:mod:`harness.grids.initial`).\n"
        '"""\n'
    )
    assert package_modules(pkg) == ["edit", "grid", "init", "queue", "run"]
    assert unnamed(pkg, tmp_path) == ["init", "queue", "run"]


def test_the_check_sees_a_module_added_to_a_real_package(tmp_path):
    # a copy of harness/scheduling/grids (its docstring as it is) with one new module beside it
    real = PACKAGE / "scheduling" / "grids"
    pkg = tmp_path / "harness" / "scheduling" / "grids"
    pkg.mkdir(parents=True)
    for p in real.glob("*.py"):
        (pkg / p.name).write_text(p.read_text())
    assert unnamed(pkg, tmp_path) == []
    (pkg / "seed_bounds.py").write_text('"""A new module."""\n')
    assert unnamed(pkg, tmp_path) == ["seed_bounds"]


def project_modules(root: Path = ROOT) -> set[str]:
    return {dotted(p, root) for p in (root / "harness").rglob("*.py")}


def dangling(files: dict[str, str], modules: set[str]) -> list[str]:
    """``"path:line target"`` for every ``:mod:`` reference to a ``harness`` module that is not in ``modules``."""
    return [
        f"{rel}:{n} {target}"
        for rel, text in files.items()
        for n, line in enumerate(text.splitlines(), 1)
        for target in MOD_REF.findall(line)
        if target.split(".")[0] == "harness" and target not in modules
    ]


def test_every_module_reference_names_a_module_that_exists():
    files = {p.relative_to(ROOT).as_posix(): p.read_text() for p in PACKAGE.rglob("*.py")}
    found = dangling(files, project_modules())
    assert not found, "these :mod: references name no module (moved or renamed?):\n" + "\n".join(found)


def test_the_reference_check_sees_a_module_that_moved():
    text = '"""See :mod:`harness.scheduling.retrain` and :mod:`~harness.train.retrain`; :mod:`tarfile`."""'
    assert dangling({"x.py": text}, project_modules()) == ["x.py:1 harness.scheduling.retrain"]


def formula_sentences(text: str) -> list[str]:
    return [m.group(1) for m in FORMULA.finditer(text)]


def test_no_module_docstring_uses_the_owns_must_not_formula():
    found = [
        f"{p.relative_to(ROOT).as_posix()}: {', '.join(hits)}"
        for p in sorted(PACKAGE.rglob("*.py"))
        if (hits := formula_sentences(docstring(p)))
    ]
    assert not found, (
        "say what a module holds in its package's docstring, and a constraint as a plain sentence "
        "with its reason:\n" + "\n".join(found)
    )


def test_the_formula_check_sees_both_halves_and_not_a_plain_must_not():
    assert formula_sentences("Reads grids.\nOwns the grid. Must not train.") == ["Owns", "Must not"]
    assert formula_sentences("A run must not spend a retry. Ownership of a lease; owns nothing.") == []
