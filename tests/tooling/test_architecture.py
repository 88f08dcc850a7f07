"""The project's module structure: imports point one way, layer by layer, with no cycle.

* no import cycle among the project's modules (the one installed package, ``harness``),
  counting the imports inside functions too (an import deferred into a function still closes a
  circle, it only hides it);
* no import of a project module inside a function, except where :data:`DEFERRED` says why;
* ``harness.report.stats`` (computing) never imports ``harness.report.render`` or ``harness.report.build``, and nothing in
  ``harness`` outside its commands imports the report;
* no module imports another project module's private name (``from x import _y``): what two modules
  share is public and documented, or lives in the module that uses it;
* a name is imported from the module that defines it, not from one that imports it (a package's
  ``__init__`` may gather its modules' names, never another package's, and every name it exports is there);
* the layers of :data:`LAYERS` are the ones docs/layout.md and ``harness/__init__.py``'s docstring list;
* every ``harness.report`` module imports in a fresh interpreter, in dependency order.

File and function sizes are guidance, not a rule: ``python scripts/size_report.py`` (``make lint``)
prints the largest.

The sources are parsed with :mod:`ast` (nothing is imported, except in a fresh interpreter by the tests
that import the packages and the report's modules), so a check names the file and line. Run: ``python -m pytest -q tests/tooling/test_architecture.py``.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("harness",)


# Imports of project modules inside functions: allowed in these folders/files (with why), and elsewhere
# only where the import line, or the comment line just above it, says why it is deferred ("# lazy: ...").
DEFERRED = {
    "harness/commands/": "a command loads its stage's modules only when it runs, so `harness --help` and the "
    "other commands start without torch, Optuna or the report (tests/commands/test_cli_startup.py)",
    "harness/__init__.py": "harness.results / harness.analyze (harness.report.api) load on first use, so `import "
    "harness` and `harness --help` stay cheap (tests/commands/test_cli_startup.py)",
}
REASON = "# lazy:"


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The project module ``name`` loads (a ``from pkg import name`` may name a module or an attribute)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str) -> list[tuple[ast.stmt, str, bool]]:
    """(statement, project module imported, inside a function) for every import of ``module``."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    inside = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inside |= {id(n) for n in ast.walk(fn) if n is not fn}
    out = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.ImportFrom):  # relative: resolved against the importing package
            base = module if path.name == "__init__.py" else module.rpartition(".")[0]
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            names = [".".join(x for x in (base, node.module, a.name) if x) for a in node.names]
        for name in names:
            target = _resolve(name) if name.split(".")[0] in PACKAGES else None
            if target is not None and target != module:
                out.append((node, target, id(node) in inside))
    return out


GRAPH = {m: {t for _, t, _ in _imports(m)} for m in MODULES}


def test_no_import_cycle_among_the_project_modules():
    try:
        order = list(TopologicalSorter(GRAPH).static_order())
    except CycleError as exc:
        raise AssertionError(
            f"import cycle (imports inside functions included): {' -> '.join(exc.args[1])}"
        ) from exc
    assert set(order) == set(MODULES)


def test_a_known_cycle_is_found():
    """The check above can fail: a planted circle (computing importing rendering) is reported."""
    planted = {
        **GRAPH,
        "harness.report.stats.results": GRAPH["harness.report.stats.results"]
        | {"harness.report.render.sections"},
    }
    try:
        list(TopologicalSorter(planted).static_order())
    except CycleError as exc:
        assert "harness.report.render.sections" in exc.args[1]
    else:
        raise AssertionError("the planted cycle was not found")


def test_project_imports_inside_functions_are_deferred_on_purpose():
    found = []
    for module, path in MODULES.items():
        rel = path.relative_to(ROOT).as_posix()
        if any(rel.startswith(prefix) for prefix in DEFERRED):
            continue
        lines = path.read_text().split("\n")
        found += [
            f"{rel}:{node.lineno} imports {target} inside a function without a '{REASON} why' comment"
            for node, target, inside in _imports(module)
            if inside and not _says_why(lines, node.lineno, node.end_lineno)
        ]
    assert not found, "\n".join(found)


