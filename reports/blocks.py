"""Report blocks and their two writers: Markdown and self-contained HTML.

The report is laid out once as a list of blocks (:mod:`reports.render` words them);
:func:`to_markdown` and :func:`to_html` turn the same blocks into text, so the two
formats cannot drift apart. A block's ``css`` names its role (``warn``, ``note``,
``ok``). HTML embeds each figure as a base64 PNG
``data:`` URI and carries its own CSS: one file, no network. Restyling the HTML means
editing this file only.
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass

from reports.figures import FigureOut


@dataclass(frozen=True, slots=True)
class Heading:
    level: int
    text: str


@dataclass(frozen=True, slots=True)
class Para:
    text: str
    css: str = ""  # "warn", "note", "ok" or ""


@dataclass(frozen=True, slots=True)
class Bullets:
    items: tuple[str, ...]
    css: str = ""


@dataclass(frozen=True, slots=True)
class Table:
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True, slots=True)
class Image:
    fig: FigureOut


Block = Heading | Para | Bullets | Table | Image


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(blocks: list[Block], figure_dir: str = "figures") -> str:
    """Markdown text; figures are linked as ``{figure_dir}/{name}.png``."""
    lines: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            lines += ["#" * b.level + " " + b.text, ""]
        elif isinstance(b, Para):
            lines += [("> " if b.css == "warn" else "") + b.text, ""]
        elif isinstance(b, Bullets):
            lines += [f"- {_md_cell(i)}" for i in b.items] + [""]
        elif isinstance(b, Table):
            lines.append("| " + " | ".join(map(_md_cell, b.columns)) + " |")
            lines.append("|" + "|".join("---" for _ in b.columns) + "|")
            lines += ["| " + " | ".join(_md_cell(x) for x in row) + " |" for row in b.rows]
            lines.append("")
        elif isinstance(b, Image):
            lines += [f"![{b.fig.title}]({figure_dir}/{b.fig.name}.png)", ""]
    return "\n".join(lines).rstrip() + "\n"


_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1200px;
       padding: 0 1em; color: #222; line-height: 1.45; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em; margin-top: 1.8em; }
table { border-collapse: collapse; margin: .8em 0; font-size: .86em; }
th, td { border: 1px solid #ccc; padding: .25em .5em; text-align: left; vertical-align: top; }
th { background: #f2f2f2; } tr:nth-child(even) td { background: #fafafa; }
.warn { background: #fff4e5; border-left: 4px solid #f0a030; padding: .4em .8em; }
.note { color: #555; font-size: .92em; }
.ok { background: #eef8ee; border-left: 4px solid #4a4; padding: .4em .8em; }
figure { margin: 1em 0; } img { max-width: 100%; border: 1px solid #eee; }
"""


def _inline_html(text: str) -> str:
    """Escape, then turn **bold** (used for verdicts) into <strong>."""
    out = html.escape(text)
    while out.count("**") >= 2:
        out = out.replace("**", "<strong>", 1).replace("**", "</strong>", 1)
    return out


def to_html(blocks: list[Block], title: str) -> str:
    """A complete, self-contained HTML page (inline CSS, figures as base64 PNG data URIs)."""
    parts = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
             f"<title>{html.escape(title)}</title>", f"<style>{_CSS}</style>", "</head>", "<body>"]
    for b in blocks:
        if isinstance(b, Heading):
            parts.append(f"<h{b.level}>{_inline_html(b.text)}</h{b.level}>")
        elif isinstance(b, Para):
            cls = f' class="{b.css}"' if b.css else ""
            parts.append(f"<p{cls}>{_inline_html(b.text)}</p>")
        elif isinstance(b, Bullets):
            cls = f' class="{b.css}"' if b.css else ""
            parts.append(f"<ul{cls}>" + "".join(f"<li>{_inline_html(i)}</li>" for i in b.items) + "</ul>")
        elif isinstance(b, Table):
            head = "".join(f"<th>{_inline_html(c)}</th>" for c in b.columns)
            body = "".join("<tr>" + "".join(f"<td>{_inline_html(x)}</td>" for x in row) + "</tr>"
                           for row in b.rows)
            parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        elif isinstance(b, Image):
            data = base64.b64encode(b.fig.png).decode("ascii")
            parts.append(f'<figure><img alt="{html.escape(b.fig.title)}" '
                         f'src="data:image/png;base64,{data}"></figure>')
    parts += ["</body>", "</html>"]
    return "\n".join(parts) + "\n"
