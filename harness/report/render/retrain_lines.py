"""``harness retrain``'s output: the re-train check as Markdown text, CSV rows and a JSON object.

Reads only a :class:`harness.report.stats.retrain_check.RetrainCheck` and the machine record the command gives
(CPU model, cores, torch, workers and threads, as recorded when the runs trained: :func:`harness.train.retrain.machine`;
what re-trained the runs: training commit, numerics revision and hardware class, from their result files; the
archive's numerics and whether the runs re-trained with them: :func:`harness.train.retrain.identity`): no
absolute path and no host name is written. The words follow
the check's verdict and never claim more than its evidence (DESIGN section 13): a non-rejection is stated with
the bias the pairs exclude, not as "no bias".
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import asdict

from harness.common.terms import UNKNOWN
from harness.report.stats.retrain_check import (
    BIAS,
    BIT_IDENTICAL,
    PERTURBATION_RATIO,
    PERTURBED,
    REDRAWN,
    TOO_FEW,
    ContrastShift,
    RetrainCheck,
    cannot_tell,
)

CSV_COLUMNS = (
    "level",
    "contrast",
    "variant",
    "seed",
    "run_id",
    "n",
    "archived",
    "new",
    "shift",
    "ci_low",
    "ci_high",
    "p",
    "holm_p",
    "mde_nats",
    "seed_sd",
    "shift_in_seed_sd",
    "shift_in_smallest_effect",
    "verdict",
    "cpu_model",
    "hardware",
    "torch",
    "threads_per_worker",
    "mde_level",
    "power_at_effect",
    "tost_p",
    "bias_bound",
    "pairs_to_exclude",
    "var_ratio",
    "var_ratio_low",
    "var_ratio_high",
    "corr",
    "corr_low",
    "corr_high",
    "smallest_effect",
    "commit",
    "numerics",
    "archive_numerics",
)  # the first 22 as before this check said what it excludes (add, never rename)


def _f(x: float, digits: int = 4) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:+.{digits}f}"


def _g(x: float | None) -> str:
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.3g}"


def _span(values, fmt=_g) -> str:
    """``a`` or ``a to b`` over the finite values (``n/a`` without any)."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return "n/a"
    lo, hi = fmt(min(finite)), fmt(max(finite))
    return lo if lo == hi else f"{lo} to {hi}"


def _needed(check: RetrainCheck) -> str:
    """How many pairs would exclude a bias of the smallest effect if there were none (the largest over the
    contrasts, at each one's shifts' sd)."""
    needed = [c.pairs_to_exclude for c in check.contrasts]
    if not math.isfinite(check.smallest_effect) or not needed:
        return ""
    eff = f"{check.smallest_effect:.4f}"
    if any(n is None for n in needed):
        return (
            f" Even 1000 pairs would not exclude a bias of {eff} nats/token at the spread of these shifts "
            "(or the spread is zero)."
        )
    return (
        f" About {max(needed)} pairs would exclude a bias of {eff} nats/token if there were none "
        f"(TOST power {check.power:g} at the shifts' own sd; the archive has "
        f"{max(c.archive_seeds for c in check.contrasts)} seeds)."
    )


