"""The Provenance section's tests simulated (DESIGN section 13), through the report's own functions.

* **Agreement of the classes** (:func:`agreement_rate`): paired differences d ~ N(shift_c, sd_c) per pair of
  a class, split over classes as grids split (18:2, 6/4/2, 18:3, 12+12, ...), through
  :func:`harness.report.stats.provenance.class_check` (the floor, the zero-spread rule, the permutation test
  of Welch's F). Under "no hardware effect" (equal laws) the share of studies whose test rejects at alpha is
  the false-alarm rate; a class that is only noisier (equal means, another sd) is the harder null; a shifted
  class gives the power, checked against :func:`harness.report.stats.class_tests.agreement_mde`. The
  floor's comparison uses ``floor=2`` beside the report's :data:`~harness.report.stats.provenance.MIN_CLASS_PAIRS`.
* **The banner** (:func:`banner_rates`, :func:`banner_table`): a grid of a parent, a treatment and two
  controls (five comparisons) whose seeds sit on classes of a split, one class noisier (equal means: the
  false alarms) or its treatment runs moved (the power); every comparison's agreement test vectorised over
  the studies (:func:`agreement_ps`, the report's own p's, checked against
  :func:`~harness.report.stats.class_tests.class_agreement` study by study), Holm over the five: the share of
  grids whose banner says the classes disagree. One noisy class makes every comparison noisy at once, so
  the banner is the rate a reader meets.
* **Balance** (:func:`balance_rate`): straddling pairs whose orientation is a fair coin, through
  :func:`~harness.report.stats.class_tests.orientation_test`.
* **Within the largest class** (:func:`within_rates`): a gain carried by every seed alike (no hardware
  effect), the headline decided on all n pairs and again on the largest class's n_class pairs
  (:func:`harness.report.stats.decisions.headline_p`, :func:`~harness.report.stats.decisions.decide_headline`),
  its power (:func:`harness.report.stats.power.power_at` at the pooled mean and sd) and
  :func:`~harness.report.stats.provenance.within_status`: the share of established verdicts called ``NO``
  (the old rule called every one it missed ``NO``) and ``not re-decidable``.

Rates carry their binomial SE. Permutation p's use fewer draws than the report's (a p from (1 + hits) /
(1 + draws) is valid at any number of draws), each study its own seed.

    python -m harness.report.simulation.studies --tables provenance --studies 2000 --json FILE
"""

from __future__ import annotations

import numpy as np

from harness.report.simulation.rules import Row, binomial_se
from harness.report.stats import decisions as dec
from harness.report.stats.class_tests import (
    agreement_mde,
    orientation_test,
    permutation_p,
    spread_p,
    welch_statistic,
)
from harness.report.stats.pairing import Pair
from harness.report.stats.power import power_at
from harness.report.stats.provenance import (
    MIN_CLASS_PAIRS,
    NO,
    YES,
    attainable_level,
    class_check,
    within_status,
)

SD = 0.04  # nats/token: the factorial study's paired sd
DRAWS = 199  # permutation draws per simulated study (the report draws 9,999)
SPLITS = ((18, 2), (6, 4, 2), (18, 3), (24, 3), (12, 12), (4, 4), (8, 4), (3, 3, 3, 3))


def _pairs(d: np.ndarray, split: tuple[int, ...]) -> tuple[list[Pair], dict[str, str]]:
    """Pairs of paired differences ``d`` [n] on classes ``c0, c1, ...`` of the sizes ``split`` (both runs of each
    pair on its class)."""
    hw, pairs = {}, []
    classes = np.repeat(np.arange(len(split)), split)
    for i, (x, c) in enumerate(zip(d, classes, strict=True)):
        hw[f"f{i}"] = hw[f"s{i}"] = f"c{c}"
        pairs.append(Pair("t - p", "s", 1, i, f"f{i}", f"s{i}", 0.0, 0.0, float(x)))
    return pairs, hw


