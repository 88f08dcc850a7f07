"""``harness retrain``'s output: the cross-machine A/A check as Markdown text, CSV rows and a JSON object.

Reads only a :class:`harness.report.stats.retrain_check.RetrainCheck` and the machine record the command gives
(CPU model, cores, torch, workers, threads; the re-training commit, numerics and hardware class, the archive's
numerics and whether the runs re-trained with them: :func:`harness.scheduling.retrain.identity`): no absolute
path and no host name is written.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import asdict

from harness.report.stats.retrain_check import BIAS, BIT_IDENTICAL, RetrainCheck

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
    "commit",
    "numerics",
    "archive_numerics",
)


def _f(x: float, digits: int = 4) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:+.{digits}f}"


def verdict_sentence(check: RetrainCheck) -> str:
    """The answer in one sentence."""
    if check.verdict == BIT_IDENTICAL:
        return "bit-identical: every re-trained run's final val NLL equals its archived value exactly."
    n = max(c.n for c in check.contrasts)
    worst = min(check.contrasts, key=lambda c: c.holm_p)
    mdes = [c.mde_nats for c in check.contrasts if math.isfinite(c.mde_nats)]
    mde = (
        "n/a"
        if not mdes
        else f"{min(mdes):.4f}"
        if min(mdes) == max(mdes)
        else f"{min(mdes):.4f} to {max(mdes):.4f}"
    )
    if check.verdict == BIAS:
        return (
            f"a bias: the paired differences of {worst.contrast} moved by {_f(worst.mean)} nats/token on average "
            f"(95 % interval {_f(worst.ci_low)} to {_f(worst.ci_high)}, Holm p {worst.holm_p:.3g}): this machine "
            "moves one variant against its partner; do not pool its runs with the archive's."
        )
    alone = [c for c in check.contrasts if c.holm_p >= check.alpha and (c.ci_low > 0 or c.ci_high < 0)]
    caveat = "".join(
        f" Alone (without Holm), the 95 % interval of {c.contrast} excludes 0 ({_f(c.ci_low)} to {_f(c.ci_high)}, "
        f"p {c.p:.3g}): a candidate bias that more pairs would confirm or dismiss."
        for c in alone
    )
    return (
        f"a fresh draw: every contrast's mean shift of the paired differences is consistent with 0 "
        f"(Holm p >= {check.alpha:g}; smallest Holm p {worst.holm_p:.3g}, {worst.contrast}); at {n} pairs this "
        f"check detects a mean shift of {mde} nats/token (MDE, alpha {check.alpha:g}, power {check.power:g}); "
        "the runs moved like new draws, not like a biased machine." + caveat
    )


def identity_line(machine: dict) -> str:
    """Which code re-trained the runs (commit, numerics) and what the check therefore measures (DESIGN 13)."""
    commit, numerics = machine.get("commit", "unknown"), machine.get("numerics", "unknown")
    archive = machine.get("archive_numerics", "unknown")
    if machine.get("archive_numerics_used"):
        return f"Re-trained by commit {commit} with numerics {numerics}, the archive's: the check compares machines."
    return (
        f"Re-trained by commit {commit} with numerics {numerics}; the archive's numerics are {archive}, and not "
        "every run re-trained with its own (unknown, or a revision this code no longer has): the check measures "
        "code plus machine."
    )


def render_text(check: RetrainCheck, machine: dict, archive_name: str) -> str:
    """The Markdown text ``harness retrain`` prints (and a study commits beside its report)."""
    eff = check.smallest_effect
    lines = [
        f"# Cross-machine A/A check: {archive_name}",
        "",
        f"Re-trained here: {len(check.runs)} runs (seeds {' '.join(map(str, sorted({r.seed for r in check.runs})))}) "
        f"on {machine['cpu_model']} ({machine['cpu_cores']} cores), "
        f"torch {machine['torch']}, {machine['workers']} workers x {machine['threads_per_worker']} threads; "
        f"hardware class {machine.get('hardware', 'unknown')}.",
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
    lines += [
        "",
        "## Mean shift of the paired differences, per contrast",
        "",
        "| contrast | pairs | mean shift | 95 % interval | p | Holm p | MDE | seed sd (seeds) | /sd | /eff |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {c.contrast} | {c.n} | {_f(c.mean)} | {_f(c.ci_low)} to {_f(c.ci_high)} | {c.p:.3g} | {c.holm_p:.3g} "
        f"| {c.mde_nats:.4f} | {c.seed_sd:.4f} ({c.archive_seeds}) | {_f(c.mean_in_sd, 2)} | {_f(c.mean_in_effect, 2)} |"
        for c in check.contrasts
    ]
    lines += [
        "",
        f"Method: per contrast a two-sided one-sample t-test of the shifts (H0: mean 0), Holm across the "
        f"{len(check.contrasts)} contrasts at alpha {check.alpha:g}; MDE by the noncentral t at power "
        f"{check.power:g} from the shifts' own sd (harness/report/stats/retrain_check.py, DESIGN section 13).",
    ]
    return "\n".join(lines) + "\n"


def render_csv(check: RetrainCheck, machine: dict) -> str:
    """One row per run, per (contrast, seed) and per contrast (``level`` = run / pair / contrast), each with
    the verdict, the machine's CPU model, torch and threads, and the re-training commit and numerics with the
    archive's numerics (:data:`CSV_COLUMNS`)."""
    base = {
        "verdict": check.verdict,
        "cpu_model": machine["cpu_model"],
        "hardware": machine.get("hardware", "unknown"),
        "torch": machine["torch"],
        "threads_per_worker": machine["threads_per_worker"],
        "commit": machine.get("commit", "unknown"),
        "numerics": machine.get("numerics", "unknown"),
        "archive_numerics": machine.get("archive_numerics", "unknown"),
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
    """Everything as one JSON object: ``archive`` (its file name only), ``machine``, the check's fields."""
    data = _no_nan({"archive": archive_name, "machine": machine, **asdict(check)})
    return json.dumps(data, indent=1, sort_keys=True, allow_nan=False) + "\n"


def _no_nan(x):
    """``x`` with every NaN float as None (JSON has no NaN)."""
    if isinstance(x, dict):
        return {k: _no_nan(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_no_nan(v) for v in x]
    return None if isinstance(x, float) and math.isnan(x) else x


__all__ = ["CSV_COLUMNS", "identity_line", "render_csv", "render_json", "render_text", "verdict_sentence"]
