"""The largest files and functions of the project, printed as guidance (``make lint`` runs it).

    python scripts/size_report.py            # the 15 largest files and functions
    python scripts/size_report.py --top 40

Sizes are physical lines: a file's every line (blank, comment and docstring lines included); a
function's from its first decorator to its last line (:mod:`ast`'s ``lineno..end_lineno``). A size
is a smell detector, not a design: a module holds one concept whole and a function one step whole,
so nothing here fails. Files above :data:`FILE_HINT` lines and functions above :data:`FUNCTION_HINT`
are marked ``*``, as places to look at when they grow.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("harness", "scripts")
FILE_HINT = 600  # physical lines worth a look
FUNCTION_HINT = 80  # physical lines from the first decorator to the last line


def function_sizes(text: str) -> list[tuple[str, int, int]]:
    """(name, first line, physical lines) of every function and method of ``text``, counted from its
    first decorator to its last line."""
    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            out.append((node.name, first, node.end_lineno - first + 1))
    return out


def sizes(root: Path = ROOT) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """(files, functions): ``(path, lines)`` and ``(path:line name, lines)``, largest first."""
    files, functions = [], []
    for path in sorted(p for folder in FOLDERS for p in (root / folder).rglob("*.py")):
        rel, text = path.relative_to(root).as_posix(), path.read_text()
        files.append((rel, len(text.splitlines())))
        functions += [(f"{rel}:{line} {name}", n) for name, line, n in function_sizes(text)]
    key = lambda item: (-item[1], item[0])
    return sorted(files, key=key), sorted(functions, key=key)


def report(top: int, root: Path = ROOT) -> str:
    """The printed report: the ``top`` largest files and functions, and how many pass each hint."""
    files, functions = sizes(root)
    lines = [f"largest files (lines; * above {FILE_HINT}):"]
    lines += [f"  {n:5d}{'*' if n > FILE_HINT else ' '} {name}" for name, n in files[:top]]
    lines.append(f"largest functions (lines; * above {FUNCTION_HINT}):")
    lines += [f"  {n:5d}{'*' if n > FUNCTION_HINT else ' '} {name}" for name, n in functions[:top]]
    lines.append(
        f"{sum(n > FILE_HINT for _, n in files)} of {len(files)} files above {FILE_HINT} lines, "
        f"{sum(n > FUNCTION_HINT for _, n in functions)} of {len(functions)} functions above {FUNCTION_HINT}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python scripts/size_report.py", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--top", type=int, default=15, help="how many files and functions to list (default 15)"
    )
    print(report(parser.parse_args(argv).top))


if __name__ == "__main__":
    main()