def _movement(check: RetrainCheck) -> str:
    """The runs' movement against a redraw, in one sentence."""
    cs = [c for c in check.contrasts if math.isfinite(c.var_ratio)]
    if not cs:
        return "How far the runs moved against a redraw cannot be measured (no seed sd)."
    ratio = _span([c.var_ratio for c in cs])
    corr = _span([c.corr for c in cs], lambda x: f"{x:.2f}")
    corr_text = (
        f"; archived and new paired differences correlate {corr} (a redraw gives 0)" if corr != "n/a" else ""
    )
    if all(c.below_redraw for c in cs):
        return (
            f"The runs were perturbed, not redrawn: the variance of the shift of a paired difference is {ratio} "
            f"of twice its seed variance (a redraw gives 1; every 95 % interval lies below 1, the highest "
            f"reaching {_g(max(c.var_ratio_high for c in cs))}){corr_text}."
        )
    if len(cs) == len(check.contrasts) and all(c.var_ratio_low > PERTURBATION_RATIO for c in cs):
        return (
            f"The runs were redrawn, not perturbed: the variance of the shift of a paired difference is {ratio} "
            f"of twice its seed variance (a redraw gives 1; every 95 % interval lies above "
            f"{PERTURBATION_RATIO:g}, a perturbation that keeps three quarters of a seed's draw, the lowest reaching "
            f"{_g(min(c.var_ratio_low for c in cs))}){corr_text}."
        )
    reach = [c for c in cs if not c.below_redraw]
    named = "; ".join(
        f"{c.contrast}: {_g(c.var_ratio)} [{_g(c.var_ratio_low)}, {_g(c.var_ratio_high)}]" for c in reach
    )
    return (
        f"The runs may have moved as far as new draws or only a little: the variance of the shift of a paired "
        f"difference over twice its seed variance (a redraw gives 1) has a 95 % interval reaching 1 in "
        f"{len(reach)} of {len(cs)} contrast(s) ({named}), and not every interval lies above "
        f"{PERTURBATION_RATIO:g} (a perturbation that keeps three quarters of a seed's draw){corr_text}."
    )


def _no_bias(check: RetrainCheck) -> str:
    """No contrast's mean shift differs from 0: the smallest Holm p and the MDE at the Holm level."""
    worst = min(check.contrasts, key=lambda c: c.holm_p)
    level = check.contrasts[0].mde_level
    return (
        f"No contrast's mean shift of the paired differences differs from 0 (Holm p >= {check.alpha:g}; smallest "
        f"{worst.holm_p:.3g}, {worst.contrast}); at {max(c.n for c in check.contrasts)} pairs that test detects a "
        f"mean shift of {_span([c.mde_nats for c in check.contrasts], lambda x: f'{x:.4f}')} nats/token (MDE at "
        f"power {check.power:g} and level {level:.3g}, Holm's first step over {len(check.contrasts)} contrasts), "
        f"power {_span([c.power_at_effect for c in check.contrasts], lambda x: f'{x:.2f}')} against a bias of the "
        "smallest effect."
    )


def _equivalence(check: RetrainCheck) -> str:
    """What the TOSTs exclude (module docstring of the check)."""
    eff = check.smallest_effect
    if not math.isfinite(eff):
        return (
            "The study reports no effect to measure a bias against (no contrast's interval excludes 0 and the "
            "plan sets no min_effect_nats): no equivalence test."
        )
    bound = max(c.bound for c in check.contrasts)
    failed = [c for c in check.contrasts if not c.tost_p < check.alpha]
    if failed:
        named = "; ".join(f"{c.contrast} (TOST p {c.tost_p:.3g})" for c in failed)
        return (
            f"The pairs do not exclude a bias of the smallest effect the study reports ({eff:.4f} nats/token, "
            f"{check.smallest_effect_source}) in {named}: together they exclude only a bias of {bound:.4f} "
            f"nats/token or more ({bound / eff:.2g} x that effect)."
        )
    return (
        f"The pairs exclude a bias of the smallest effect the study reports ({eff:.4f} nats/token, "
        f"{check.smallest_effect_source}) in every contrast (two one-sided t-tests, largest p "
        f"{max(c.tost_p for c in check.contrasts):.3g}): they exclude a bias of {bound:.4f} nats/token or more "
        f"({bound / eff:.2g} x that effect), not a smaller one; a verdict resting on an effect near that size "
        "wants its pairs trained on one machine."
    )


def _alone(check: RetrainCheck) -> str:
    alone = [c for c in check.contrasts if c.holm_p >= check.alpha and (c.ci_low > 0 or c.ci_high < 0)]
    return "".join(
        f" Alone (without Holm), the 95 % interval of {c.contrast} excludes 0 ({_f(c.ci_low)} to {_f(c.ci_high)}, "
        f"p {c.p:.3g}): a candidate bias that more pairs would confirm or dismiss."
        for c in alone
    )


