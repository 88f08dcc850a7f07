"""Number and label formats shared by the report's writers (:mod:`harness.report.render.sections`,
:mod:`harness.report.render.summary`, :mod:`harness.report.render.figures`). Nothing here computes a statistic."""

from __future__ import annotations

import math

from harness.report.stats.pairing import cell_name


def fmt_p(p: float | None) -> str:
    """p-value: 3 significant digits, scientific below 1e-4, '-' when not computed."""
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "-"
    return "0" if p == 0 else (f"{p:.2e}" if p < 1e-4 else f"{p:.3g}")


def fmt_nats(x: float | None, digits: int = 4) -> str:
    """Signed value in nats/token with a fixed number of decimals ('-' for NaN)."""
    return "-" if x is None or math.isnan(x) else f"{x:+.{digits}f}"


def fmt_pct(x: float | None) -> str:
    """Fraction as a signed percentage, e.g. -0.0297 -> '-2.97 %'."""
    return "-" if x is None or math.isnan(x) else f"{100 * x:+.2f} %"


def fmt_ci(lo: float, hi: float) -> str:
    """A 95 % interval in nats/token, '[-0.0200, -0.0046]' ('-' when not computed)."""
    return "-" if math.isnan(lo) else f"[{lo:+.4f}, {hi:+.4f}]"


def fmt_tokens(n: int | None) -> str:
    """A token count with '_' thousands separators, e.g. 1_000_000 ('-' for None)."""
    return "-" if n is None else f"{n:,}".replace(",", "_")


def tokens_label(x: float, _pos: object = None) -> str:
    """A short token count for titles and axes: 60k, 1M, 2.5B (matplotlib formatter signature)."""
    for div, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:g}{unit}"
    return f"{x:g}"


def num(x: float | None, fmt: str = ".3g") -> str:
    """A float in ``fmt`` ('-' for None or NaN)."""
    return "-" if x is None or math.isnan(x) else format(x, fmt)


def cell_text(size: str, budget: int) -> str:
    """'size small, budget 1_000_000 tokens' (then ', lr 0.001' per axis value): one cell in a sentence."""
    name = cell_name(size, fmt_tokens(budget))
    return "s" + name[1:]


def seeds_text(seeds) -> str:
    """'0 1 2' ('-' for none)."""
    return " ".join(map(str, seeds)) or "-"
