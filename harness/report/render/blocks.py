"""Report blocks and their two writers: Markdown and self-contained HTML.

The report is laid out once as a list of blocks (:mod:`harness.report.render.sections` words them);
:func:`to_markdown` and :func:`to_html` turn the same blocks into text, so the two
formats cannot drift apart. Blocks carry a *tone* (``good``, ``bad``, ``warn``,
``neutral``, ``invalid``, ``info`` or ``""``) instead of colours: a :class:`Chip` is one
verdict word in its tone's colour, a :class:`Banner` one cell's verdict with its
controls' chips, a :class:`Box` a framed group of blocks (the A/A check). HTML embeds
each figure as a base64 PNG ``data:`` URI and carries its own CSS (one file, no
network); its layout is responsive (a sticky contents column from 1250 px, contents under
the header below that; tables that fit 900 px, a scrolling frame only as a last resort). Restyling the HTML
means editing this file only.
"""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass, field

from harness.report.render.figures import FigureOut

TONES = ("good", "bad", "warn", "neutral", "invalid", "info")


@dataclass(frozen=True, slots=True)
class Chip:
    """One verdict or status word, drawn in its tone's colour (Markdown: bold)."""

    text: str
    tone: str
    title: str = ""  # hover text (HTML only)


@dataclass(frozen=True, slots=True)
class Heading:
    level: int
    text: str


@dataclass(frozen=True, slots=True)
class Para:
    text: str
    css: str = ""  # a tone, "note" or ""


@dataclass(frozen=True, slots=True)
class Bullets:
    items: tuple[str, ...]
    css: str = ""


Cell = str | Chip


@dataclass(frozen=True, slots=True)
class Table:
    """A table; ``details[i]`` (if non-empty) is a full-width line under row i (HTML) or a
    bullet after the table (Markdown): long "why" text never gets a narrow column."""

    columns: tuple[str, ...]
    rows: tuple[tuple[Cell, ...], ...]
    details: tuple[str, ...] = ()
    details_label: str = "why"


@dataclass(frozen=True, slots=True)
class Image:
    fig: FigureOut


@dataclass(frozen=True, slots=True)
class Banner:
    """A cell's verdict: a title, the verdict chip, one plain sentence and the chips of
    what else was judged there (controls, the A/A check), each with its label."""

    title: str
    chip: Chip
    text: str
    chips: tuple[tuple[str, Chip], ...] = ()
    tone: str = ""  # the frame's tone when it must differ from the chip's (an A/A FAIL in the cell)


@dataclass(frozen=True, slots=True)
class Box:
    """A framed group of blocks with a status chip in its title (HTML ``<section class="box">``)."""

    title: str
    chip: Chip | None
    blocks: tuple[Block, ...] = field(default=())
    css_id: str = ""


Block = Heading | Para | Bullets | Table | Image | Banner | Box


# --------------------------------------------------------------------------- Markdown


def _md_cell(cell: Cell) -> str:
    text = f"**{cell.text}**" if isinstance(cell, Chip) else cell
    return text.replace("|", "\\|").replace("\n", " ")


def _md_blocks(blocks, figure_dir: str, lines: list[str]) -> None:
    for b in blocks:
        if isinstance(b, Heading):
            lines += ["#" * b.level + " " + b.text, ""]
        elif isinstance(b, Para):
            lines += [("> " if b.css in ("warn", "bad", "invalid") else "") + b.text, ""]
        elif isinstance(b, Bullets):
            lines += [f"- {_md_cell(i)}" for i in b.items] + [""]
        elif isinstance(b, Table):
            lines.append("| " + " | ".join(map(_md_cell, b.columns)) + " |")
            lines.append("|" + "|".join("---" for _ in b.columns) + "|")
            lines += ["| " + " | ".join(_md_cell(x) for x in row) + " |" for row in b.rows]
            lines.append("")
            notes = [(row, d) for row, d in zip(b.rows, b.details) if d]
            if notes:
                lines += [
                    f"- {b.details_label}, {_md_cell(row[0])}"
                    + (f" ({_md_cell(row[1])})" if len(row) > 1 else "")
                    + f": {_md_cell(d)}"
                    for row, d in notes
                ] + [""]
        elif isinstance(b, Image):
            lines += [f"![{b.fig.title}]({figure_dir}/{b.fig.name}.png)", ""]
        elif isinstance(b, Banner):
            lines += [f"> **{b.title}: {b.chip.text}.** {b.text}"]
            if b.chips:
                lines += [">", "> " + "; ".join(f"{label}: **{c.text}**" for label, c in b.chips)]
            lines.append("")
        elif isinstance(b, Box):
            lines += [f"### {b.title}" + (f": **{b.chip.text}**" if b.chip else ""), ""]
            _md_blocks(b.blocks, figure_dir, lines)


