"""The project uses third-party libraries through their public API (issues 40, 46): a private name
breaks on the next release without a warning. A source scan of every module of the project finds
private imports (``from x._y import z``, ``import x._y``, ``from x import _y``) and reads of private
attributes of objects not its own; each one left is named in :data:`PRIVATE_USES` with why (no public
API does it), and a new one fails. Plus the one Optuna convention we rely on (the journal lock's
file name), pinned by behaviour. CPU only, ~2 s:

    python -m pytest -q tests/tooling/test_third_party_private.py
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from harness.scheduling.queue.journal import MendingLock

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("harness", "reports", "db", "controls", "scripts")
#: Every remaining use of a third-party private name, (file, name) -> why no public API does it.
PRIVATE_USES: dict[tuple[str, str], str] = {
    (
        "harness/scheduling/queue/live_trials.py",
        "optuna.storages._rdb",
    ): "Optuna's SQL models: no public API names "
    "its tables; the PostgreSQL paths (a claim with SKIP LOCKED, batched queueing) write them as Optuna does",
    (
        "harness/scheduling/queue/journal.py",
        "optuna.storages.journal._storage",
    ): "the journal's operation codes "
    "(JournalOperation): a repair writes placeholder lines in Optuna's own file format",
    ("harness/bench/measure.py", "_dynamo"): "torch._dynamo.config.recompile_limit: no public setting; "
    "the benchmark compiles one graph per variant",
    ("harness/train/compiled.py", "_dynamo"): "torch._dynamo.reset() and lookup_backend: a long-lived "
    "worker must drop the previous run's compiled entries (recompile_limit, issue 44 row 2), and the run's "
    "counting backend hands each graph to inductor; torch has no public API for either",
    ("harness/train/compiled.py", "torch._dynamo.utils"): "dynamo's frame counters are the one place that "
    "says a frame fell back to eager (no public API reports it)",
    ("scripts/compile_ddp_ways.py", "_dynamo"): "the measurement of compile under DDP sets dynamo's "
    "optimize_ddp and counts its graphs (docs/paper-scale.md): no public setting",
    ("harness/bench/profile.py", "torch._inductor.config"): "Inductor's kernel-profile switch "
    "(cpp.enable_kernel_profile): no public setting",
    ("harness/train/ranks.py", "_signal_connector"): "Lightning's SIGTERM notifier broadcasts inside the "
    "signal handler (a hang with several ranks); Lightning has no public switch",
    ("harness/train/ranks.py", "_get_backend"): "aborting NCCL after a dead rank: torch has no public "
    "abort of the default group",
    ("harness/train/trainer.py", "_is_mkldnn_bf16_supported"): "native CPU bf16: torch has no public probe",
    (
        "harness/__init__.py",
        "_signal",
    ): "the Ctrl-C handler goes in before any other import (docs/faults.md): "
    "the public signal module first imports enum, and _signal is the built-in module under it",
}
#: Underscore names that are documented public API (``os._exit``, a namedtuple's ``_replace`` ...).
DOCUMENTED = {"_exit", "_replace", "_asdict", "_fields", "_make"}


def _optuna_names(tree: ast.Module) -> set[str]:
    """Names a module binds from Optuna (``from optuna... import X``)."""
    return {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("optuna")
        for alias in node.names
    }


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def defined_names(paths: list[Path]) -> set[str]:
    """The private names the project defines itself: functions and methods, ``self._x = ...``."""
    names = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and _private(node.name):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _private(node.attr):
                names.add(node.attr)
            elif isinstance(node, ast.keyword) and node.arg and _private(node.arg):
                names.add(node.arg)  # set_defaults(_main=...): an attribute the project sets
    return names


def private_reads(path: Path, ours: set[str] = frozenset()) -> list[tuple[int, str]]:
    """``(line, expression)`` of each read of a ``_name`` attribute of an object not our own:
    a name the project does not define (``ours``) on anything but ``self``/``cls``, and on
    ``self`` inside a subclass of an Optuna class where the class never assigns that
    attribute itself (it is the base class's)."""
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and _private(node.attr)
            and node.attr not in ours
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
        ):
            found.append((node.lineno, ast.unparse(node)))
    optuna = _optuna_names(tree)
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        if not any(isinstance(b, ast.Name) and b.id in optuna for b in cls.bases):
            continue
        attrs = [
            n
            for n in ast.walk(cls)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
        ]
        own = {n.attr for n in attrs if isinstance(n.ctx, ast.Store)}
        own |= {f.name for f in cls.body if isinstance(f, ast.FunctionDef)}
        found += [
            (n.lineno, f"self.{n.attr}")
            for n in attrs
            if n.attr.startswith("_") and not n.attr.startswith("__") and n.attr not in own
        ]
    return found