def verdict_sentence(check: RetrainCheck) -> str:
    """The answer: the verdict in bold words, then what decided it and what the pairs exclude."""
    if check.verdict == BIT_IDENTICAL:
        return "bit-identical: every re-trained run's final val NLL equals its archived value exactly."
    n = min(c.n for c in check.contrasts)
    if check.verdict == BIAS:
        worst = min(check.contrasts, key=lambda c: c.holm_p)
        return (
            f"a bias: the paired differences of {worst.contrast} moved by {_f(worst.mean)} nats/token on average "
            f"(95 % interval {_f(worst.ci_low)} to {_f(worst.ci_high)}, Holm p {worst.holm_p:.3g}): this machine "
            "moves one variant against its partner; do not pool its runs with the archive's."
        )
    if check.verdict == TOO_FEW and n < 3:
        return (
            f"too few pairs to tell: {n} pairs per contrast, and a test of a bias needs 3 (no MDE can be priced, "
            f"no bias excluded). {_movement(check)}{_needed(check)}"
        )
    if check.verdict == TOO_FEW:
        return (
            f"too few pairs to tell: {_no_bias(check)} {_equivalence(check)}{_needed(check)} {_movement(check)}"
            + (_alone(check))
        )
    head = {PERTURBED: "perturbed", REDRAWN: "redrawn"}.get(check.verdict, cannot_tell(n))
    movement = _movement(check)
    return f"{head}: {movement[0].lower()}{movement[1:]} {_no_bias(check)} {_equivalence(check)}" + _alone(
        check
    )


def _class_line(machine: dict) -> str:
    return (
        f"training commit {machine.get('commit', UNKNOWN)}, numerics {machine.get('numerics', UNKNOWN)}, "
        f"hardware class {machine.get('hardware', UNKNOWN)}"
    )


def _contrast_tables(check: RetrainCheck) -> list[str]:
    eff = check.smallest_effect
    lines = [
        "",
        "## A bias? Mean shift of the paired differences, per contrast",
        "",
        "| contrast | pairs | mean shift | 95 % interval | p | Holm p | MDE (level) | power at eff | "
        "seed sd (seeds) | /sd | /eff |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {c.contrast} | {c.n} | {_f(c.mean)} | {_f(c.ci_low)} to {_f(c.ci_high)} | {_g(c.p)} | {_g(c.holm_p)} "
        f"| {_mde(c)} | {_g(c.power_at_effect)} | {c.seed_sd:.4f} ({c.archive_seeds}) | {_f(c.mean_in_sd, 2)} "
        f"| {_f(c.mean_in_effect, 2)} |"
        for c in check.contrasts
    ]
    lines += [
        "",
        f"## How large a bias do the pairs exclude? Two one-sided t-tests at +-{eff:.4f} nats/token",
        "",
        "| contrast | TOST p | excludes a bias of | /eff | pairs to exclude eff |",
        "|---|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {c.contrast} | {_g(c.tost_p)} | {_g(c.bound)} or more | {_g(_over(c.bound, eff))} "
        f"| {c.pairs_to_exclude if c.pairs_to_exclude is not None else 'n/a'} |"
        for c in check.contrasts
    ]
    lines += [
        "",
        "## How far did the runs move? Against a redraw",
        "",
        "| contrast | shift variance / (2 x seed variance) | 95 % interval | archived/new correlation | 95 % interval |",
        "|---|---:|---|---:|---|",
    ]
    lines += [
        f"| {c.contrast} | {_g(c.var_ratio)} | {_g(c.var_ratio_low)} to {_g(c.var_ratio_high)} | "
        f"{_f(c.corr, 3)} | {_f(c.corr_low, 3)} to {_f(c.corr_high, 3)} |"
        for c in check.contrasts
    ]
    return lines


def _mde(c: ContrastShift) -> str:
    return f"{c.mde_nats:.4f} ({c.mde_level:.3g})" if math.isfinite(c.mde_nats) else f"n/a ({c.n} pairs)"


def _over(x: float, unit: float) -> float:
    return x / unit if math.isfinite(unit) and unit > 0 else math.nan