def test_third_party_imports_inside_functions_say_why():
    """An import of a library inside a function (deferring a heavy or optional one) says why on its line
    or the comment line above (``# lazy: ...``), as project imports do; the command modules and the
    package's facade keep their folder-wide reason (:data:`DEFERRED`)."""
    found = []
    for path in MODULES.values():
        rel = path.relative_to(ROOT).as_posix()
        if any(rel.startswith(prefix) for prefix in DEFERRED):
            continue
        text = path.read_text()
        lines, found_here = text.split("\n"), _function_imports(ast.parse(text))
        found += [
            f"{rel}:{node.lineno}: '{lines[node.lineno - 1].strip()}' inside a function without '{REASON} why'"
            for node in found_here
            if not _says_why(lines, node.lineno, node.end_lineno)
        ]
    assert not found, "\n".join(found)


def _function_imports(tree: ast.Module) -> list[ast.stmt]:
    """The imports of third-party or standard modules inside the functions of ``tree``."""
    out = []
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, ast.Import) and node.names[0].name.split(".")[0] not in PACKAGES:
                    out.append(node)
                elif (
                    isinstance(node, ast.ImportFrom)
                    and node.level == 0
                    and node.module.split(".")[0] not in PACKAGES
                ):
                    out.append(node)
    return list({id(n): n for n in out}.values())  # a nested function's import once


def test_the_function_import_check_sees_a_bare_one():
    tree = ast.parse(
        "def f():\n    import sqlalchemy\n    from harness import x\n    def g():\n        import os\n"
    )
    nodes = _function_imports(tree)
    assert [n.lineno for n in nodes] == [2, 5]
    lines = ["def f():", "    import sqlalchemy  # lazy: only on PostgreSQL"]
    assert _says_why(lines, 2, 2) and not _says_why(["def f():", "    import sqlalchemy"], 2, 2)


def _says_why(lines: list[str], first: int, last: int) -> bool:
    """The import (lines ``first..last``, 1-based), or the comment lines right above it, give a reason."""
    if any(REASON in lines[i - 1] for i in range(first, last + 1)):
        return True
    i = first - 1
    while i >= 1 and lines[i - 1].strip().startswith("#"):
        if REASON in lines[i - 1]:
            return True
        i -= 1
    # the next import statements of one block share the reason of the block's first line
    while i >= 1 and lines[i - 1].strip().startswith(("from ", "import ")):
        if REASON in lines[i - 1]:
            return True
        i -= 1
    return bool(i >= 1 and lines[i - 1].strip().startswith("#") and REASON in lines[i - 1])


def test_dependencies_point_one_way():
    wrong = []
    for module, targets in GRAPH.items():
        if module.startswith("harness.report.stats"):
            wrong += [
                f"{module} imports {t}"
                for t in targets
                if t.startswith(("harness.report.render", "harness.report.build"))
            ]
        if module.startswith("harness.report.render"):
            wrong += [f"{module} imports {t}" for t in targets if t.startswith("harness.report.build")]
        if not module.startswith(("harness.commands", "harness.report")) and module != "harness":
            # the package's facade may forward to the notebook API (harness.report.api), nothing else
            wrong += [f"{module} imports {t}" for t in targets if t.startswith("harness.report")]
    assert not wrong, "\n".join(wrong)


# The stages of harness/, highest first (docs/layout.md): a package imports only packages of lower
# layers, never another of its own layer. design/ (a run's config, the grid's plan) sits on models/
# and data/; corpus/ (what a corpus is and where: reading, fingerprint, split, key) sits below data/,
# which tokenizes what it reads; common/ (files, terminal, Ctrl-C, shared terms) imports nothing from harness.
LAYERS = (
    ("commands",),
    ("scheduling", "bench", "report"),
    ("train",),
    ("design",),
    ("models", "data", "store"),
    ("corpus",),
    ("common",),
)


