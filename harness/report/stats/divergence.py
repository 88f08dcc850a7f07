"""Divergence is the worst outcome, not a missing value (DESIGN section 6).

A seed where one variant of a comparison diverged (status ``diverged``, a non-finite final
NLL, or ``failed`` with a numerical error: NaN, inf, overflow, ...) while its comparator
finished is a *loss for the variant that diverged* in every test that uses the comparison.
Dropping the pair instead lets a variant that diverges when it would lose claim a gain:
under a true null, a treatment that diverges at its losing seeds gets "gain established"
in 11-12 % of studies at alpha 0.05 (reports/LOG.md, 2026-12-01 v3).

Method (worst-case imputation): the lost seed's paired difference is set to the largest
|d| observed in that comparison and cell (at least :data:`harness.report.stats.floors.IMPUTED_NATS`, twice the
numerical floor: strictly beyond it, so no verdict on imputed seeds rests on float rounding), with
the sign of a loss for the variant that diverged: ``d = first - second = +M`` when
``first`` diverged, ``-M`` when ``second`` did. The seed then enters every test (headline,
absence, A/A offset) like an observed pair, in seed order. For the reproduction contrast
``e = (c - p) - rho (t - p)`` a diverged control counts ``e = +M_e`` (it lands on the
parent's side, the loss for the control), a diverged treatment ``e = -M_e``; a seed where
the parent diverged, or two of the three, says nothing about where the control lands and is
left out (named). Seeds where both sides of a pair diverged are left out (no information).
A comparator that is missing for another reason (unfinished, failed without a numerical
error) leaves the seed missing, as before.

Simulated (tests/stats/test_simulate.py): under a true null with "diverges when it would lose"
the headline's false-positive rate stays <= alpha at n = 3..10 (dropping: up to 0.79 at
n = 10 when every losing seed diverges).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from harness.report.stats.floors import FLOOR_NATS, IMPUTED_NATS

# An error text that means the run failed for a numerical reason (it diverged, in effect).
NUMERICAL_ERROR = re.compile(
    r"\b(nan|inf|infinite|infinity|non-finite|nonfinite|overflow|floatingpointerror|"
    r"diverg\w*)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class Imputed:
    """One lost seed counted as a loss: ``value`` is the d (nats/token) the tests use for it."""

    seed: int
    loser: str  # the variant that diverged
    value: float
    why: str  # the run's status and error, e.g. "diverged: loss became NaN at step 70"


@dataclass(frozen=True, slots=True)
class TestedDiffs:
    """The paired differences a test uses, in seed order: observed pairs plus lost seeds counted
    as losses (:class:`Imputed`); ``dropped``: seeds left out because both (or, for a contrast,
    the parent or two of three) diverged."""

    seeds: tuple[int, ...]
    d: np.ndarray  # [n] nats/token
    imputed: tuple[Imputed, ...] = ()
    dropped: tuple[int, ...] = ()

    @property
    def imputed_seeds(self) -> tuple[int, ...]:
        return tuple(i.seed for i in self.imputed)


def is_lost(status: str, reason: str) -> bool:
    """A left-out run that counts as diverged: ``diverged``, or ``failed`` with a numerical error."""
    return status == "diverged" or (status == "failed" and bool(NUMERICAL_ERROR.search(reason or "")))


def lost_by_variant(left_out: Iterable, usable: set[tuple]) -> dict[tuple[str, str, int], dict[int, str]]:
    """``{(variant, size, budget): {seed: why}}`` of diverged runs (:func:`is_lost`) of
    :class:`harness.report.stats.pairing.LeftOut` records, except seeds where the variant also has a usable
    run (``usable``: set of (variant, size, budget, seed))."""
    out: dict[tuple[str, str, int], dict[int, str]] = {}
    for lo in left_out:
        if lo.seed is None or not is_lost(lo.status, lo.reason):
            continue
        if (lo.variant, lo.size, lo.budget_tokens, lo.seed) in usable:
            continue
        out.setdefault((lo.variant, lo.size, lo.budget_tokens), {})[int(lo.seed)] = lo.reason
    return out


def impute(d, lost, floor: float = IMPUTED_NATS) -> np.ndarray:
    """Worst-case imputation as arrays (the rule of :func:`worst_case`, vectorised for simulations).

    Args:
        d: paired differences ``[..., n]`` (nats/token; values at lost positions are ignored).
        lost: ``[..., n]`` int: 0 observed, +1 ``first`` lost (d = +M), -1 ``second`` lost (d = -M).

    Returns:
        ``[..., n]``: observed d kept, lost positions ``sign * M`` with M = max(max |observed d|, floor).
    """
    d, lost = np.asarray(d, dtype=float), np.asarray(lost)
    observed = lost == 0
    m = np.maximum(np.abs(np.where(observed, d, 0.0)).max(axis=-1, keepdims=True, initial=0.0), floor)
    return np.where(observed, d, lost * m)


def worst_case(
    seeds: Iterable[int],
    d,
    losses: dict[int, tuple[int, str, str]],
    dropped: Iterable[int] = (),
    floor: float = IMPUTED_NATS,
) -> TestedDiffs:
    """Observed ``d`` at ``seeds`` plus each lost seed counted as a loss (module docstring).

    Args:
        seeds, d: the observed pairs (nats/token), any order.
        losses: ``{seed: (sign, loser, why)}``; sign +1: the seed's d is ``+M`` (``first`` lost),
            -1: ``-M`` (``second`` lost); M = max(max |observed d|, ``floor``).
        dropped: seeds left out (named in the result).

    Raises:
        ValueError: a seed both observed and lost, or a sign other than +-1.
    """
    seeds, d = [int(s) for s in seeds], np.asarray(d, dtype=float).ravel()
    both = sorted(set(seeds) & set(losses))
    if both:
        raise ValueError(f"seed(s) {both} are both observed and lost")
    bad = {s: v[0] for s, v in losses.items() if v[0] not in (1, -1)}
    if bad:
        raise ValueError(f"loss signs must be +1 or -1, got {bad}")
    lost = sorted(losses.items())
    signs = np.array([0] * d.size + [sign for _, (sign, _, _) in lost])
    values = impute(np.concatenate([d, np.zeros(len(lost))]), signs, floor)
    imputed = tuple(
        Imputed(s, loser, float(v), why) for (s, (_, loser, why)), v in zip(lost, values[d.size :])
    )
    all_seeds = seeds + [i.seed for i in imputed]
    order = np.argsort(all_seeds, kind="stable")
    return TestedDiffs(
        tuple(all_seeds[i] for i in order), values[order], imputed, tuple(sorted(set(dropped)))
    )


def pair_losses(
    first: str,
    second: str,
    lost_first: dict[int, str],
    lost_second: dict[int, str],
    done_first: set[int],
    done_second: set[int],
) -> tuple[dict[int, tuple[int, str, str]], list[int]]:
    """Losses of the comparison ``first - second``: a seed lost by one side whose comparator has a
    usable run counts against the side that diverged; lost by both: dropped."""
    losses, dropped = {}, []
    for s in sorted(set(lost_first) | set(lost_second)):
        if s in lost_first and s in lost_second:
            dropped.append(s)
        elif s in lost_first and s in done_second:
            losses[s] = (1, first, lost_first[s])
        elif s in lost_second and s in done_first:
            losses[s] = (-1, second, lost_second[s])
    return losses, dropped


def contrast_losses(
    control: str, treatment: str, lost: dict[str, dict[int, str]], done: dict[str, set[int]], parent: str
) -> tuple[dict[int, tuple[int, str, str]], list[int]]:
    """Losses of the reproduction contrast ``e = (c - p) - rho (t - p)``: a diverged control with
    parent and treatment done is ``+M_e``; a diverged treatment with control and parent done is
    ``-M_e``; any other seed with a diverged run among the three is dropped."""
    losses, dropped = {}, []
    names = (control, parent, treatment)
    for s in sorted(set().union(*(lost.get(v, {}) for v in names))):
        lost_here = [v for v in names if s in lost.get(v, {})]
        if not all(s in done.get(v, set()) for v in names if v not in lost_here):
            continue  # a run missing for another reason: the seed is missing, as for any pair
        if lost_here == [control]:
            losses[s] = (1, control, lost[control][s])
        elif lost_here == [treatment]:
            losses[s] = (-1, treatment, lost[treatment][s])
        else:
            dropped.append(s)
    return losses, dropped


class LostSeeds:
    """The grid's diverged runs by (variant, size, budget) and the seeds each variant finished."""

    def __init__(self, lost: dict[tuple[str, str, int], dict[int, str]], usable: set[tuple]):
        self.lost, self.usable = lost, usable

    @classmethod
    def of_pairing(cls, pairing) -> LostSeeds:
        """From a :class:`harness.report.stats.pairing.Pairing`: its usable runs and its left-out ones."""
        usable = {
            (r["variant"], r["size"], r["budget_tokens"], r["seed"])
            for r in pairing.usable.select("variant", "size", "budget_tokens", "seed").iter_rows(named=True)
        }
        return cls(lost_by_variant(pairing.left_out, usable), usable)

    def of(self, variant: str, size: str, budget: int) -> dict[int, str]:
        """``{seed: why}`` of the variant's lost runs in the cell."""
        return self.lost.get((variant, size, budget), {})

    def done(self, variant: str, size: str, budget: int) -> set[int]:
        """Seeds of the variant's usable (finished, paired-eligible) runs in the cell."""
        return {k[3] for k in self.usable if k[:3] == (variant, size, budget)}

    def tested(self, ps) -> TestedDiffs:
        """The differences of paired set ``ps`` a test uses: its pairs plus the lost seeds counted as losses."""
        key = (ps.size, ps.budget_tokens)
        losses, dropped = pair_losses(
            ps.first,
            ps.second,
            self.of(ps.first, *key),
            self.of(ps.second, *key),
            self.done(ps.first, *key),
            self.done(ps.second, *key),
        )
        return worst_case(ps.seeds, np.array([p.diff for p in ps.pairs]), losses, dropped)


