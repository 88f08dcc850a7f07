"""docs/layout.md's "Where to find what" table names paths that exist in the tree."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYOUT = ROOT / "docs" / "layout.md"


def where_table(text: str) -> dict[str, str]:
    """What one looks for -> the path in backticks, from the rows of the section "## Where to find what"."""
    section = text.split("## Where to find what", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0] and not set(cells[0]) <= {"-"} and cells[0] != "what you look for":
            rows[cells[0]] = re.fullmatch(r"`([^`]+)`", cells[1]).group(1)
    return rows


def test_every_path_of_the_where_to_find_what_table_exists():
    rows = where_table(LAYOUT.read_text())
    assert 8 <= len(rows) <= 16, rows
    missing = [f"{what}: {path}" for what, path in rows.items() if not (ROOT / path).exists()]
    assert not missing, "docs/layout.md names paths that are not in the tree:\n" + "\n".join(missing)


def test_the_table_reader_sees_a_row_and_its_path():
    text = "# x\n\n## Where to find what\n\n| what you look for | where it is |\n|---|---|\n| the queue | `a/b.py` |\n\n## Next\n| no | `c` |\n"
    assert where_table(text) == {"the queue": "a/b.py"}
