"""One comparison's test as the plan reads it: at the look reached, its sequential p (DESIGN section 8).

:func:`sequential_test` runs a test (``d [..., m] -> (p, exact)``, e.g.
:func:`harness.report.stats.decisions.headline_p`) on paired differences in seed order the way the report
does for the headline, the control contrasts and the factorial contrasts: without looks on all pairs;
with looks on the first n_k pairs of every look reached, and Holm then sees the sequential p
(:mod:`harness.report.stats.looks`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.design.analysis_plan import AnalysisPlan
from harness.report.stats import paired_tests as paired
from harness.report.stats.floors import verdict_mean
from harness.report.stats.looks import Look, at_looks, look_at, sequential_p

NAN = float("nan")


@dataclass(frozen=True, slots=True)
class SequentialTest:
    """One comparison's test under the plan's looks (see :func:`sequential_test`)."""

    look: Look
    p: float  # nominal p of the pairs the current look tests
    exact: bool
    sequential_p: float  # what Holm sees
    deciding_mean: (
        float  # mean d at the look attaining sequential_p (floors.verdict_mean: exact at the floor)
    )
    decided_look: int  # 1-based look attaining sequential_p (0: no looks, or untested)


def sequential_test(d: np.ndarray, plan: AnalysisPlan, test) -> SequentialTest:
    """Test differences ``d`` (seed order) as the plan reads them (:mod:`harness.report.stats.looks`).

    Without looks: ``test`` on all pairs, the ordinary p. With looks: ``test`` on the first
    n_k pairs at every look reached; the sequential p over them. Untested (fewer than 3
    pairs, or before the first look): NaN.
    """
    look = look_at(d.size, plan.looks, plan.alpha)
    if look.n < paired.MIN_PAIRS:
        return SequentialTest(
            look=look,
            p=NAN,
            exact=False,
            sequential_p=NAN,
            deciding_mean=verdict_mean(d) if d.size else NAN,
            decided_look=0,
        )
    p, exact = test(d[: look.n])
    if not plan.looks:
        return SequentialTest(
            look=look,
            p=float(p),
            exact=bool(exact),
            sequential_p=float(p),
            deciding_mean=verdict_mean(d),
            decided_look=0,
        )
    p_looks, means = at_looks(d, plan.looks, test)
    seq, i = sequential_p(p_looks, plan.looks)
    return SequentialTest(
        look=look,
        p=float(p),
        exact=bool(exact),
        sequential_p=float(seq),
        deciding_mean=float(means[int(i)]),
        decided_look=int(i) + 1,
    )


__all__ = ["SequentialTest", "sequential_test"]