def to_markdown(blocks: list[Block], figure_dir: str = "figures") -> str:
    """Markdown text; figures are linked as ``{figure_dir}/{name}.png``."""
    lines: list[str] = []
    _md_blocks(blocks, figure_dir, lines)
    return "\n".join(lines).rstrip() + "\n"


# --------------------------------------------------------------------------- HTML

# Tone colours: background, border/text. Chosen to stay apart for the common colour
# vision deficiencies (green is blue-ish, red is vermilion) and to pass WCAG AA as text.
_CSS = """
:root { --good: #0b6e4f; --good-bg: #e3f4ec; --bad: #b3261e; --bad-bg: #fbe4e1; --warn: #8a5300;
        --warn-bg: #fff1d6; --neutral: #545b64; --neutral-bg: #eceef1; --invalid: #6a1b9a;
        --invalid-bg: #f1e4f7; --info: #1f4e8c; --info-bg: #e4edf9; --line: #d5d9de; }
* { box-sizing: border-box; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0; color: #1d2127;
       line-height: 1.45; background: #fff; }
.page { max-width: 1320px; margin: 0 auto; padding: 1.2em 1.4em 3em; display: grid;
        grid-template-columns: minmax(0, 1fr); grid-template-areas: "header" "toc" "main"; }
header { grid-area: header; min-width: 0; } main { grid-area: main; min-width: 0; }
h1 { font-size: 1.55em; margin: .2em 0 .3em; }
h2 { font-size: 1.25em; border-bottom: 1px solid var(--line); padding-bottom: .2em; margin-top: 1.9em; }
h3 { font-size: 1.05em; margin-top: 1.4em; }
p, li { max-width: 75em; }
.note { color: #4a5058; font-size: .9em; }
.toc { grid-area: toc; font-size: .88em; border: 1px solid var(--line); border-radius: 6px; padding: .5em .9em;
       margin: .8em 0 0; }
.toc strong { display: block; margin-bottom: .2em; }
.toc ol { margin: 0; padding-left: 1.6em; columns: 2 18em; column-gap: 3em; }
.toc li { break-inside: avoid; }
.toc a { color: var(--info); text-decoration: none; } .toc a:hover { text-decoration: underline; }
@media (min-width: 1250px) {
  .page { grid-template-columns: 14em minmax(0, 1fr); grid-template-areas: "toc header" "toc main";
          column-gap: 2em; }
  .toc { position: sticky; top: 1em; align-self: start; max-height: calc(100vh - 2em); overflow-y: auto;
         margin-top: 4.2em; }
  .toc ol { columns: 1; }
}
.tablewrap { max-width: 100%; overflow-x: auto; margin: .7em 0; }
table { border-collapse: collapse; font-size: .84em; width: auto; max-width: 100%; }
th, td { border: 1px solid var(--line); padding: .25em .45em; text-align: left; vertical-align: top;
         overflow-wrap: break-word; }
td { min-width: 3.6em; }
th { background: #f3f5f7; font-weight: 600; }
tbody tr:nth-child(even) td { background: #fafbfc; }
tr.detail td { background: #fff; color: #4a5058; font-size: .94em; border-top: none; padding-left: 1.2em; }
tr.detail .label { font-weight: 600; }
tr.has-detail td { border-bottom: none; }
td.num { white-space: nowrap; font-variant-numeric: tabular-nums; }
.chip { display: inline-block; padding: .05em .55em; border-radius: 1em; font-size: .92em; font-weight: 600;
        line-height: 1.5; border: 1px solid; white-space: nowrap; }
.chip.good { color: var(--good); background: var(--good-bg); border-color: var(--good); }
.chip.bad { color: var(--bad); background: var(--bad-bg); border-color: var(--bad); }
.chip.warn { color: var(--warn); background: var(--warn-bg); border-color: var(--warn); }
.chip.neutral { color: var(--neutral); background: var(--neutral-bg); border-color: var(--neutral); }
.chip.invalid { color: var(--invalid); background: var(--invalid-bg); border-color: var(--invalid);
                border-style: dashed; }
.chip.info { color: var(--info); background: var(--info-bg); border-color: var(--info); }
td .chip.long { white-space: normal; }
p.good, p.bad, p.warn, p.info, p.invalid, ul.good, ul.bad, ul.warn, ul.info, ul.invalid {
  border-left: 4px solid; padding: .45em .9em; border-radius: 0 4px 4px 0; }
ul.good, ul.bad, ul.warn, ul.info, ul.invalid { padding-left: 2em; }
p.good, ul.good { background: var(--good-bg); border-color: var(--good); }
p.bad, ul.bad { background: var(--bad-bg); border-color: var(--bad); }
p.warn, ul.warn { background: var(--warn-bg); border-color: var(--warn); }
p.info, ul.info { background: var(--info-bg); border-color: var(--info); }
p.invalid, ul.invalid { background: var(--invalid-bg); border-color: var(--invalid); }
.banner { border: 1px solid var(--line); border-left: 6px solid var(--neutral); border-radius: 6px;
          padding: .7em 1em; margin: .8em 0; }
.banner.good { border-left-color: var(--good); } .banner.bad { border-left-color: var(--bad); }
.banner.warn { border-left-color: var(--warn); } .banner.invalid { border-left-color: var(--invalid); }
.banner .head { display: flex; flex-wrap: wrap; align-items: baseline; gap: .3em .8em; }
.banner .title { font-weight: 600; font-size: 1.05em; }
.banner .chip { font-size: 1em; }
.banner p { margin: .4em 0; }
.banner .chips { display: flex; flex-wrap: wrap; gap: .35em .9em; font-size: .9em; margin-top: .4em; }
.banner .chips span.item { white-space: nowrap; }
.box { border: 2px solid var(--line); border-radius: 8px; padding: .2em 1.1em .6em; margin: 1.6em 0; }
.box.good { border-color: var(--good); } .box.bad { border-color: var(--bad); }
.box.warn { border-color: var(--warn); } .box.neutral { border-color: var(--neutral); }
.box > h2 { border-bottom: none; margin-top: .6em; display: flex; flex-wrap: wrap; gap: .3em .8em;
            align-items: baseline; }
figure { margin: 1em 0; } img { max-width: 100%; height: auto; border: 1px solid #eee; }
@media (max-width: 1100px) { table { font-size: .78em; } .page { padding: 1em .9em 3em; } }
"""