def agreement_rate(
    split: tuple[int, ...],
    studies: int,
    rng: np.random.Generator,
    *,
    sds: tuple[float, ...] | None = None,
    shifts: tuple[float, ...] | None = None,
    floor: int = MIN_CLASS_PAIRS,
    alpha: float = 0.05,
    draws: int = DRAWS,
) -> tuple[float, float]:
    """``(rate, tested)``: the share of ``studies`` whose agreement test rejects at ``alpha``, and the share in
    which a test ran at all; class c's differences ~ N(shifts[c], sds[c]) (default 0 and :data:`SD`)."""
    sds = sds or (SD,) * len(split)
    shifts = shifts or (0.0,) * len(split)
    hits = ran = 0
    for s in range(studies):
        d = np.concatenate([rng.normal(m, sd, n) for n, sd, m in zip(split, sds, shifts, strict=True)])
        pairs, hw = _pairs(d, split)
        c = class_check("t - p", "k", "s", 1, pairs, hw, alpha, floor=floor, draws=draws, seed=s)
        ran += bool(np.isfinite(c.p))
        hits += bool(c.p < alpha)
    return hits / studies, ran / studies


def mde_power(
    split: tuple[int, ...], studies: int, rng: np.random.Generator, *, alpha: float = 0.05, power: float = 0.8
) -> tuple[float, float]:
    """``(mde, power)``: the MDE :func:`~harness.report.stats.class_tests.agreement_mde` gives at the true sd, and the permutation test's rejection rate with the last class shifted by it
    (equal sds): how well the printed MDE describes the test."""
    groups = [_exact_sd(n) for n in split]  # the MDE from the true sd: each class's sample sd exactly SD
    probe = class_check("t - p", "k", "s", 1, *_pairs(np.concatenate(groups), split), alpha, draws=DRAWS)
    mde = agreement_mde(groups, attainable_level(alpha, probe.min_p, probe.exact), power)
    shifts = (0.0,) * (len(split) - 1) + (mde,)
    rate, _ = agreement_rate(split, studies, rng, shifts=shifts, alpha=alpha)
    return mde, rate


# The simulated grid of the banner: a parent, a treatment and two controls, every seed's four runs on one class;
# its checked comparisons (harness.report.stats.pairing.comparisons_for): t - p, c1 - p, c2 - p, t - c1, t - c2.
GRID = np.array(
    [
        [-1.0, 1.0, 0.0, 0.0],
        [-1.0, 0.0, 1.0, 0.0],
        [-1.0, 0.0, 0.0, 1.0],
        [0.0, 1.0, -1.0, 0.0],
        [0.0, 1.0, 0.0, -1.0],
    ]
)
BANNER_DRAWS = (
    999  # permutation draws per test where the relabellings are too many to count (Holm's level alpha/5)
)
BANNER_SPLITS = ((18, 3), (24, 3), (8, 4), (3, 3, 3, 3), (12, 12), (4, 4), (6, 4, 3))
CHUNK = 250  # studies per batch (memory: a batch holds [CHUNK, relabellings, classes] floats)