def _stage(module: str) -> str | None:
    """The stage package of a ``harness`` module (``None``: a loose module at the top of harness/)."""
    parts = module.split(".")
    return (
        parts[1] if len(parts) > 2 or (len(parts) == 2 and (ROOT / "harness" / parts[1]).is_dir()) else None
    )


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """``"A imports B"`` for every import of ``graph`` against :data:`LAYERS`."""
    rank = {name: i for i, layer in enumerate(LAYERS) for name in layer}
    wrong = []
    for module, targets in graph.items():
        if not module.startswith("harness.") or module in ("harness.cli", "harness.__main__"):
            continue  # the entry points: cli maps every command
        here = _stage(module)
        for t in targets:
            there = _stage(t) if t.startswith("harness.") else None
            if there is None or there == here:
                continue  # another top package, a loose module (below every stage), or its own stage
            lowest = len(LAYERS) - 1
            if (rank[there] < lowest) if here is None else (rank[there] <= rank[here]):
                wrong.append(f"{module} imports {t}")
    return sorted(wrong)


def test_harness_packages_import_only_lower_layers():
    stages = {p.name for p in (ROOT / "harness").iterdir() if (p / "__init__.py").is_file()}
    assert {name for layer in LAYERS for name in layer} == stages
    top = sorted(p.name for p in (ROOT / "harness").glob("*.py"))
    assert top == ["__init__.py", "__main__.py", "cli.py"], (
        f"only the entry points at the top of harness/: {top}"
    )
    wrong = upward_imports(GRAPH)
    assert not wrong, "imports against the layer order of docs/layout.md:\n" + "\n".join(wrong)


def numbered_layers(text: str, name: str) -> tuple[tuple[str, ...], ...]:
    """The layers of a numbered list (``1. ...``, an item running on over indented lines), each the
    package names that ``name`` (a regex with one group) finds in it, in order."""
    items = re.split(r"^\s*\d+\. ", text, flags=re.MULTILINE)[1:]
    return tuple(tuple(re.findall(name, item.split("\n\n")[0])) for item in items)


def test_the_layers_are_listed_alike_in_the_package_docstring_and_docs_layout():
    intro = (ROOT / "docs" / "layout.md").read_text().split("\n## ", 1)[0]  # above "Where to find what"
    assert numbered_layers(intro, r"`(\w+)`") == LAYERS, "docs/layout.md lists other layers"
    doc = ast.get_docstring(ast.parse((ROOT / "harness" / "__init__.py").read_text()))
    assert numbered_layers(doc, r":mod:`harness\.(\w+)`") == LAYERS, "harness/__init__.py lists other layers"


def test_the_layer_list_reader_reads_items_that_run_on():
    text = "x\n\n1. `a` -- one;\n   `b` -- two;\n2. `c`\n\nAfter: `d`.\n"
    assert numbered_layers(text, r"`(\w+)`") == (("a", "b"), ("c",))


#: The parts of harness/scheduling/, highest first (docs/layout.md): a worker uses the queue, the queue
#: stores what a grid expands into, and neither the queue nor a grid knows the workers.
SCHEDULING_LAYERS = (("workers", "launch"), ("queue", "grids"), ("tuning",))


def test_scheduling_parts_import_only_lower_parts():
    rank = {name: i for i, layer in enumerate(SCHEDULING_LAYERS) for name in layer}
    parts = {m.split(".")[2] for m in MODULES if m.startswith("harness.scheduling.")}
    assert parts == set(rank), "a part of harness/scheduling/ is missing from SCHEDULING_LAYERS"
    wrong = [
        f"{module} imports {t}"
        for module, targets in GRAPH.items()
        if module.startswith("harness.scheduling.")
        for t in targets
        if t.startswith("harness.scheduling.")
        and t.split(".")[2] != module.split(".")[2]
        and rank[t.split(".")[2]] <= rank[module.split(".")[2]]
    ]
    assert not wrong, "\n".join(wrong)


def test_the_layer_check_finds_an_upward_import():
    graph = {
        "harness.train.runner": {"harness.scheduling.stop", "harness.models.gpt", "harness.design.config"},
        "harness.design.config": {"harness.corpus.key", "harness.train.lit"},
        "harness.data.shards": {"harness.models.sizes"},
    }
    assert upward_imports(graph) == [
        "harness.data.shards imports harness.models.sizes",
        "harness.design.config imports harness.train.lit",
        "harness.train.runner imports harness.scheduling.stop",
    ]  # the packages of one layer are independent