def _inline_html(text: str) -> str:
    """Escape, then turn **bold** (used for verdicts) into <strong>."""
    out = html.escape(text)
    while out.count("**") >= 2:
        out = out.replace("**", "<strong>", 1).replace("**", "</strong>", 1)
    return out


def chip_html(c: Chip) -> str:
    title = f' title="{html.escape(c.title)}"' if c.title else ""
    long = " long" if len(c.text) > 20 else ""  # long verdicts may wrap inside a table cell
    return f'<span class="chip {c.tone}{long}" data-tone="{c.tone}"{title}>{html.escape(c.text)}</span>'


_NUMERIC = re.compile(r"^(Holm |n = )?[-+]?[\d.,_]+( %|e[-+]\d+)?( \(exact\))?$|^-$")


def _td(cell: Cell) -> str:
    if isinstance(cell, Chip):
        return f"<td>{chip_html(cell)}</td>"
    # Numbers never wrap inside; a cell's lines ('mean' over '[low, high]') are set on their own lines.
    lines = cell.split("\n")
    cls = ' class="num"' if all(_NUMERIC.match(x) or x.startswith("[") for x in lines) else ""
    return f"<td{cls}>" + "<br>".join(_inline_html(x) for x in lines) + "</td>"


def anchor(text: str) -> str:
    """The id of a heading: lower case, non-alphanumerics as '-'."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60]


def _html_blocks(blocks, parts: list[str]) -> None:
    for b in blocks:
        if isinstance(b, Heading):
            parts.append(f'<h{b.level} id="{anchor(b.text)}">{_inline_html(b.text)}</h{b.level}>')
        elif isinstance(b, Para):
            cls = f' class="{b.css}"' if b.css else ""
            parts.append(f"<p{cls}>{_inline_html(b.text)}</p>")
        elif isinstance(b, Bullets):
            cls = f' class="{b.css}"' if b.css else ""
            parts.append(f"<ul{cls}>" + "".join(f"<li>{_inline_html(i)}</li>" for i in b.items) + "</ul>")
        elif isinstance(b, Table):
            head = "".join(f"<th>{_inline_html(c)}</th>" for c in b.columns)
            rows = []
            details = tuple(b.details) + ("",) * (len(b.rows) - len(b.details))
            for row, d in zip(b.rows, details):
                cls = ' class="has-detail"' if d else ""
                rows.append(f"<tr{cls}>" + "".join(_td(x) for x in row) + "</tr>")
                if d:
                    rows.append(
                        f'<tr class="detail"><td colspan="{len(b.columns)}"><span class="label">'
                        f'{html.escape(b.details_label)}:</span> {_inline_html(d)}</td></tr>'
                    )
            parts.append(
                f'<div class="tablewrap"><table><thead><tr>{head}</tr></thead>'
                f'<tbody>{"".join(rows)}</tbody></table></div>'
            )
        elif isinstance(b, Image):
            data = base64.b64encode(b.fig.png).decode("ascii")
            parts.append(
                f'<figure><img alt="{html.escape(b.fig.title)}" src="data:image/png;base64,{data}"></figure>'
            )
        elif isinstance(b, Banner):
            chips = "".join(
                f'<span class="item">{html.escape(label)}: {chip_html(c)}</span>' for label, c in b.chips
            )
            parts.append(
                f'<div class="banner {b.tone or b.chip.tone}" data-verdict="{html.escape(b.chip.text)}">'
                f'<div class="head"><span class="title">{html.escape(b.title)}</span>{chip_html(b.chip)}'
                f'</div><p>{_inline_html(b.text)}</p>'
                + (f'<div class="chips">{chips}</div>' if chips else "")
                + "</div>"
            )
        elif isinstance(b, Box):
            tone = b.chip.tone if b.chip else ""
            ident = f' id="{b.css_id}"' if b.css_id else ""
            parts.append(
                f'<section class="box {tone}"{ident}>'
                f'<h2 id="{anchor(b.title)}">{_inline_html(b.title)}'
                + (chip_html(b.chip) if b.chip else "")
                + "</h2>"
            )
            _html_blocks(b.blocks, parts)
            parts.append("</section>")


def _toc(blocks) -> str:
    items = []
    for b in blocks:
        title = b.text if isinstance(b, Heading) and b.level == 2 else b.title if isinstance(b, Box) else None
        if title:
            items.append(f'<li><a href="#{anchor(title)}">{_inline_html(title)}</a></li>')
    return f'<nav class="toc"><strong>Contents</strong><ol>{"".join(items)}</ol></nav>' if items else ""


def to_html(blocks: list[Block], title: str) -> str:
    """A complete, self-contained HTML page (inline CSS, figures as base64 PNG data URIs)."""
    # The blocks before the first section heading (title, status) are the page's header; the
    # contents sit beside it and the sections on wide screens, between them on narrow ones.
    first = next(
        (i for i, b in enumerate(blocks) if (isinstance(b, Heading) and b.level == 2) or isinstance(b, Box)),
        len(blocks),
    )
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(title)}</title>",
        f"<style>{_CSS}</style>",
        "</head>",
        "<body>",
        '<div class="page">',
        "<header>",
    ]
    _html_blocks(blocks[:first], parts)
    parts += ["</header>", _toc(blocks), "<main>"]
    _html_blocks(blocks[first:], parts)
    parts += ["</main>", "</div>", "</body>", "</html>"]
    return "\n".join(parts) + "\n"
