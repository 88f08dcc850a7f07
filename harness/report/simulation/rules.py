"""The decision rules simulated (:func:`table`): the headline's false-positive rate, each control
verdict's rate under a planted gain, and sequential looks (DESIGN sections 6 and 8), through the
report's own decision functions, vectorised over the studies (see :mod:`harness.report.simulation.studies`, the
command that prints this table and :mod:`harness.report.simulation.edges`'s).

Rates carry their binomial standard error ``sqrt(r (1 - r) / studies)`` (:func:`binomial_se`); a rate
as a record, for ``--json``: :class:`Row`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from harness.report.stats import decisions as dec
from harness.report.stats.looks import at_looks, sequential_p
from harness.report.stats.topup import cell_open

NOISE_SD = 0.003  # nats/token per run (harness/report/simulation/synthetic.py's default)
GAIN = -0.012  # planted treatment - parent gain, nats/token (4 noise SDs)
FRACTIONS = (0.0, 0.4, 1.0)  # share of the gain each simulated control reproduces
NS = (3, 5, 10)
LOOKS = (3, 5, 10)


@dataclass(frozen=True, slots=True)
class Row:
    """One simulated rate as a record (``python -m harness.report.simulation.studies --json``): the ``table`` it
    belongs to, the ``setting`` simulated (split, K, spread), the ``truth`` planted ("no effect", "perturbed",
    "redrawn", a shift), what ``says`` it (the statistic or word counted: "banner", a test, "redrawn"), the
    ``rate`` and the ``studies`` it is over."""

    table: str
    setting: str
    truth: str
    says: str
    rate: float
    studies: int


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

    ``verdicts[f]`` maps each verdict of :data:`harness.report.stats.decisions.VERDICTS` to its rate for
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