def test_no_private_name_is_imported_from_another_project_module():
    found = []
    for module, path in MODULES.items():
        for node, target, _ in _imports(module):
            if isinstance(node, ast.ImportFrom):
                found += [
                    f"{path.relative_to(ROOT).as_posix()}:{node.lineno} imports {target}.{a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
    assert not found, "\n".join(sorted(set(found)))


def _defined(module: str) -> set[str]:
    """The names ``module`` binds at its top level other than by an import: functions, classes,
    assignments (inside an ``if`` or ``try`` too)."""
    tree = ast.parse(MODULES[module].read_text())
    out = set()
    for top in tree.body:
        if isinstance(top, (ast.Import, ast.ImportFrom)):
            continue
        nodes = (
            [top] if isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else ast.walk(top)
        )
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                out |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return out


def reexported(files: dict[str, str]) -> list[str]:
    """``"path:line module.name"`` for every ``from module import name`` of a project module (not a
    package's ``__init__``, whose facade may gather its modules' names) that ``module`` does not define
    itself: the caller imports from the definer."""
    found = []
    for rel, text in files.items():
        for node in ast.walk(ast.parse(text)):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in MODULES):
                continue
            if MODULES[node.module].name == "__init__.py":
                continue
            defined = _defined(node.module)
            found += [
                f"{rel}:{node.lineno} {node.module}.{a.name}"
                for a in node.names
                if a.name not in defined and f"{node.module}.{a.name}" not in MODULES
            ]
    return found


def test_names_are_imported_from_the_module_that_defines_them():
    paths = [*MODULES.values(), *(ROOT / "tests").rglob("*.py"), *(ROOT / "scripts").rglob("*.py")]
    found = reexported({p.relative_to(ROOT).as_posix(): p.read_text() for p in paths})
    assert not found, "import these from their definer:\n" + "\n".join(found)


def test_the_reexport_check_sees_a_name_passed_through():
    # harness.design.config imports check_value from harness.design.train_table and defines TrainConfig
    assert reexported({"x.py": "from harness.design.config import TrainConfig, check_value"}) == [
        "x.py:1 harness.design.config.check_value"
    ]


def foreign_exports(files: dict[str, str]) -> list[str]:
    """``"path:line module.name"`` for every name of a package ``__init__``'s ``__all__`` that it imports from
    a module outside its package: a facade gathers its own modules' names, the caller imports another
    package's from the definer. ``files``: a package's ``harness/.../__init__.py`` path -> its text."""
    found = []
    for rel, text in files.items():
        package = ".".join(Path(rel).parent.parts)
        tree = ast.parse(text)
        exported = {
            elt.value
            for node in tree.body
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets)
            for elt in node.value.elts
        }
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module.split(".")[0] in PACKAGES:
                found += [
                    f"{rel}:{node.lineno} {node.module}.{a.name}"
                    for a in node.names
                    if (a.asname or a.name) in exported and not node.module.startswith(package + ".")
                ]
    return found


def test_a_package_exports_only_names_of_its_own_modules():
    inits = [p for p in MODULES.values() if p.name == "__init__.py"]
    found = foreign_exports({p.relative_to(ROOT).as_posix(): p.read_text() for p in inits})
    assert not found, "import these from their definer, not a package's facade:\n" + "\n".join(found)


def test_the_export_check_sees_another_packages_name_passed_on():
    text = (
        "from harness.common.terms import RUN_ROLES as ROLES\nfrom harness.store.runfile import RUNS_DIRNAME\n"
        '__all__ = ["ROLES", "RUNS_DIRNAME"]\n'
    )
    found = foreign_exports({"harness/store/__init__.py": text})
    assert found == ["harness/store/__init__.py:1 harness.common.terms.RUN_ROLES"]