def imputed_only(mean: float, n: int, imputed) -> bool:
    """The effect ``mean`` (nats/token, over ``n`` tested values) rests only on the imputed values of
    diverged runs: some seeds are imputed and the observed ones average within the numerical floor
    (none observed, or e.g. every observed difference exactly 0). Such an effect is a statement about
    divergence, not about the NLL of any finished run."""
    k = len(imputed)
    if not k or not np.isfinite(mean):
        return False
    if k >= n:
        return True
    observed_sum = mean * n - sum(i.value for i in imputed)
    return abs(observed_sum) / (n - k) <= FLOOR_NATS


def effect_text(mean: float, n: int, imputed, digits: int = 4) -> str:
    """``mean`` as a signed number of nats/token for a sentence: ``+0.0170``; where the effect rests only
    on imputed values (:func:`imputed_only`) ``+2e-06, resting only on the imputed values of runs that
    diverged (rd_offset at seed(s) 0, 1)`` instead of a rounded ``+0.0000``."""
    if not imputed_only(mean, n, imputed):
        return f"{mean:+.{digits}f}"
    where = "; ".join(
        f"{loser} at seed(s) {', '.join(str(i.seed) for i in imputed if i.loser == loser)}"
        for loser in dict.fromkeys(i.loser for i in imputed)
    )
    return f"{mean:+.3g}, resting only on the imputed values of runs that diverged ({where})"