def agreement_ps(
    values: np.ndarray, sizes: np.ndarray, alpha: float, draws: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The report's agreement test on many sets of pairs at once: ``values`` [S, n] (each row the classes' paired
    differences in class order, sizes ``sizes`` [k]) -> ``(p, p_permutation, p_spread)`` [S] as
    :func:`~harness.report.stats.class_tests.class_agreement` gives them with these ``draws`` and ``seed``;
    ``p`` NaN where the smallest p is not below ``alpha`` (no test runs,
    :func:`~harness.report.stats.provenance.class_check`)."""
    parts = np.split(values, np.cumsum(sizes)[:-1], axis=1)
    means = np.stack([x.mean(axis=1) for x in parts], axis=1)
    var = np.stack([x.var(axis=1, ddof=1) for x in parts], axis=1)
    f = welch_statistic(means, var, sizes.astype(float))[0]
    perm, _, _, min_p = permutation_p(values, sizes, f, draws, seed)
    spread = spread_p(f, sizes)
    return (np.maximum(perm, spread) if min_p < alpha else np.full(f.shape, np.nan)), perm, spread


def banner_rates(
    split: tuple[int, ...],
    studies: int,
    rng: np.random.Generator,
    *,
    noisier: float = 1.0,
    shift: float = 0.0,
    alpha: float = 0.05,
    draws: int = BANNER_DRAWS,
) -> dict[str, float]:
    """A grid's Provenance banner simulated: ``studies`` grids of :data:`GRID`'s four variants whose seeds sit on
    classes of the sizes ``split``, run noise ~ N(0, SD / sqrt(2)) (paired sd :data:`SD`), the last class's
    runs ``noisier`` x as noisy and its treatment runs moved by ``shift`` (nats/token). Each of the five
    comparisons gets the report's agreement test, vectorised over the studies
    (:func:`~harness.report.stats.class_tests.permutation_p`, :func:`~harness.report.stats.class_tests.spread_p`,
    the larger p; the permutation's draws shared by the studies, each study's p valid), run only where its
    smallest p is below ``alpha`` (:func:`~harness.report.stats.provenance.class_check`'s rule); Holm over the
    five (:func:`harness.report.stats.decisions.holm`).

    Returns the shares ``banner`` (some Holm p < alpha: the banner says the classes disagree), ``single``
    (the first comparison's test alone at alpha), ``single_permutation`` and ``single_spread`` (each p alone).
    """
    sizes = np.array(split)
    last = np.repeat(np.arange(sizes.size), sizes) == sizes.size - 1
    run_sd = np.where(last, noisier, 1.0)[:, None] * SD / np.sqrt(2)  # [n, 1]
    counts = {"banner": 0, "single": 0, "single_permutation": 0, "single_spread": 0}
    for start in range(0, studies, CHUNK):
        s = min(CHUNK, studies - start)
        runs = rng.standard_normal((s, sizes.sum(), GRID.shape[1])) * run_sd
        runs[:, last, 1] += shift
        diffs = runs @ GRID.T  # [s, n, comparisons]
        p = np.empty((s, GRID.shape[0]))
        for j in range(GRID.shape[0]):
            p[:, j], perm, spread = agreement_ps(diffs[..., j], sizes, alpha, draws, int(rng.integers(2**31)))
            if j == 0:
                counts["single_permutation"] += int((perm < alpha).sum())
                counts["single_spread"] += int((spread < alpha).sum())
        counts["single"] += int((p[:, 0] < alpha).sum())
        counts["banner"] += int((dec.holm(p) < alpha).any(axis=1).sum())
    return {k: v / studies for k, v in counts.items()}


def banner_table(
    studies: int, rng: np.random.Generator, alpha: float = 0.05, rows: list | None = None
) -> list[str]:
    """The banner's false alarms with one class noisier, and its power with one class's treatment shifted, as
    text lines (beside each false alarm, the permutation p's and the spread-free p's alone); the rates the
    report's words rest on (the banner, one test) also appended to ``rows``
    (:class:`~harness.report.simulation.rules.Row`)."""
    se = binomial_se(alpha, studies)
    lines = [
        f"Provenance banner, {studies} simulated grids per row (parent, treatment, 2 controls: 5 comparisons, Holm "
        f"over them), paired sd {SD}, {BANNER_DRAWS} permutation draws where the relabellings are too many to count; "
        f"false alarms (no hardware effect; the last class's sd x 1, 2, 3, equal means): limit alpha + 2 SE "
        f"{alpha + 2 * se:.4f}",
        f"{'split':>12} {'sd x':>5} {'banner':>7} {'one test':>9} {'perm. alone':>12} {'spread alone':>13}",
    ]
    for split in BANNER_SPLITS:
        for noisier in (1.0, 2.0, 3.0):
            r = banner_rates(split, studies, rng, noisier=noisier, alpha=alpha)
            name = "/".join(map(str, split))
            lines.append(
                f"{name:>12} {noisier:>5g} {r['banner']:>7.4f} {r['single']:>9.4f} "
                f"{r['single_permutation']:>12.4f} {r['single_spread']:>13.4f}"
            )
            setting = f"{name}, the last class ({split[-1]} pairs) sd x{noisier:g}"
            for says, key in (("banner", "banner"), ("agreement test, one comparison", "single")):
                _row(rows, "provenance", setting, "no effect", says, r[key], studies)  # what the report says
    lines += [
        "",
        "Power of the banner: the last class's treatment runs moved by a shift (equal sds); 0.02 is "
        "min_effect_nats at paired sd 0.04",
        f"{'split':>12} {'shift':>6} {'banner':>7} {'one test':>9}",
    ]
    for split in BANNER_SPLITS:
        for shift in (0.02, 0.04):
            r = banner_rates(split, studies, rng, shift=shift, alpha=alpha)
            name = "/".join(map(str, split))
            lines.append(f"{name:>12} {shift:>6g} {r['banner']:>7.4f} {r['single']:>9.4f}")
            setting = f"{name}, the last class's treatment moved"
            _row(
                rows,
                "provenance",
                setting,
                f"a shift of {shift:g} nats/token",
                "banner",
                r["banner"],
                studies,
            )
            _row(
                rows,
                "provenance",
                setting,
                f"a shift of {shift:g} nats/token",
                "agreement test, one comparison",
                r["single"],
                studies,
            )
    return lines


def _row(
    rows: list | None, table_name: str, setting: str, truth: str, says: str, rate: float, studies: int
) -> None:
    if rows is not None:
        rows.append(Row(table_name, setting, truth, says, rate, studies))


def _exact_sd(n: int) -> np.ndarray:
    """n values with mean 0 and sample sd exactly :data:`SD` (what the MDE reads of a class)."""
    x = np.linspace(-1.0, 1.0, n)
    return x / x.std(ddof=1) * SD


def balance_rate(
    straddling: int, studies: int, rng: np.random.Generator, *, classes: int = 2, alpha: float = 0.05
) -> float:
    """The share of ``studies`` whose orientation test rejects at ``alpha`` when each of ``straddling`` pairs is
    on a random pair of ``classes`` classes with a fair-coin orientation (H0)."""
    hits = 0
    names = [f"c{i}" for i in range(classes)]
    for _ in range(studies):
        oriented: dict[tuple[str, str], int] = {}
        for _ in range(straddling):
            a, b = rng.choice(classes, 2, replace=False)
            key = (names[a], names[b])
            oriented[key] = oriented.get(key, 0) + 1
        hits += orientation_test(oriented) < alpha
    return hits / studies


def within_rates(
    n: int,
    n_class: int,
    studies: int,
    rng: np.random.Generator,
    *,
    d_z: float = 0.8,
    alpha: float = 0.05,
    target: float = 0.8,
) -> dict[str, float]:
    """Among ``studies`` grids of one cell whose gain (mean d = -d_z sd, sd :data:`SD`, the same on every
    class: no hardware effect) is established on all ``n`` pairs: the share re-decided ``yes``, ``NO`` and
    ``not re-decidable`` on the largest class's first ``n_class`` pairs (:func:`within_status`), and ``old_no``,
    the share the old rule called ``NO`` (every verdict the class did not repeat), with ``established`` the
    share of studies established at all."""
    d = rng.normal(-d_z * SD, SD, (studies, 1, n))
    p, _ = dec.headline_p(d)
    _, est = dec.decide_headline(np.full(p.shape, n), d.mean(-1), p, alpha)
    sub = d[..., :n_class]
    p_sub, _ = dec.headline_p(sub)
    _, est_sub = dec.decide_headline(np.full(p_sub.shape, n_class), sub.mean(-1), p_sub, alpha)
    counts = {YES: 0, NO: 0, "not re-decidable": 0, "old_no": 0}
    chosen = np.flatnonzero(est[:, 0])
    for s in chosen:
        mean, sd = float(d[s, 0].mean()), float(d[s, 0].std(ddof=1))
        power = float(power_at(abs(mean), sd, n_class, alpha, "one-sided"))
        within = dec.GAIN_ESTABLISHED if est_sub[s, 0] else dec.UNDECIDED
        status = within_status(dec.GAIN_ESTABLISHED, within, n_class, power, target)
        counts["not re-decidable" if status.startswith("not re-decidable") else status] += 1
        counts["old_no"] += within != dec.GAIN_ESTABLISHED
    total = max(1, chosen.size)
    return {k: v / total for k, v in counts.items()} | {"established": chosen.size / studies}


def table(
    studies: int = 2_000, seed: int = 20261206, alpha: float = 0.05, rows: list | None = None
) -> list[str]:
    """The Provenance section's tests simulated, as text lines (quoted in reports/LOG.md and docs/statistics.md);
    the banner's rates (:func:`banner_table`) and the single test's false alarms also appended to ``rows``."""
    rng = np.random.default_rng(seed)
    se = binomial_se(alpha, studies)
    lines = banner_table(studies, rng, alpha, rows) + [
        "",
        f"Provenance: agreement of the classes, {studies} studies per row (binomial SE at alpha {se:.4f}), paired "
        f"sd {SD}, {DRAWS} permutation draws per study; false alarms (no hardware effect; 'noisier': the smallest "
        "class's sd x 2, equal means) with the report's floor (3 pairs) and with a floor of 2",
        f"{'split':>12} {'equal f3':>9} {'noisier f3':>11} {'equal f2':>9} {'noisier f2':>11} {'tested f3':>10}",
    ]
    for split in SPLITS:
        noisier = (SD,) * (len(split) - 1) + (2 * SD,)
        eq3, ran3 = agreement_rate(split, studies, rng, alpha=alpha)
        no3, _ = agreement_rate(split, studies, rng, sds=noisier, alpha=alpha)
        eq2, _ = agreement_rate(split, studies, rng, floor=2, alpha=alpha)
        no2, _ = agreement_rate(split, studies, rng, sds=noisier, floor=2, alpha=alpha)
        name = "/".join(map(str, split))
        lines.append(f"{name:>12} {eq3:>9.4f} {no3:>11.4f} {eq2:>9.4f} {no2:>11.4f} {ran3:>10.4f}")
        for sd_x, floor, rate in ((1, 3, eq3), (2, 3, no3), (1, 2, eq2), (2, 2, no2)):
            setting = f"{name}, the last class sd x{sd_x}, floor {floor} pairs"
            says = "agreement test, one comparison" + (
                "" if floor == MIN_CLASS_PAIRS else " (not the report's floor)"
            )
            _row(rows, "provenance", setting, "no effect", says, rate, studies)
    lines += [
        "",
        "Power of the agreement test: one class shifted (equal sds)",
        f"{'split':>12} {'shift':>7} {'power':>7}",
    ]
    for split in ((4, 4), (6, 6), (12, 12), (18, 6)):
        for shift in (0.03, 0.05, 0.1):
            rate, _ = agreement_rate(
                split, studies, rng, shifts=(0.0,) * (len(split) - 1) + (shift,), alpha=alpha
            )
            lines.append(f"{'/'.join(map(str, split)):>12} {shift:>7.3f} {rate:>7.4f}")
    lines += [
        "",
        "The printed MDE (power 0.8 at alpha) against the test's power at it",
        f"{'split':>12} {'MDE':>7} {'power':>7}",
    ]
    for split in ((4, 4), (6, 6), (12, 12), (18, 6), (8, 8, 8)):
        mde, rate = mde_power(split, studies, rng, alpha=alpha)
        lines.append(f"{'/'.join(map(str, split)):>12} {mde:>7.4f} {rate:>7.4f}")
    lines += [
        "",
        "Balance: straddling pairs with a fair-coin orientation; share with p < alpha",
        f"{'pairs':>6} {'classes':>8} {'rate':>7}",
    ]
    for pairs, classes in ((4, 2), (10, 2), (20, 2), (6, 3), (12, 3)):
        lines.append(
            f"{pairs:>6} {classes:>8} {balance_rate(pairs, studies, rng, classes=classes, alpha=alpha):>7.4f}"
        )
    lines += [
        "",
        "Within the largest class, no hardware effect (gain d_z 0.8 on every class): among established verdicts",
        f"{'n':>4} {'class':>6} {'established':>12} {'yes':>7} {'NO':>7} {'not re-dec.':>12} {'old NO':>7}",
    ]
    for n, n_class in ((8, 4), (12, 6), (16, 8), (24, 12)):
        r = within_rates(n, n_class, studies * 5, rng, alpha=alpha)
        lines.append(
            f"{n:>4} {n_class:>6} {r['established']:>12.4f} {r[YES]:>7.4f} {r[NO]:>7.4f} "
            f"{r['not re-decidable']:>12.4f} {r['old_no']:>7.4f}"
        )
    return lines


__all__ = [
    "BANNER_SPLITS",
    "DRAWS",
    "GRID",
    "SD",
    "SPLITS",
    "agreement_ps",
    "agreement_rate",
    "balance_rate",
    "banner_rates",
    "banner_table",
    "mde_power",
    "table",
    "within_rates",
]
