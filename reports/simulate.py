"""Simulated studies through the report's own decision functions (DESIGN sections 6 and 8).

Each simulated study is one grid: per seed, every variant's final NLL is
``base_s + effect_v + noise_vs`` (noise ~ N(0, sd) per run, independent across runs;
``base_s`` cancels in every paired difference and is left out). The parent's noise is
shared by all its comparisons, as in a real grid. The studies go through exactly the
functions :mod:`reports.stats.analysis` uses, vectorised over the studies:
:func:`reports.stats.decisions.headline_p`, :func:`~reports.stats.decisions.absence_p`,
:func:`~reports.stats.decisions.decide_headline`, :func:`~reports.stats.decisions.decide_absence`,
:func:`~reports.stats.decisions.reproduction_contrast`, :func:`~reports.stats.decisions.two_sided_p`,
:func:`~reports.stats.decisions.decide_controls` (one family over the grid),
:func:`~reports.stats.decisions.holm` (the A/A offset tests over the cells) and
:func:`reports.stats.divergence.impute` (a diverged seed counts as a loss).

Two tables, each with its own default seed so the numbers quoted in reports/LOG.md reproduce:

* the decision rules (:func:`table`): the headline's false-positive rate, each control verdict's
  rate under a planted gain, and sequential looks (DESIGN section 8), read at the plan's looks
  (default 3, 5, 10 seeds) and topped up whenever the cell is open
  (:func:`reports.stats.topup.cell_open`), through the report's look functions
  (:func:`reports.stats.looks.at_looks`, :func:`~reports.stats.looks.sequential_p`). A study's
  decision at look k depends only on its first n_k seeds, so every study is drawn with n_K seeds
  and read at each look in turn; a study that closed at look k keeps its verdicts from look k;
* the edge cases (:func:`edge_table`, the rules statistics v3 added; docs/statistics.md): divergence
  where the treatment would lose, 'gain absent' at its boundary, one Holm family over the grid's
  controls, the A/A check over cells, control error rates conditional on the gate, float rounding.

    python -m reports.simulate                          # both tables (about a minute on 2 cores)
    python -m reports.simulate --tables rules --studies 4000 --seed 1
    python -m reports.simulate --tables edges --studies 100000

Rates carry their binomial standard error ``sqrt(r (1 - r) / studies)``.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

import numpy as np
import scipy.stats

from reports.stats import decisions as dec
from reports.stats.divergence import impute
from reports.stats.floors import FLOOR_NATS, beyond_floor
from reports.stats.looks import at_looks, sequential_p
from reports.stats.topup import cell_open

NOISE_SD = 0.003  # nats/token per run (reports/synthetic.py's default)
GAIN = -0.012  # planted treatment - parent gain, nats/token (4 noise SDs)
FRACTIONS = (0.0, 0.4, 1.0)  # share of the gain each simulated control reproduces
NS = (3, 5, 10)
LOOKS = (3, 5, 10)


def binomial_se(rate: float, studies: int) -> float:
    """Standard error of a rate estimated from ``studies`` independent studies."""
    return math.sqrt(max(rate * (1 - rate), 0.0) / studies)


def headline_false_positive_rate(
    n: int,
    studies: int,
    rng: np.random.Generator,
    *,
    alpha: float = 0.05,
    cells: int = 1,
    sd: float = NOISE_SD,
) -> float:
    """Share of null studies (no true gain anywhere) in which the gain is established in
    at least one of ``cells`` cells (Holm over the cells): the headline's family-wise
    false-positive rate."""
    parent = rng.normal(0.0, sd, size=(studies, cells, n))
    treatment = rng.normal(0.0, sd, size=(studies, cells, n))
    d = treatment - parent
    p, _ = dec.headline_p(d)
    _, established = dec.decide_headline(np.full(p.shape, n), d.mean(axis=-1), p, alpha)
    return float(established.any(axis=-1).mean())


@dataclass(frozen=True, slots=True)
class VerdictRates:
    """Rates over simulated studies of one n: the headline and each control's verdicts.

    ``verdicts[f]`` maps each verdict of :data:`reports.stats.decisions.VERDICTS` to its rate for
    the control that reproduces a fraction ``f`` of the gain.
    """

    n: int
    studies: int
    gain: float
    established: float
    verdicts: dict[float, dict[str, float]]

    def wrong_definite(self, f: float, rho: float) -> float:
        """Rate of the definite verdict that is false for a control reproducing ``f``:
        ``reproduces gain`` when f < rho, ``does not reproduce gain`` when f > rho."""
        wrong = dec.REPRODUCES if f < rho else dec.DOES_NOT_REPRODUCE
        return self.verdicts[f][wrong]


def verdict_rates(
    n: int,
    studies: int,
    rng: np.random.Generator,
    *,
    gain: float = GAIN,
    sd: float = NOISE_SD,
    fractions: tuple[float, ...] = FRACTIONS,
    alpha: float = 0.05,
    rho: float = 0.5,
) -> VerdictRates:
    """Simulate one cell with a parent, a treatment of true gain ``gain`` and one control per
    fraction in ``fractions`` (true control - parent = f x gain), ``n`` seeds each, and
    count every verdict."""
    k = len(fractions)
    parent = rng.normal(0.0, sd, size=(studies, 1, n))
    treatment = gain + rng.normal(0.0, sd, size=(studies, 1, n))
    controls = np.asarray(fractions)[:, None] * gain + rng.normal(0.0, sd, size=(studies, k, n))
    d_tp = (treatment - parent)[:, 0]  # [S, n]
    d_cp = controls - parent  # [S, k, n]
    p, _ = dec.headline_p(d_tp[:, None])
    _, established = dec.decide_headline(np.full(p.shape, n), d_tp.mean(axis=-1)[:, None], p, alpha)
    established = established[:, 0]
    e = dec.reproduction_contrast(d_cp, d_tp[:, None, :], rho)
    p_e, _ = dec.two_sided_p(e)
    _, codes = dec.decide_controls(
        established, np.zeros((studies, k), bool), np.full((studies, k), n), e.mean(axis=-1), p_e, alpha
    )
    verdicts = {
        f: {v: float((codes[:, j] == i).mean()) for i, v in enumerate(dec.VERDICTS)}
        for j, f in enumerate(fractions)
    }
    return VerdictRates(n, studies, gain, float(established.mean()), verdicts)


def _by_look(
    p: np.ndarray, mean: np.ndarray, looks: tuple[int, ...], k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Sequential p over looks 1..k and the mean d at the look attaining it (``[..., K]`` -> ``[...]``)."""
    seen = np.where(np.arange(len(looks)) < k, p, np.nan)
    seq, i = sequential_p(seen, looks)
    return seq, np.take_along_axis(mean, i[..., None], axis=-1)[..., 0]


