"""A real headless browser for the report tests: Debian's chromium, no extra dependency.

Layout is measured by appending a probe script to a copy of the page and reading what it
writes into the DOM (``--dump-dom``); screenshots use ``--screenshot``. Each call gets a
fresh profile (``--user-data-dir``) and the flags that keep chromium off the network.
A missing or failing chromium is a test failure with chromium's own log, never a skip
(real components never skip; ``.ci/run`` installs it: ``apt-get install -y chromium``).

    python tests/browser.py REPORT.html OUT_DIR [WIDTH ...]   # screenshots for a person to look at
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]
CANDIDATES = ("chromium", "chromium-browser", "google-chrome")

# Probe: after load, measure the page and write the result as JSON into <pre id="probe-result">.
# Widths are CSS pixels. A cell narrower than its own longest word would overflow or clip it;
# we also report the narrowest cell and the tables wider than their frame (a scrolling frame).
PROBE = r"""
<script>
window.addEventListener("error", function (e) { document.body.setAttribute("data-js-error", String(e.message)); });
window.addEventListener("load", function () {
  var de = document.documentElement, out = {};
  out.innerWidth = window.innerWidth; out.scrollWidth = de.scrollWidth; out.scrollHeight = de.scrollHeight;
  var ok = 0; for (var i of document.images) { if (i.complete && i.naturalWidth > 0) ok++; }
  out.imagesOk = ok; out.images = document.images.length;
  out.imagesWiderThanViewport = Array.from(document.images).filter(function (i) {
    return i.getBoundingClientRect().right > window.innerWidth + 0.5; }).length;
  out.tables = Array.from(document.querySelectorAll(".tablewrap")).map(function (w) {
    var t = w.querySelector("table"), head = Array.from(t.querySelectorAll("th")).map(function (h) {
      return h.textContent; });
    return {head: head.slice(0, 3).join(" | "), wrapWidth: w.clientWidth, tableWidth: t.scrollWidth,
            right: w.getBoundingClientRect().right};
  });
  var cells = Array.from(document.querySelectorAll("td, th")).filter(function (c) {
    return !c.closest("tr.detail"); });
  var narrow = null;
  cells.forEach(function (c) {
    var w = c.getBoundingClientRect().width;
    if (narrow === null || w < narrow.width) narrow = {width: w, text: c.textContent.slice(0, 60)};
  });
  out.narrowestCell = narrow; out.cells = cells.length;
  out.clipped = cells.filter(function (c) { return c.scrollWidth > c.clientWidth + 1; }).map(function (c) {
    return c.textContent.slice(0, 60); }).slice(0, 20);
  out.chips = Array.from(document.querySelectorAll(".chip")).map(function (c) {
    return {text: c.textContent, tone: c.getAttribute("data-tone"), bg: getComputedStyle(c).backgroundColor,
            color: getComputedStyle(c).color, right: c.getBoundingClientRect().right}; });
  out.banners = Array.from(document.querySelectorAll(".banner")).map(function (b) {
    return {verdict: b.getAttribute("data-verdict"), bg: getComputedStyle(b).borderLeftColor,
            text: b.textContent}; });
  var aa = document.getElementById("aa-check");
  out.aaBox = aa ? {chip: (aa.querySelector("h2 .chip") || {}).textContent || null,
                    border: getComputedStyle(aa).borderTopColor} : null;
  var toc = document.querySelector(".toc");
  out.tocPosition = toc ? getComputedStyle(toc).position : null;
  var pre = document.createElement("pre"); pre.id = "probe-result"; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>
"""


class BrowserError(AssertionError):
    """Chromium is missing or failed; the message carries its log."""


def chromium() -> str:
    """Path of the chromium binary. Raises :class:`BrowserError` (a test failure) when absent."""
    path = next((p for p in map(shutil.which, CANDIDATES) if p), None)
    if path is None:
        raise BrowserError(
            "no chromium binary on PATH (tried " + ", ".join(CANDIDATES) + "): the report's "
            "browser tests need a real headless browser; install it with `apt-get install -y "
            "chromium` (.ci/run does)"
        )
    return path


def _run(args: list[str], timeout: int = 180) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        cmd = [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise BrowserError(
                f"chromium timed out after {timeout} s: {' '.join(cmd)}\n{(exc.stderr or b'')[-3000:]!r}"
            ) from None
    if proc.returncode != 0:
        raise BrowserError(f"chromium exited {proc.returncode}: {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    return proc


def measure(page: Path, width: int, height: int = 1000) -> tuple[dict, str, str]:
    """Open a copy of ``page`` with :data:`PROBE` at ``width`` x ``height`` CSS px.

    Returns ``(measurements, dumped DOM, chromium's stderr)``.
    """
    probe = page.with_name(f".probe-{width}-{page.name}")
    probe.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    try:
        proc = _run(
            [
                f"--window-size={width},{height}",
                "--virtual-time-budget=10000",
                "--enable-logging=stderr",
                "--v=0",
                "--dump-dom",
                probe.as_uri(),
            ]
        )
    finally:
        probe.unlink(missing_ok=True)
    m = re.search(r'<pre id="probe-result">(.*?)</pre>', proc.stdout, re.S)
    if not m:
        raise BrowserError(
            f"the probe wrote no result at width {width} (page did not load?)\n{proc.stderr[-3000:]}"
        )
    import html

    return json.loads(html.unescape(m.group(1))), proc.stdout, proc.stderr


def dump_dom(url: str, width: int = 1400, height: int = 1000, budget_ms: int = 20000) -> str:
    """The DOM of ``url`` (any page, e.g. a JS app on localhost) after ``budget_ms`` of virtual time."""
    return _run(
        [f"--window-size={width},{height}", f"--virtual-time-budget={budget_ms}", "--dump-dom", url]
    ).stdout


def visible_text(dom: str) -> str:
    """The text of a dumped DOM, without scripts and styles, whitespace collapsed."""
    import html

    dom = re.sub(r"<(script|style)\b.*?</\1>", " ", dom, flags=re.S | re.I)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", dom))).strip()


def screenshot_url(
    url: str, out: Path, width: int = 1400, height: int = 1000, budget_ms: int = 20000
) -> Path:
    """A PNG of ``url`` at ``width`` x ``height`` CSS px after ``budget_ms`` of virtual time."""
    _run(
        [f"--window-size={width},{height}", f"--virtual-time-budget={budget_ms}", f"--screenshot={out}", url]
    )
    return out


def screenshot(page: Path, out: Path, width: int, height: int | None = None) -> Path:
    """A PNG of ``page`` at ``width`` CSS px; ``height`` defaults to the page's full height
    (capped at 16000 px)."""
    if height is None:
        height = min(16000, int(measure(page, width)[0]["scrollHeight"]))
    _run([f"--window-size={width},{height}", f"--screenshot={out}", page.as_uri()])
    return out


if __name__ == "__main__":
    page, out_dir = Path(sys.argv[1]).resolve(), Path(sys.argv[2])
    out_dir.mkdir(parents=True, exist_ok=True)
    for w in map(int, sys.argv[3:] or ["1400", "900"]):
        print(screenshot(page, out_dir / f"report_{w}.png", w))