def test_every_name_a_package_exports_is_there():
    # a lazy facade (PEP 562 ``__getattr__``) names its module in a table: after a name moves, the table must follow
    code = (
        "import importlib, sys\nfor m in sys.argv[1:]:\n    p = importlib.import_module(m)\n"
        "    for n in getattr(p, '__all__', ()):\n        getattr(p, n)\nprint(len(sys.argv) - 1)"
    )
    packages = sorted(m for m, p in MODULES.items() if p.name == "__init__.py")
    proc = subprocess.run(
        [sys.executable, "-c", code, *packages], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert int(proc.stdout.split()[-1]) == len(packages) >= 15


def test_every_reports_module_imports_in_a_fresh_interpreter():
    order = [m for m in TopologicalSorter(GRAPH).static_order() if m.startswith("harness.report")]
    code = "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)\nprint(len(sys.argv) - 1)"
    proc = subprocess.run(
        [sys.executable, "-c", code, *order], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert int(proc.stdout.split()[-1]) == len(order) > 20


# ----------------------------------------------------------------------------- one setting's path

#: The modules a grid's ``[train] vocab_size`` crosses on its way to the embedding (issue 46: at
#: most 6), each with what it does with it. The value travels between them inside objects
#: (CorpusKey, the corpus's manifest, PreparedCorpus, ModelConfig), so the queue, the worker, the
#: shard builder and the runner pass it on without naming it.
VOCAB_PATH = {
    "harness/design/config.py": "TrainConfig.vocab_size; RunConfig.corpus_key; model_config pads it",
    "harness/corpus/key.py": "CorpusKey.vocab_size; requested_vocab, the one fallback rule",
    "harness/data/tokenizer.py": "the BPE trained to it; the tokenizer's V written to the manifest",
    "harness/data/prepared.py": "PreparedCorpus.vocab_size, the tokenizer's V read back",
    "harness/models/sizes.py": "ModelConfig.vocab_size; padded_vocab, the one padding rule",
    "harness/models/gpt.py": "the token embedding and the LM head",
}
#: Modules that name it off that path, and why.
VOCAB_ELSEWHERE = {
    "harness/bench/loop.py": "the bench's models, sized by its synthetic corpus",
    "harness/bench/measure.py": "the bench's synthetic corpus and models",
    "harness/bench/steps.py": "the bench's random batches",
    "harness/commands/prepare.py": "harness prepare --vocab-size, a corpus without a grid",
    "harness/commands/sizes.py": "harness sizes --vocab-size, the parameter table",
    "harness/data/legacy_layout.py": "the old single-file folders' names",
    "harness/data/unigram.py": "the unigram baseline's id counts",
    "harness/train/lit.py": "the loss's width, the tokenizer's V from token_bytes (logits past it are padding)",
    "harness/train/microbatch.py": "the micro-batch probe's random tokens",
}


def _names(tree: ast.AST, name: str) -> bool:
    """Whether ``tree``'s code (not its docstrings) names ``name``: a variable, attribute,
    parameter, keyword argument or field."""
    for node in ast.walk(tree):
        if (
            (isinstance(node, ast.Name) and node.id == name)
            or (isinstance(node, ast.Attribute) and node.attr == name)
            or (isinstance(node, (ast.arg, ast.keyword)) and node.arg == name)
        ):
            return True
    return False


def test_the_vocabulary_crosses_six_modules_from_the_grid_to_the_embedding():
    named = {
        rel
        for rel in (p.relative_to(ROOT).as_posix() for p in (ROOT / "harness").rglob("*.py"))
        if _names(ast.parse((ROOT / rel).read_text()), "vocab_size")
    }
    assert len(VOCAB_PATH) <= 6
    assert named - set(VOCAB_ELSEWHERE) == set(VOCAB_PATH), "a module started or stopped naming vocab_size"
    assert set(VOCAB_ELSEWHERE) <= named, "a listed module no longer names vocab_size: drop it"
    # the rules exist once, called where their inputs are: the fallback (requested_vocab: a grid's
    # preset, or `harness prepare`'s default) and the padding (padded_vocab: a run's model, and the
    # table `harness sizes --vocab-size` prints)
    callers = {"requested_vocab": set(), "padded_vocab": set()}
    for path in (ROOT / "harness").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in callers:
                callers[node.func.id].add(path.relative_to(ROOT).as_posix())
    assert callers == {
        "requested_vocab": {"harness/design/config.py", "harness/commands/prepare.py"},
        "padded_vocab": {"harness/design/config.py", "harness/commands/sizes.py"},
    }


def test_the_path_check_sees_a_keyword_argument_and_not_a_docstring():
    assert _names(ast.parse("f(vocab_size=3)"), "vocab_size")
    assert not _names(ast.parse('"""vocab_size"""\nx = 1'), "vocab_size")