def identity_line(machine: dict) -> str:
    """Whether the runs re-trained with the archive's numerics, and so what the check measures (DESIGN 13)."""
    archive = machine.get("archive_numerics", UNKNOWN)
    if machine.get("archive_numerics_used"):
        return f"The archive's numerics ({archive}) re-trained every run: the check compares machines."
    return (
        f"The archive's numerics are {archive}, and not every run re-trained with its own (unknown, or a revision "
        "this code no longer has): the check measures code plus machine."
    )


def settings_phrase(machine: dict) -> str:
    """The workers and threads per worker that re-trained the runs. With ``machine["settings"]`` (``as
    trained``: :func:`harness.train.retrain.machine`, read from what was recorded when each run trained) each
    says so: ``workers: 2 (as trained), threads per worker: 1 (as trained)``; ``not recorded`` where no record
    says; ``1 (3 runs), 2 (1 run) (as trained: the runs differ)``. Without it (a machine record written before
    the runs' own records were read) the numbers as that record gives them: ``2 workers x 1 threads``."""
    workers, threads = machine["workers"], machine["threads_per_worker"]
    if "settings" not in machine:
        return f"{workers} workers x {threads} threads"

    def said(value) -> str:
        if value is None or value == UNKNOWN:
            return "not recorded"
        if isinstance(value, str):  # a tally: the runs differ, or only some recorded it
            return f"{value} ({machine['settings']}: the runs differ)"
        return f"{value} ({machine['settings']})"

    return f"workers: {said(workers)}, threads per worker: {said(threads)}"


def render_text(check: RetrainCheck, machine: dict, archive_name: str) -> str:
    """The Markdown text ``harness retrain`` prints (and a study commits beside its report)."""
    eff = check.smallest_effect
    lines = [
        f"# Re-train check: {archive_name}",
        "",
        f"Re-trained here: {len(check.runs)} runs (seeds {' '.join(map(str, sorted({r.seed for r in check.runs})))}) "
        f"on {machine['cpu_model']} ({machine['cpu_cores']} cores), "
        f"torch {machine['torch']}, {settings_phrase(machine)}; "
        f"{_class_line(machine)}.",
        identity_line(machine),
        f"Units: nats/token; `/sd` = in units of the seed sd (a run: its variant's NLL sd across the archive's "
        f"seeds; a pair: the sd of the contrast's archived paired differences); `/eff` = in units of the "
        f"smallest effect the study reports, {eff:.4f} nats/token ({check.smallest_effect_source}).",
        "",
        f"**Verdict: {verdict_sentence(check)}**",
        "",
        "## Runs",
        "",
        "| run | archived | new | shift | /sd |",
        "|---|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r.variant} s{r.seed} | {r.archived:.6f} | {r.new:.6f} | {_f(r.shift)} | {_f(r.shift_in_sd, 2)} |"
        for r in check.runs
    ]
    lines += [
        "",
        "## Paired differences, per seed",
        "",
        "| contrast | seed | archived d | new d | shift | /sd | /eff |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {p.contrast} | {p.seed} | {_f(p.archived)} | {_f(p.new)} | {_f(p.shift)} | {_f(p.shift_in_sd, 2)} "
        f"| {_f(p.shift_in_effect, 2)} |"
        for p in check.pairs
    ]
    lines += _contrast_tables(check)
    lines += [
        "",
        f"Method (harness/report/stats/retrain_check.py, DESIGN section 13): per contrast a two-sided one-sample "
        f"t-test of the shifts (H0: mean 0), Holm across the {len(check.contrasts)} contrasts at alpha "
        f"{check.alpha:g}, its MDE by the noncentral t at power {check.power:g} and Holm's first-step level from the "
        "shifts' own sd; two one-sided t-tests (TOST) of H0 |mean shift| >= the smallest effect at alpha, "
        "each contrast on its own (a claim about all of them is an intersection-union test), the bound being the "
        "largest |end| of the (1 - 2 alpha) t interval; the redraw ratio's interval from the F distribution on "
        "(pairs - 1, archive seeds - 1) df, the correlation's by Fisher's z. Verdict: bit-identical; too few pairs "
        "to tell below 3 pairs; a bias at Holm p < alpha; too few pairs to tell where a TOST does not exclude the "
        "smallest effect; else perturbed when every redraw-ratio interval lies below 1, redrawn when every one "
        f"lies above {PERTURBATION_RATIO:g}, else cannot tell perturbed from redrawn at the pairs given.",
    ]
    return "\n".join(lines) + "\n"