@dataclass(frozen=True, slots=True)
class SequentialNull:
    """Null studies read at each look and topped up while the headline is undecided.

    ``first_at[k]``: share of studies whose gain is first established at look k (0-based);
    ``overall``: share established at some look (the false-positive rate of the design);
    ``naive_first_at`` / ``naive_overall``: the same when every look is tested at the full
    alpha (what re-reading the report after adding seeds would do without alpha spending).
    """

    looks: tuple[int, ...]
    studies: int
    cells: int
    first_at: tuple[float, ...]
    overall: float
    naive_first_at: tuple[float, ...]
    naive_overall: float


def established_by_look(d, looks: tuple[int, ...], alpha: float, *, spend: bool = True) -> np.ndarray:
    """``[S, C, K]`` bool: the gain is established in cell c at look k, for treatment - parent
    differences ``d`` ``[S, C, n_K]`` (Holm over the C cells at each look). ``spend=False`` tests
    every look's own p at the full alpha instead (the naive re-reading)."""
    p, mean = at_looks(d, looks, dec.headline_p)  # [S, C, K]
    out = []
    for k, nk in enumerate(looks, start=1):
        seq, mean_k = _by_look(p, mean, looks, k) if spend else (p[..., k - 1], mean[..., k - 1])
        out.append(dec.decide_headline(np.full(seq.shape, nk), mean_k, seq, alpha)[1])
    return np.stack(out, axis=-1)


