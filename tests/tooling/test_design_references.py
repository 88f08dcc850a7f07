"""The specification is in the repository: every "DESIGN section N" points into docs/design.md.

Code, tests and docs cite the design as "DESIGN section N" (also "DESIGN N", "DESIGN sections 4-5",
"DESIGN 1.1-1.2, 10", "DESIGN.md section N"). docs/design.md says so at its top and keeps the
numbered headings 1-12 (with 1.1 and 1.2). This test fails on

* a citation of a section that docs/design.md does not have;
* any path to the project's old external documents (``../shared`` outside ``../shared/data``,
  or ``shared/DESIGN.md`` / ``shared/STYLE.md`` anywhere): a fresh clone has no ``../shared``.

``../shared/data/`` is exempt: it is the FineWeb-Edu sample (test data and the demo's corpus,
too large to commit and not ours to redistribute), read where it exists; the Makefile falls back to
the hub and the tests that need it say it is absent. It is data, not a document. Run:

    python -m pytest -q tests/tooling/test_design_references.py
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"
SKIP_DIRS = {".git", ".venv", "results", "__pycache__", ".ruff_cache", ".pytest_cache", "node_modules"}
TEXT_SUFFIXES = {".py", ".md", ".toml", ".sql", ".sh", ".txt", ".cfg", ".ini", ".yml", ".yaml", ".html"}
TEXT_NAMES = {"Makefile", "run"}  # .ci/run

NUMBER = r"\d+(?:\.\d+)?"
# "DESIGN" (or "DESIGN.md"), an optional "section(s)" or "§", then numbers joined by , - and &;
# a comment marker may sit between them where a citation wraps onto the next comment line.
CITATION = re.compile(
    rf"\bDESIGN(?:\.md)?(?:[\s#*>]+(?:sections?|§)?|\s*§)[\s#*>]*({NUMBER}(?:\s*(?:,|-|and|&)\s*{NUMBER})*)"
)
OUTSIDE = re.compile(r"\.\./shared(?!/data\b)[\w./-]*|shared/(?:DESIGN|STYLE)\.md")


def design_sections(text: str) -> set[str]:
    """The section numbers of docs/design.md's numbered headings ("## 3. Title", "### 1.1 Title")."""
    return set(re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", text, flags=re.M))


def cited_sections(text: str) -> list[tuple[int, str]]:
    """``(line, section)`` for every section a text cites (a range "4-5" cites both ends)."""
    out = []
    for m in CITATION.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        out += [(line, n) for n in re.findall(NUMBER, m.group(1))]
    return out


def problems(text: str, sections: set[str], name: str) -> list[str]:
    """One line per bad citation or outside path in ``text`` (the file ``name``)."""
    bad = [
        f"{name}:{line}: cites DESIGN section {n}, which docs/design.md does not have"
        for line, n in cited_sections(text)
        if n not in sections
    ]
    for m in OUTSIDE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        bad.append(f"{name}:{line}: refers to {m.group(0)!r} outside the repository (use docs/design.md)")
    return bad


def project_texts():
    """Every text file of the checkout (code, tests, docs, grids, scripts), as ``(relative path, text)``."""
    for path in sorted(ROOT.rglob("*")):
        rel = path.relative_to(ROOT)
        if any(part in SKIP_DIRS for part in rel.parts) or not path.is_file():
            continue
        if path.suffix in TEXT_SUFFIXES or path.name in TEXT_NAMES:
            yield rel.as_posix(), path.read_text(errors="replace")


def test_design_has_the_numbered_sections_the_code_cites():
    text = DESIGN.read_text()
    assert design_sections(text) == {str(n) for n in range(1, 15)} | {"1.1", "1.2"}
    assert 'cite as "DESIGN section N"' in text or 'as "DESIGN section N"' in text


def test_every_design_citation_and_document_path_resolves_inside_the_repository():
    sections = design_sections(DESIGN.read_text())
    files, bad = 0, []
    for name, text in project_texts():
        if name == "tests/tooling/test_design_references.py":  # this file plants bad references on purpose
            continue
        files += 1
        bad += problems(text, sections, name)
    assert files > 200  # the walk saw the checkout
    assert not bad, "\n".join(bad)


def test_the_check_finds_what_it_must():
    """The scanner can fail: planted citations and paths are reported, the allowed ones are not."""
    sections = {str(n) for n in range(1, 13)} | {"1.1", "1.2"}
    text = "\n".join(
        [
            "x = 1  # DESIGN section 13: no such section",
            "see DESIGN 1.3 and DESIGN sections 4-14",
            "(DESIGN",
            "# section 21)",
            "[spec](../shared/DESIGN.md), /work/shared/STYLE.md",
            "ok: DESIGN section 6, DESIGN 1.1-1.2, 10, DESIGN.md section 5, DESIGN7_KEYS, DESIGN §3",
            "ok: corpus = '../../shared/data/fineweb_edu_sample'",
        ]
    )
    found = problems(text, sections, "planted")
    assert [line.split(": ", 1)[0] for line in found] == [
        "planted:1",
        "planted:2",
        "planted:2",
        "planted:3",
        "planted:5",
        "planted:5",
    ], found
    assert "section 13" in found[0] and "section 1.3" in found[1] and "section 14" in found[2]
    assert "section 21" in found[3] and "'../shared/DESIGN.md'" in found[4] and "shared/STYLE.md" in found[5]
    assert [n for _, n in cited_sections("DESIGN 1.1-1.2, 10")] == ["1.1", "1.2", "10"]