def render_csv(check: RetrainCheck, machine: dict) -> str:
    """One row per run, per (contrast, seed) and per contrast (``level`` = run / pair / contrast), each with
    the verdict, the CPU model, torch and threads per worker the runs trained with (as recorded when they trained:
    :func:`harness.train.retrain.machine`) and what re-trained the runs (commit, numerics, hardware class, the
    archive's numerics) (:data:`CSV_COLUMNS`)."""
    base = {
        "verdict": check.verdict,
        "cpu_model": machine["cpu_model"],
        "hardware": machine.get("hardware", UNKNOWN),
        "torch": machine["torch"],
        "threads_per_worker": machine["threads_per_worker"],
        "smallest_effect": check.smallest_effect,
        "commit": machine.get("commit", UNKNOWN),
        "numerics": machine.get("numerics", UNKNOWN),
        "archive_numerics": machine.get("archive_numerics", UNKNOWN),
    }
    rows = [
        {
            "level": "run",
            "variant": r.variant,
            "seed": r.seed,
            "run_id": r.run_id,
            "n": 1,
            "archived": r.archived,
            "new": r.new,
            "shift": r.shift,
            "shift_in_seed_sd": r.shift_in_sd,
        }
        for r in check.runs
    ]
    rows += [
        {
            "level": "pair",
            "contrast": p.contrast,
            "seed": p.seed,
            "n": 1,
            "archived": p.archived,
            "new": p.new,
            "shift": p.shift,
            "shift_in_seed_sd": p.shift_in_sd,
            "shift_in_smallest_effect": p.shift_in_effect,
        }
        for p in check.pairs
    ]
    rows += [
        {
            "level": "contrast",
            "contrast": c.contrast,
            "n": c.n,
            "archived": c.archived_mean,
            "shift": c.mean,
            "ci_low": c.ci_low,
            "ci_high": c.ci_high,
            "p": c.p,
            "holm_p": c.holm_p,
            "mde_nats": c.mde_nats,
            "seed_sd": c.seed_sd,
            "shift_in_seed_sd": c.mean_in_sd,
            "shift_in_smallest_effect": c.mean_in_effect,
            "mde_level": c.mde_level,
            "power_at_effect": c.power_at_effect,
            "tost_p": c.tost_p,
            "bias_bound": c.bound,
            "pairs_to_exclude": c.pairs_to_exclude,
            "var_ratio": c.var_ratio,
            "var_ratio_low": c.var_ratio_low,
            "var_ratio_high": c.var_ratio_high,
            "corr": c.corr,
            "corr_low": c.corr_low,
            "corr_high": c.corr_high,
        }
        for c in check.contrasts
    ]
    out = io.StringIO()
    writer = csv.DictWriter(out, CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({**base, **{k: repr(v) if isinstance(v, float) else v for k, v in row.items()}})
    return out.getvalue()


def render_json(check: RetrainCheck, machine: dict, archive_name: str) -> str:
    """Everything as one JSON object: ``archive`` (its file name only), ``machine`` (with the re-training
    commit, numerics and hardware class), the check's fields."""
    data = _no_nan({"archive": archive_name, "machine": machine, **asdict(check)})
    return json.dumps(data, indent=1, sort_keys=True, allow_nan=False) + "\n"


def _no_nan(x):
    """``x`` with every NaN or infinite float as None (JSON has neither)."""
    if isinstance(x, dict):
        return {k: _no_nan(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_no_nan(v) for v in x]
    return None if isinstance(x, float) and not math.isfinite(x) else x


__all__ = [
    "CSV_COLUMNS",
    "identity_line",
    "render_csv",
    "render_json",
    "render_text",
    "settings_phrase",
    "verdict_sentence",
]