def sequential_null(
    studies: int,
    rng: np.random.Generator,
    *,
    looks: tuple[int, ...] = LOOKS,
    alpha: float = 0.05,
    cells: int = 1,
    sd: float = NOISE_SD,
    gain: float = 0.0,
) -> SequentialNull:
    """Headline false-positive rate of a sequential study under a true null (``gain`` 0 in every
    cell), topping up whenever the gain is not established (Holm over ``cells`` cells at each look)."""
    n = looks[-1]
    d = gain + rng.normal(0.0, sd, size=(studies, cells, n)) - rng.normal(0.0, sd, size=(studies, cells, n))
    rates = []
    for spend in (True, False):
        claim = established_by_look(d, looks, alpha, spend=spend).any(axis=1)  # [S, K]: a claim in some cell
        ever = np.logical_or.accumulate(claim, axis=-1)  # a claim stands once made: the study stops there
        first = ever & ~np.concatenate([np.zeros((studies, 1), bool), ever[:, :-1]], axis=-1)
        rates.append((tuple(float(x) for x in first.mean(axis=0)), float(ever[:, -1].mean())))
    (first, overall), (naive_first, naive_overall) = rates
    return SequentialNull(looks, studies, cells, first, overall, naive_first, naive_overall)


@dataclass(frozen=True, slots=True)
class SequentialVerdicts:
    """Verdicts of sequential studies with a planted gain, each read at the look where its cell
    closed (or the last look). ``stopped_at[k]``: share of studies closed at look k;
    ``verdicts[f]`` as in :class:`VerdictRates`."""

    looks: tuple[int, ...]
    studies: int
    gain: float
    established: float
    stopped_at: tuple[float, ...]
    verdicts: dict[float, dict[str, float]]

    def wrong_definite(self, f: float, rho: float) -> float:
        wrong = dec.REPRODUCES if f < rho else dec.DOES_NOT_REPRODUCE
        return self.verdicts[f][wrong]


def sequential_verdicts(
    studies: int,
    rng: np.random.Generator,
    *,
    looks: tuple[int, ...] = LOOKS,
    gain: float = GAIN,
    sd: float = NOISE_SD,
    fractions: tuple[float, ...] = FRACTIONS,
    alpha: float = 0.05,
    rho: float = 0.5,
) -> SequentialVerdicts:
    """One cell as in :func:`verdict_rates`, read at each look and topped up while open."""
    n, k_c, K = looks[-1], len(fractions), len(looks)
    parent = rng.normal(0.0, sd, size=(studies, 1, n))
    treatment = gain + rng.normal(0.0, sd, size=(studies, 1, n))
    controls = np.asarray(fractions)[:, None] * gain + rng.normal(0.0, sd, size=(studies, k_c, n))
    d_tp = treatment - parent  # [S, 1, n]
    e = dec.reproduction_contrast(controls - parent, d_tp, rho)  # [S, k, n]
    p_h, mean_h = at_looks(d_tp, looks, dec.headline_p)
    p_e, mean_e = at_looks(e, looks, dec.two_sided_p)
    done = np.zeros(studies, bool)
    codes = np.full((studies, k_c), dec.V_NOT_ASSESSED)
    established = np.zeros(studies, bool)
    stopped = []
    for k, nk in enumerate(looks, start=1):
        seq, m = _by_look(p_h, mean_h, looks, k)
        _, est = dec.decide_headline(np.full(seq.shape, nk), m, seq, alpha)
        est = est[:, 0]
        seq_e, m_e = _by_look(p_e, mean_e, looks, k)
        _, c = dec.decide_controls(
            est, np.zeros((studies, k_c), bool), np.full((studies, k_c), nk), m_e, seq_e, alpha
        )
        close = ~done & (~cell_open(est, k == K, c) | (k == K))
        codes[close], established[close] = c[close], est[close]
        stopped.append(float(close.mean()))
        done |= close
    verdicts = {
        f: {v: float((codes[:, j] == i).mean()) for i, v in enumerate(dec.VERDICTS)}
        for j, f in enumerate(fractions)
    }
    return SequentialVerdicts(looks, studies, gain, float(established.mean()), tuple(stopped), verdicts)