def test_the_scan_finds_the_reads_it_forbids(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "from optuna.storages.journal import JournalFileBackend\n"
        "def f(t):\n    return t._trial_id\n"
        "class J(JournalFileBackend):\n"
        "    def __init__(self):\n        self._mine = 1\n"
        "    def g(self):\n        return self._mine, self._file_path, self.public\n"
    )
    assert private_reads(source) == [(3, "t._trial_id"), (8, "self._file_path")]
    assert private_reads(source, {"_trial_id"}) == [(8, "self._file_path")]  # a name of ours: not Optuna's


def private_imports(path: Path) -> list[tuple[int, str]]:
    """``(line, name)`` of each import of a third-party private module or name: ``import x._y``,
    ``from x._y import z`` (the module), ``from x import _y`` (``x._y``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] not in PACKAGES and any(_private(p) for p in parts):
                found.append((node.lineno, name))
                break
    return found


def private_uses(paths: list[Path]) -> dict[tuple[str, str], list[int]]:
    """(file, private module or attribute name) -> lines, over ``paths`` (documented names left out)."""
    ours, out = defined_names(paths), {}
    for path in paths:
        rel = path.relative_to(ROOT).as_posix()
        reads = [(line, expr.rpartition(".")[2]) for line, expr in private_reads(path, ours)]
        for line, name in private_imports(path) + reads:
            if name not in DOCUMENTED:
                out.setdefault((rel, name), []).append(line)
    return out


@pytest.mark.slow
def test_every_third_party_private_use_is_named_with_its_reason():
    paths = [path for pkg in PACKAGES for path in sorted((ROOT / pkg).rglob("*.py"))]
    found = private_uses(paths)
    new = [
        f"{rel}:{lines[0]}: {name}"
        for (rel, name), lines in sorted(found.items())
        if (rel, name) not in PRIVATE_USES
    ]
    assert not new, (
        "third-party private names used (use the public API, or add to PRIVATE_USES why not):\n"
        + "\n".join(new)
    )
    gone = sorted(set(PRIVATE_USES) - set(found))
    assert not gone, f"PRIVATE_USES names uses that are gone (remove them): {gone}"


def test_the_scan_finds_private_imports_and_reads(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "import os\nimport torch._inductor.config as ic\nfrom optuna.storages._rdb import models\n"
        "from tiktoken import _private_fn\nfrom harness._x import y\nfrom .local import _z\n"
        "def f(enc, args):\n    os._exit(0)\n    return enc._mergeable_ranks, args._main\n"
        "def g(p):\n    p.set_defaults(_main=1)\n"
    )
    assert private_imports(source) == [
        (2, "torch._inductor.config"),
        (3, "optuna.storages._rdb"),
        (4, "tiktoken._private_fn"),
    ]
    ours = defined_names([source])
    assert sorted(e for _, e in private_reads(source, ours)) == ["enc._mergeable_ranks", "os._exit"]


def test_the_journal_lock_file_is_where_mendinglock_says(tmp_path):
    journal = str(tmp_path / "queue.journal")
    Path(journal).touch()
    lock = MendingLock(journal)
    assert not os.path.exists(lock.lock_file)
    with lock.held():
        assert os.path.exists(lock.lock_file) and lock.lock_file == journal + ".lock"
    assert not os.path.exists(lock.lock_file)