def sequential_table(
    studies: int,
    rng: np.random.Generator,
    alpha: float = 0.05,
    rho: float = 0.5,
    looks: tuple[int, ...] = LOOKS,
) -> list[str]:
    """The sequential tables (DESIGN section 8) as text lines."""
    lines = [
        f"Sequential looks {list(looks)}, alpha {alpha:g} spent by O'Brien-Fleming-type Lan-DeMets, topped up "
        f"whenever undecided; true null; {studies} studies per row (binomial SE at alpha "
        f"{binomial_se(alpha, studies):.4f})",
        f"{'cells':>5} {'rule':>8} "
        + " ".join(f"{'look ' + str(n):>8}" for n in looks)
        + f" {'overall':>8} {'SE':>7}",
    ]
    for cells in (1, 3):
        r = sequential_null(studies, rng, looks=looks, alpha=alpha, cells=cells)
        for rule, first, overall in (
            ("spent", r.first_at, r.overall),
            ("naive", r.naive_first_at, r.naive_overall),
        ):
            lines.append(
                f"{cells:>5} {rule:>8} "
                + " ".join(f"{x:>8.4f}" for x in first)
                + f" {overall:>8.4f} {binomial_se(overall, studies):>7.4f}"
            )
    lines.append(
        "spent = each look at its increment of alpha (the report); naive = every look at the full alpha"
    )
    sv = sequential_verdicts(studies, rng, looks=looks, alpha=alpha, rho=rho)
    lines += [
        "",
        f"Sequential verdicts with a planted gain {GAIN:+.3f} nats/token (noise sd {NOISE_SD}), topped up "
        f"while the headline or a control is undecided; established {sv.established:.4f}; closed at looks "
        + ", ".join(f"{n}: {x:.4f}" for n, x in zip(looks, sv.stopped_at)),
        f"{'f':>5} {'does not':>9} {'reproduces':>10} {'inconcl.':>9} {'not ass.':>9} {'wrong':>7}",
    ]
    for f in FRACTIONS:
        v = sv.verdicts[f]
        lines.append(
            f"{f:>5.0%} {v[dec.DOES_NOT_REPRODUCE]:>9.4f} {v[dec.REPRODUCES]:>10.4f} "
            f"{v[dec.INCONCLUSIVE]:>9.4f} {v[dec.NOT_ASSESSED]:>9.4f} {sv.wrong_definite(f, rho):>7.4f}"
        )
    return lines


def table(studies: int = 20_000, seed: int = 20261201, alpha: float = 0.05, rho: float = 0.5) -> list[str]:
    """The decision rules' tables as text lines (false-positive rates, verdict rates, sequential looks)."""
    rng = np.random.default_rng(seed)
    se0 = binomial_se(alpha, studies)
    lines = [
        f"Headline false-positive rate under a true null (alpha {alpha:g}, {studies} studies per row, "
        f"binomial SE at alpha {se0:.4f}; DESIGN 6 asks alpha +- 0.02)",
        f"{'n':>3} {'cells':>5} {'rate':>7} {'SE':>7} {'expected':>9}",
    ]
    for n in NS:
        for cells in (1, 3):
            r = headline_false_positive_rate(n, studies, rng, alpha=alpha, cells=cells)
            want = 1 - (1 - alpha / cells) ** cells  # Holm's first step is Bonferroni: P(min p < alpha / K)
            lines.append(f"{n:>3} {cells:>5} {r:>7.4f} {binomial_se(r, studies):>7.4f} {want:>9.4f}")
    lines += [
        "",
        f"Verdicts with a planted gain {GAIN:+.3f} nats/token (noise sd {NOISE_SD} per run), rho {rho:g}, "
        f"alpha {alpha:g}, controls reproducing {', '.join(f'{f:.0%}' for f in FRACTIONS)} of it, "
        f"{studies} studies per n",
        f"{'n':>3} {'f':>5} {'established':>11} {'does not':>9} {'reproduces':>10} {'inconcl.':>9} "
        f"{'not ass.':>9} {'wrong':>7}",
    ]
    for n in NS:
        vr = verdict_rates(n, studies, rng, alpha=alpha, rho=rho)
        for f in FRACTIONS:
            v = vr.verdicts[f]
            lines.append(
                f"{n:>3} {f:>5.0%} {vr.established:>11.4f} {v[dec.DOES_NOT_REPRODUCE]:>9.4f} "
                f"{v[dec.REPRODUCES]:>10.4f} {v[dec.INCONCLUSIVE]:>9.4f} {v[dec.NOT_ASSESSED]:>9.4f} "
                f"{vr.wrong_definite(f, rho):>7.4f}"
            )
    lines.append(
        "wrong = the false definite verdict: 'reproduces gain' for f < rho, 'does not reproduce gain' "
        "for f > rho"
    )
    return lines + [""] + sequential_table(studies, rng, alpha, rho)


LOSS_RULES = ("every losing seed", "half the losing seeds", "the worst seed")


def _lost_when_losing(d: np.ndarray, rule: str, rng: np.random.Generator) -> np.ndarray:
    """``[S, n]`` int: +1 where the treatment diverges (it would have lost there), else 0."""
    losing = d > 0
    if rule == "every losing seed":
        lost = losing
    elif rule == "half the losing seeds":
        lost = losing & (rng.random(d.shape) < 0.5)
    elif rule == "the worst seed":
        lost = np.zeros(d.shape, bool)
        np.put_along_axis(lost, d.argmax(axis=-1)[..., None], True, axis=-1)
        lost &= losing
    else:
        raise ValueError(f"rule must be one of {LOSS_RULES}, got {rule!r}")
    return lost.astype(int)


def divergence_null(
    n: int,
    studies: int,
    rng: np.random.Generator,
    *,
    rule: str = "every losing seed",
    alpha: float = 0.05,
    sd: float = NOISE_SD,
) -> tuple[float, float]:
    """Headline false-positive rate under a true null when the treatment diverges where it would lose.

    Returns ``(rate counting each lost seed as a loss (the report), rate dropping the lost pairs (v2))``.
    """
    d = rng.normal(0.0, sd, (studies, n)) - rng.normal(0.0, sd, (studies, n))
    lost = _lost_when_losing(d, rule, rng)
    tested = impute(d, lost)[:, None]  # [S, 1 cell, n]: Holm runs over the last axis, the cells
    p, _ = dec.headline_p(tested)
    _, est = dec.decide_headline(np.full(p.shape, n), tested.mean(axis=-1), p, alpha)
    # v2: the lost pairs dropped, a one-sided t-test on the k observed pairs (k >= 3).
    obs = lost == 0
    k = obs.sum(axis=-1)
    mean = np.where(obs, d, 0.0).sum(axis=-1) / np.maximum(k, 1)
    var = np.where(obs, (d - mean[:, None]) ** 2, 0.0).sum(axis=-1) / np.maximum(k - 1, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        p_drop = scipy.stats.t.cdf(mean / np.sqrt(var / np.maximum(k, 1)), np.maximum(k - 1, 1))
    dropped = (k >= 3) & (mean < 0) & (p_drop < alpha)
    return float(est.mean()), float(dropped.mean())


def absence_rate(
    n: int,
    studies: int,
    rng: np.random.Generator,
    *,
    gain: float,
    delta: float,
    cells: int = 1,
    alpha: float = 0.05,
    sd: float = NOISE_SD,
) -> float:
    """Share of studies with ``gain absent`` in at least one of ``cells`` cells (the report's one family
    of headline and absence tests), every cell with true gain ``gain`` (nats/token, > 0 = better)."""
    d = -gain + rng.normal(0.0, sd, (studies, cells, n)) - rng.normal(0.0, sd, (studies, cells, n))
    fam = headline_family(d, delta, alpha)
    return float((fam.absent & ~fam.established).any(axis=-1).mean())


def headline_family(d: np.ndarray, delta: float, alpha: float = 0.05) -> dec.HeadlineFamily:
    """The report's step 1 (:func:`reports.stats.decisions.decide_headlines`) on differences ``d``
    ``[S, K cells, n]``."""
    p, _ = dec.headline_p(d)
    p_abs, _ = dec.absence_p(d, delta)
    mean = d.mean(axis=-1)
    return dec.decide_headlines(np.full(p.shape, d.shape[-1]), mean, p, mean, p_abs, delta, alpha)


def wrong_headline_rate(
    n: int,
    studies: int,
    rng: np.random.Generator,
    *,
    delta: float,
    alpha: float = 0.05,
    sd: float = NOISE_SD,
    one_family: bool = True,
) -> float:
    """Share of two-cell grids with a wrong headline: cell 0 has no gain (``gain established`` is wrong),
    cell 1 a gain of exactly delta (``gain absent`` is wrong). ``one_family``: the report's single family
    (:func:`headline_family`); else the v3 rule, Holm over the cells per test (two families)."""
    gain = np.array([0.0, delta])[:, None]
    d = -gain + rng.normal(0.0, sd, (studies, 2, n)) - rng.normal(0.0, sd, (studies, 2, n))
    if one_family:
        fam = headline_family(d, delta, alpha)
        est, absent = fam.established, fam.absent & ~fam.established
    else:
        p, _ = dec.headline_p(d)
        _, est = dec.decide_headline(np.full(p.shape, n), d.mean(axis=-1), p, alpha)
        p_abs, _ = dec.absence_p(d, delta)
        absent = dec.decide_absence(np.full(p.shape, n), d.mean(axis=-1), p_abs, delta, alpha)[1] & ~est
    return float((est[:, 0] | absent[:, 1]).mean())


def grid_boundary_controls(
    n: int,
    studies: int,
    rng: np.random.Generator,
    *,
    cells: int = 3,
    gain: float = -0.012,
    rho: float = 0.5,
    alpha: float = 0.05,
    sd: float = NOISE_SD,
    grid_family: bool = True,
) -> float:
    """Share of grids with >= 1 wrong definite control verdict: one control per cell exactly at the
    boundary (it reproduces the fraction rho of a planted gain, so mean e = 0 and both definite
    verdicts are wrong). ``grid_family``: Holm over the grid's contrasts (v3), else per cell (v2)."""
    shape = (studies, cells, n)
    parent, treat = rng.normal(0.0, sd, shape), gain + rng.normal(0.0, sd, shape)
    control = rho * gain + rng.normal(0.0, sd, shape)
    d = treat - parent
    p, _ = dec.headline_p(d)
    _, est = dec.decide_headline(np.full(p.shape, n), d.mean(axis=-1), p, alpha)
    e = dec.reproduction_contrast(control - parent, d, rho)
    p_e, _ = dec.two_sided_p(e)
    none = np.zeros(est.shape, bool)
    if grid_family:
        _, codes = dec.decide_controls(est, none, np.full(est.shape, n), e.mean(axis=-1), p_e, alpha)
    else:  # each cell its own family (one control): v2
        _, codes = dec.decide_controls(
            est[..., None],
            none[..., None],
            np.full(est.shape + (1,), n),
            e.mean(axis=-1)[..., None],
            p_e[..., None],
            alpha,
        )
        codes = codes[..., 0]
    wrong = (codes == dec.V_DOES_NOT) | (codes == dec.V_REPRODUCES)
    return float(wrong.any(axis=-1).mean())


def aa_grid(
    n: int,
    studies: int,
    rng: np.random.Generator,
    *,
    cells: int = 3,
    alpha: float = 0.05,
    sd: float = NOISE_SD,
    floor: float = 2.4e-7,
) -> tuple[float, float]:
    """Share of correct grids (A/A = parent up to run noise) with an A/A FAIL in some cell:
    ``(Holm over the cells (v3), unadjusted per cell (v2))``."""
    d = rng.normal(0.0, sd, (studies, cells, n)) - rng.normal(0.0, sd, (studies, cells, n))
    p, _ = dec.two_sided_p(d)
    off = beyond_floor(d.mean(axis=-1), floor)
    holm = dec.holm(p)
    return float(((holm < alpha) & off).any(axis=-1).mean()), float(((p < alpha) & off).any(axis=-1).mean())


def _one_cell(parent, treat, control, rho: float, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """One cell per study, NLLs ``[S, n]``: ``(established [S], definite control verdict [S])``."""
    studies, n = parent.shape
    d = treat - parent
    p, _ = dec.headline_p(d[:, None])
    est = dec.decide_headline(np.full(p.shape, n), d.mean(axis=-1)[:, None], p, alpha)[1][:, 0]
    e = dec.reproduction_contrast(control - parent, d, rho)
    p_e, _ = dec.two_sided_p(e[:, None])
    _, codes = dec.decide_controls(
        est, np.zeros((studies, 1), bool), np.full((studies, 1), n), e.mean(axis=-1)[:, None], p_e, alpha
    )
    return est, (codes[:, 0] == dec.V_DOES_NOT) | (codes[:, 0] == dec.V_REPRODUCES)


def conditional_control_error(
    n: int,
    studies: int,
    rng: np.random.Generator,
    *,
    sd_parent: float,
    sd_treatment: float,
    sd_control: float | None = None,
    gain: float = -0.02,
    rho: float = 0.5,
    alpha: float = 0.05,
) -> tuple[float, float, float]:
    """A control at the boundary (f = rho: both definite verdicts wrong) in one cell.

    Returns ``(P(established), P(wrong | established), P(wrong and established))``; the control's sd
    defaults to the parent's.
    """
    sd_control = sd_parent if sd_control is None else sd_control
    parent = rng.normal(0.0, sd_parent, (studies, n))
    treat = gain + rng.normal(0.0, sd_treatment, (studies, n))
    control = rho * gain + rng.normal(0.0, sd_control, (studies, n))
    est, wrong = _one_cell(parent, treat, control, rho, alpha)
    p_est = float(est.mean())
    return p_est, float(wrong.sum() / max(est.sum(), 1)), float(wrong.mean())


def rounding_verdicts(
    n: int, studies: int, rng: np.random.Generator, *, alpha: float = 0.05, rho: float = 0.5
) -> tuple[float, float]:
    """Studies where every difference is float rounding: ``(share with a definite headline for a
    treatment of -1..0 ulp per seed, share with a definite verdict for a control exactly halfway
    between parent and a treatment with a large planted gain)``."""
    parent = 3.5 + rng.normal(0.0, 0.3, (studies, n))
    treat = np.where(rng.random((studies, n)) < 0.8, np.nextafter(parent, -np.inf), parent)
    d = (treat - parent)[:, None]  # [S, 1 cell, n]
    p, _ = dec.headline_p(d)
    _, est = dec.decide_headline(np.full(p.shape, n), d.mean(axis=-1), p, alpha)
    treat2 = parent - 0.05 + rng.normal(0.0, NOISE_SD, (studies, n))
    _, definite = _one_cell(parent, treat2, (parent + treat2) / 2, rho, alpha)
    return float(est.mean()), float(definite.mean())


def edge_table(studies: int = 20_000, seed: int = 20261227, alpha: float = 0.05) -> list[str]:
    """The edge-case tables (divergence, absence, grid families, A/A, conditional rates, rounding)
    as text lines."""
    rng = np.random.default_rng(seed)
    se = binomial_se(alpha, studies)
    lines = [
        f"Edge cases of the decision rules, alpha {alpha:g}, {studies} studies per row (binomial SE at alpha {se:.4f}), noise sd "
        f"{NOISE_SD} per run",
        "",
        "Divergence: true null, the treatment diverges where it would lose",
        f"{'n':>3} {'diverges at':>22} {'as loss':>10} {'dropped':>10}",
    ]
    for n in (3, 5, 8, 10):
        for rule in LOSS_RULES:
            r, r2 = divergence_null(n, studies, rng, rule=rule, alpha=alpha)
            lines.append(f"{n:>3} {rule:>22} {r:>10.4f} {r2:>10.4f}")
    delta = 0.006
    lines += [
        "",
        f"Gain absent (delta = {delta} nats/token): share of studies with 'gain absent' in some cell",
        f"{'n':>3} {'cells':>5} {'gain = delta':>13} {'gain = 0':>9}",
    ]
    for n in (3, 5, 10):
        for cells in (1, 3):
            lines.append(
                f"{n:>3} {cells:>5} {absence_rate(n, studies, rng, gain=delta, delta=delta, cells=cells):>13.4f}"
                f" {absence_rate(n, studies, rng, gain=0.0, delta=delta, cells=cells):>9.4f}"
            )
    lines += [
        "",
        "Families across the grid: 3 cells, one control per cell exactly at the boundary (f = rho); "
        "share of grids with >= 1 wrong definite verdict",
        f"{'n':>3} {'grid Holm':>10} {'per cell':>9}",
    ]
    for n in (5, 8):
        lines.append(
            f"{n:>3} {grid_boundary_controls(n, studies, rng):>10.4f} "
            f"{grid_boundary_controls(n, studies, rng, grid_family=False):>9.4f}"
        )
    lines += [
        "",
        "A/A check on a correct harness, 3 cells: share of grids with a FAIL",
        f"{'n':>3} {'Holm':>7} {'unadj.':>7}",
    ]
    for n in (3, 5, 10):
        a, b = aa_grid(n, studies, rng)
        lines.append(f"{n:>3} {a:>7.4f} {b:>7.4f}")
    lines += [
        "",
        "Controls conditional on the gate: f = 0.5 (both definite verdicts wrong), gain -0.02, rho 0.5",
        f"{'n':>3} {'sd parent':>9} {'sd treat':>9} {'P(est)':>7} {'P(wrong|est)':>12} {'P(wrong,est)':>12}",
    ]
    for n in (3, 5, 8):
        for sp, stt in ((0.005, 0.015), (0.015, 0.005), (0.01, 0.01)):
            pe, cond, joint = conditional_control_error(n, studies, rng, sd_parent=sp, sd_treatment=stt)
            lines.append(f"{n:>3} {sp:>9g} {stt:>9g} {pe:>7.4f} {cond:>12.4f} {joint:>12.4f}")
    lines += [
        "",
        f"Float rounding only (floor {FLOOR_NATS:g}): share with a definite verdict",
        f"{'n':>3} {'headline (ulp)':>14} {'halfway control':>15}",
    ]
    for n in (5, 8):
        h, c = rounding_verdicts(n, studies, rng, alpha=alpha)
        lines.append(f"{n:>3} {h:>14.4f} {c:>15.4f}")
    return lines


TABLES = {"rules": (table, 20261201), "edges": (edge_table, 20261227)}  # name: (table, default seed)


def main(argv: list[str] | None = None) -> int:
    """``python -m reports.simulate [--tables all|rules|edges] [--studies N] [--seed S]``: print the tables
    (each at its own default seed unless ``--seed`` is given)."""
    parser = argparse.ArgumentParser(prog="python -m reports.simulate", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--tables", choices=["all", *TABLES], default="all", help="which tables to print (default all)"
    )
    parser.add_argument(
        "--studies", type=int, default=20_000, help="simulated studies per row (default 20000)"
    )
    parser.add_argument(
        "--seed", type=int, default=None, help="random seed (default: 20261201 rules, 20261227 edges)"
    )
    args = parser.parse_args(argv)
    if args.studies < 100:
        parser.error(f"--studies {args.studies}: use at least 100")
    chosen = list(TABLES) if args.tables == "all" else [args.tables]
    lines: list[str] = []
    for name in chosen:
        make, seed = TABLES[name]
        lines += ([""] if lines else []) + make(args.studies, seed if args.seed is None else args.seed)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
