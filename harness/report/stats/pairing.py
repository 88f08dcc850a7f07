"""Pair runs by seed under one frozen protocol (DESIGN section 4 and 6).

A *pair* is two finished runs of different variants with the same size, budget, seed
and ``protocol_hash``. This module turns the ``final`` and ``runs`` frames of one grid
into paired sets per comparison (treatment - parent, each control - parent, treatment
- each control, parent - each reference), and keeps account of everything that is left
out: failed, diverged or unfinished runs, duplicated runs, protocol mismatches, and the
seeds each comparison is missing. It computes no statistics.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

import polars as pl

from harness.common.terms import ROLES, UNKNOWN, axes_label, axis_text, config_diff
from harness.models.sizes import SIZES

FINAL_COLUMNS = ("run_id", "variant", "role", "seed", "size", "budget_tokens", "protocol_hash", "val_nll")
RUNS_COLUMNS = ("run_id", "variant", "role", "seed", "size", "budget_tokens", "protocol_hash", "status")
AA_VARIANTS = ("dup_route_tied",)  # built-in A/A checks (== parent in exact arithmetic)
_VARIANT_KEYS = ("variant", "role", "run_id")  # config keys that differ between paired runs by design


class RunKey(NamedTuple):
    """Where a run sits in the grid: variant, size, budget (tokens) and seed (a dict key, read by name)."""

    variant: str
    size: str
    budget_tokens: int
    seed: int


def run_key(row: dict) -> RunKey:
    """The :class:`RunKey` of a ``final``/``runs`` row."""
    return RunKey(row["variant"], row["size"], row["budget_tokens"], row["seed"])


class ProtocolMismatchError(ValueError):
    """Runs paired by seed have different ``protocol_hash`` values (DESIGN section 4)."""


class NoParentError(ValueError):
    """The grid's runs have no parent variant (yet): nothing can be paired."""


@dataclass(frozen=True, slots=True)
class Pair:
    """One matched pair: same size, budget, seed and protocol hash (NLL in nats/token)."""

    comparison: str
    size: str
    budget_tokens: int
    seed: int
    run_first: str
    run_second: str
    nll_first: float
    nll_second: float
    diff: float  # nll_first - nll_second


@dataclass(frozen=True, slots=True)
class LeftOut:
    """A run (or, for a protocol mismatch, a pair ``run_a|run_b``) kept out of every statistic."""

    run_id: str
    variant: str
    seed: int | None
    size: str
    budget_tokens: int | None
    status: str
    reason: str

    @classmethod
    def run(cls, row: dict, status: str, reason: str) -> LeftOut:
        """One run left out: ``row`` holds its ``run_id``, ``variant``, ``seed``, ``size`` and ``budget_tokens``."""
        return cls(
            row["run_id"], row["variant"], row["seed"], row["size"], row["budget_tokens"], status, reason
        )

    @classmethod
    def pair(
        cls, a: dict, b: dict, label: str, seed: int, size: str, budget: int | None, reason: str
    ) -> LeftOut:
        """A pair of runs ``a`` and ``b`` of comparison ``label`` left out together (``run_a|run_b``)."""
        return cls(f"{a['run_id']}|{b['run_id']}", label, seed, size, budget, "pair", reason)


@dataclass(frozen=True, slots=True)
class PairedSet:
    """The pairs of one comparison ``first - second`` at one size and budget.

    ``kind`` is ``treatment_vs_parent``, ``control_vs_parent``, ``treatment_vs_control``
    or ``parent_vs_reference``. ``missing`` names each expected seed without a pair and
    why; ``code_versions`` are the distinct ``runs.code_version`` values of the pairs.
    """

    comparison: str
    first: str
    second: str
    kind: str
    size: str
    budget_tokens: int
    pairs: tuple[Pair, ...]
    missing: tuple[str, ...]
    code_versions: tuple[str, ...]

    @property
    def seeds(self) -> tuple[int, ...]:
        return tuple(p.seed for p in self.pairs)


@dataclass(frozen=True, slots=True)
class Pairing:
    """Result of :func:`pair_runs`: roles, paired sets, left-out runs and warnings.

    ``usable`` is the ``final`` frame restricted to runs that may enter statistics
    (finite NLL, not duplicated); the mixed model uses it.
    """

    parent: str
    treatment: str | None
    controls: tuple[str, ...]
    references: tuple[str, ...]
    cells: tuple[tuple[str, int], ...]  # (size, budget_tokens)
    sets: tuple[PairedSet, ...]
    left_out: tuple[LeftOut, ...]
    warnings: tuple[str, ...]
    usable: pl.DataFrame

    @property
    def pairs(self) -> tuple[Pair, ...]:
        return tuple(p for s in self.sets for p in s.pairs)


def _require_columns(name: str, frame: pl.DataFrame, columns: tuple[str, ...]) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"frame {name!r} lacks column(s) {missing}; it has {frame.columns}")


def training_steps(config: str | dict | None) -> int | None:
    """Optimiser steps of one run, read from its ``runs.config`` (JSON string or dict).

    The runner stores ``total_steps`` (``budget_tokens // batch_tokens``, harness/train/runner.py);
    older or synthetic configs fall back to ``budget_tokens // train.batch_tokens``.
    Returns None when neither is present or the JSON is unreadable.
    """
    try:
        cfg = json.loads(config) if isinstance(config, str) else config
    except json.JSONDecodeError:
        return None
    if not isinstance(cfg, dict):
        return None
    steps = cfg.get("total_steps")
    if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0:
        return steps
    train = cfg.get("train") if isinstance(cfg.get("train"), dict) else {}
    budget, batch = cfg.get("budget_tokens"), train.get("batch_tokens")
    if isinstance(budget, int) and isinstance(batch, int) and batch > 0 and budget >= batch:
        return budget // batch
    return None


def steps_by_run(runs: pl.DataFrame) -> dict[str, int]:
    """``run_id -> training steps`` for every run whose config states them (see :func:`training_steps`)."""
    if "config" not in runs.columns:
        return {}
    out = {}
    for run_id, cfg in runs.select("run_id", "config").iter_rows():
        steps = training_steps(cfg)
        if steps is not None:
            out[run_id] = steps
    return out


#: Between a size preset and each axis value in a cell's ``size`` label (:func:`cell_size`).
AXIS_SEP = "@"


def cell_size(size: str, axes: Mapping | None) -> str:
    """The ``size`` a report keys a cell by: the preset, then ``@KEY=VALUE`` per axis value of a grid with
    ``[axes]`` (``tiny@lr=0.001``; DESIGN section 1.2), so every statistic keyed by (size, budget) keeps each
    axis value's runs apart; the preset alone without axes."""
    return size + "".join(f"{AXIS_SEP}{k}={axis_text(v)}" for k, v in (axes or {}).items())


def split_cell_size(label: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """``(preset, ((KEY, VALUE text), ...))`` of a :func:`cell_size` label."""
    preset, *parts = str(label).split(AXIS_SEP)
    return preset, tuple(tuple(p.split("=", 1)) for p in parts)  # type: ignore[misc]


def cell_name(size: str, budget: str) -> str:
    """``"Size tiny, budget 4_096 tokens, lr 0.001"``: a cell as its banner names it (``budget``: the budget
    as the caller writes it)."""
    preset, axes = split_cell_size(size)
    return f"Size {preset}, budget {budget} tokens" + (f", {axes_label(axes)}" if axes else "")


def with_axis_sizes(runs: pl.DataFrame, final: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``runs`` and ``final`` with the ``size`` of every run of a grid with ``[axes]`` its :func:`cell_size`
    label, read from ``runs.config``'s ``axes``; unchanged frames when no run has axes."""
    if "config" not in runs.columns or runs.height == 0:
        return runs, final
    labels = {}
    for rid, size, config in runs.select("run_id", "size", "config").iter_rows():
        try:
            axes = json.loads(config).get("axes") if config else None
        except (json.JSONDecodeError, AttributeError):
            axes = None
        if axes:
            labels[rid] = cell_size(size, axes)
    if not labels:
        return runs, final

    def relabel(frame: pl.DataFrame) -> pl.DataFrame:
        if frame.height == 0:
            return frame
        new = [labels.get(r, s) for r, s in frame.select("run_id", "size").iter_rows()]
        return frame.with_columns(pl.Series("size", new, dtype=pl.Utf8))

    return relabel(runs), relabel(final)


def cell_order(cell: tuple[str, int | None]) -> tuple:
    """Sort key of a (size, budget_tokens) cell: preset sizes smallest first (:data:`harness.models.sizes.SIZES`'
    order, DESIGN section 2), then budget, then axis values (numbers by value)."""
    size, budget = cell
    preset, axes = split_cell_size(size)
    order = list(SIZES)
    rank = order.index(preset) if preset in order else len(order)
    return (rank, preset, budget or 0, tuple((k, _value_key(v)) for k, v in axes))


def _value_key(text: str) -> tuple:
    try:
        return (0, float(text), "")
    except ValueError:
        return (1, 0.0, text)


def comparisons_for(
    parent: str, treatment: str | None, controls: tuple[str, ...], references: tuple[str, ...]
) -> list[tuple[str, str, str]]:
    """(first, second, kind) for every comparison of DESIGN section 6, in report order."""
    out = []
    if treatment:
        out.append((treatment, parent, "treatment_vs_parent"))
    out += [(c, parent, "control_vs_parent") for c in controls]
    if treatment:
        out += [(treatment, c, "treatment_vs_control") for c in controls]
    out += [(parent, r, "parent_vs_reference") for r in references]
    return out


def _roles(final: pl.DataFrame, runs: pl.DataFrame) -> dict[str, str]:
    both = pl.concat([final.select("variant", "role"), runs.select("variant", "role")]).unique()
    roles: dict[str, str] = {}
    for variant, role in sorted(both.iter_rows()):
        if variant in roles and roles[variant] != role:
            raise ValueError(f"variant {variant!r} has two roles: {roles[variant]!r} and {role!r}")
        roles[variant] = role
    bad = {v: r for v, r in roles.items() if r not in ROLES}
    if bad:
        raise ValueError(f"unknown role(s) {bad}; allowed: {', '.join(ROLES)}")
    return roles


def _left_out_runs(final: pl.DataFrame, runs: pl.DataFrame) -> list[LeftOut]:
    """Every run that cannot enter a statistic: not done, failed, diverged, or NaN NLL."""
    out = []
    done_ids = set(final["run_id"].to_list())
    for r in runs.sort("variant", "seed").iter_rows(named=True):
        status = r["status"]
        if status == "done" and r["run_id"] in done_ids:
            continue
        if status in ("failed", "diverged"):
            reason = f"{status}: {r.get('error') or 'no error message stored'}"
        elif status == "done":
            reason = "done but has no final validation NLL (missing from the final view)"
        else:
            reason = f"not finished (status {status})"
        out.append(LeftOut.run(r, status, reason))
    listed = {lo.run_id for lo in out}
    for r in final.iter_rows(named=True):
        v = r["val_nll"]
        if r["run_id"] in listed:
            continue
        if v is None:
            out.append(LeftOut.run(r, "done", "done but no final validation NLL recorded"))
        elif not math.isfinite(v):
            out.append(LeftOut.run(r, "diverged", f"non-finite final val_nll ({v})"))
    return out


def _version_summary(versions: dict[str, str | None]) -> str:
    """'v1 (12 runs), v2 (1 run: r7)': run ids named for the rarer versions (at most 5)."""
    by: dict[str, list[str]] = {}
    for run_id, v in sorted(versions.items()):
        by.setdefault(v or UNKNOWN, []).append(run_id)
    common = max(by, key=lambda v: len(by[v]))
    parts = []
    for v, ids in sorted(by.items(), key=lambda kv: -len(kv[1])):
        names = "" if v == common else ": " + ", ".join(ids[:5]) + (", ..." if len(ids) > 5 else "")
        parts.append(f"{v} ({len(ids)} run{'s' if len(ids) != 1 else ''}{names})")
    return ", ".join(parts)


def of_grid(frame: pl.DataFrame, grid: str | None) -> pl.DataFrame:
    """The rows of ``frame`` from grid ``grid`` (all rows when ``grid`` is None or the frame has no ``grid``
    column): the one grid filter of the report."""
    return frame.filter(pl.col("grid") == grid) if grid is not None and "grid" in frame.columns else frame


def pair_runs(
    final: pl.DataFrame,
    runs: pl.DataFrame,
    *,
    grid: str | None = None,
    allow_partial: bool = False,
    aa_variants: tuple[str, ...] = AA_VARIANTS,
) -> Pairing:
    """Build every paired set of one grid.

    Args:
        final: one row per finished run: run_id, variant, role, seed, size,
            budget_tokens, protocol_hash, val_nll (nats/token) [, grid].
        runs: one row per run (any status): run_id, variant, role, seed, size,
            budget_tokens, protocol_hash, status [, error, code_version, config, grid].
        grid: keep only rows of this grid (where the frame has a ``grid`` column).
        allow_partial: a protocol mismatch or a duplicated run becomes a warning and
            the pair/run is left out, instead of an error.
        aa_variants: A/A controls; they are listed after the other controls.

    Raises:
        ValueError: a required column is missing; no runs; not exactly one parent
            (:class:`NoParentError` when there is none); more than one treatment; a variant
            with two roles or an unknown role; two finished runs of one
            variant/size/budget/seed (unless ``allow_partial``).
        ProtocolMismatchError: paired runs differ in ``protocol_hash`` (unless
            ``allow_partial``); the message names the differing config fields.
    """
    _require_columns("final", final, FINAL_COLUMNS)
    _require_columns("runs", runs, RUNS_COLUMNS)
    final, runs = of_grid(final, grid), of_grid(runs, grid)
    if final.height == 0 and runs.height == 0:
        raise ValueError(f"no runs found for grid {grid!r}")
    parent, treatment, controls, references = _variants_by_role(_roles(final, runs), aa_variants)
    warn: list[str] = []
    left_out = _left_out_runs(final, runs)
    usable = _usable_runs(final, left_out, allow_partial, warn)
    cells = _cells(final, runs)
    known = _KnownRuns(
        run_info={r["run_id"]: r for r in runs.iter_rows(named=True)},
        values={run_key(r): r for r in usable.iter_rows(named=True)},
        why_missing={RunKey(lo.variant, lo.size, lo.budget_tokens, lo.seed): lo.reason for lo in left_out},
    )
    sets: list[PairedSet] = []
    mismatches: list[str] = []
    for size, budget in cells:
        sets += _pair_cell(
            size,
            budget,
            comparisons_for(parent, treatment, controls, references),
            known,
            left_out,
            mismatches,
            warn,
        )
    if mismatches:
        if not allow_partial:
            more = f" | and {len(mismatches) - 5} more" if len(mismatches) > 5 else ""
            raise ProtocolMismatchError(
                f"{len(mismatches)} pair(s) differ in protocol_hash (only runs with the same protocol "
                f"are paired; --allow-partial leaves them out): " + " | ".join(mismatches[:5]) + more
            )
        warn += [f"protocol mismatch, pair left out (--allow-partial): {m}" for m in mismatches]
    return Pairing(
        parent=parent,
        treatment=treatment,
        controls=controls,
        references=references,
        cells=cells,
        sets=tuple(sets),
        left_out=tuple(left_out),
        warnings=tuple(warn),
        usable=usable,
    )


def _cells(final: pl.DataFrame, runs: pl.DataFrame) -> tuple[tuple[str, int], ...]:
    """Every (size, budget_tokens) of the grid's runs, finished or not, in report order (:func:`cell_order`)."""
    both = pl.concat([final.select("size", "budget_tokens"), runs.select("size", "budget_tokens")])
    return tuple(sorted(set(both.iter_rows()), key=cell_order))


def _variants_by_role(
    roles: dict[str, str], aa_variants: tuple[str, ...]
) -> tuple[str, str | None, tuple[str, ...], tuple[str, ...]]:
    """(parent, treatment or None, controls with the A/A checks last, references) of a grid's roles.

    Raises:
        NoParentError: no parent; ValueError: several parents or several treatments.
    """
    parents = [v for v, r in roles.items() if r == "parent"]
    treatments = [v for v, r in roles.items() if r == "treatment"]
    if not parents:
        raise NoParentError(f"need exactly one parent variant, found none (roles: {roles})")
    if len(parents) != 1:
        raise ValueError(f"need exactly one parent variant, found {parents} (roles: {roles})")
    if len(treatments) > 1:
        raise ValueError(f"at most one treatment variant is supported, found {treatments}")
    # A/A checks last among the controls, so the real controls lead every table.
    controls = tuple(
        sorted((v for v, r in roles.items() if r == "control"), key=lambda v: (v in aa_variants, v))
    )
    references = tuple(sorted(v for v, r in roles.items() if r == "reference"))
    return parents[0], (treatments[0] if treatments else None), controls, references


def _usable_runs(
    final: pl.DataFrame, left_out: list[LeftOut], allow_partial: bool, warn: list[str]
) -> pl.DataFrame:
    """The finished runs that may enter a statistic: a finite NLL, not left out, not duplicated.

    A duplicated run (two finished runs of one variant/size/budget/seed) raises ValueError,
    or with ``allow_partial`` is appended to ``left_out`` with a line in ``warn``.
    """
    # Only finite NLLs of runs not marked failed/diverged/unfinished in `runs` may enter.
    usable = final.filter(
        pl.col("val_nll").is_not_null()
        & pl.col("val_nll").is_finite()
        & ~pl.col("run_id").is_in([lo.run_id for lo in left_out])
    )
    dup = (
        usable.group_by("variant", "size", "budget_tokens", "seed")
        .agg(pl.col("run_id"))
        .filter(pl.col("run_id").list.len() > 1)
    )
    if not dup.height:
        return usable
    desc = "; ".join(
        f"{r['variant']} size={r['size']} budget_tokens={r['budget_tokens']} "
        f"seed={r['seed']}: runs {sorted(r['run_id'])}"
        for r in dup.iter_rows(named=True)
    )
    if not allow_partial:
        raise ValueError(f"more than one finished run per variant/size/budget/seed: {desc}")
    warn.append(f"duplicated runs left out (--allow-partial): {desc}")
    bad_ids = [i for ids in dup["run_id"].to_list() for i in ids]
    for r in usable.filter(pl.col("run_id").is_in(bad_ids)).iter_rows(named=True):
        left_out.append(LeftOut.run(r, "done", "duplicated run of this variant and seed"))
    return usable.filter(~pl.col("run_id").is_in(bad_ids))


@dataclass(frozen=True, slots=True)
class _KnownRuns:
    """What pairing looks runs up in: rows by run id, usable rows by (variant, size, budget, seed),
    and why a (variant, size, budget, seed) has no usable run."""

    run_info: dict[str, dict]
    values: dict[RunKey, dict]
    why_missing: dict[RunKey, str]


def _pair_cell(
    size: str,
    budget: int,
    comparisons: list[tuple[str, str, str]],
    known: _KnownRuns,
    left_out: list[LeftOut],
    mismatches: list[str],
    warn: list[str],
) -> list[PairedSet]:
    """The paired sets of one cell; a protocol mismatch goes to ``mismatches`` and ``left_out``, a
    mix of code versions among the cell's pairs to ``warn``."""
    # Expected seeds: every seed any variant has at this size and budget, finished or not.
    expected = sorted(
        {k.seed for k in known.values if (k.size, k.budget_tokens) == (size, budget)}
        | {
            lo.seed
            for lo in left_out
            if (lo.size, lo.budget_tokens) == (size, budget) and lo.seed is not None
        }
    )
    cell_versions: dict[str, str | None] = {}  # run_id -> code_version, over all pairs
    sets = []
    for first, second, kind in comparisons:
        label = f"{first} - {second}"
        pairs, missing = [], []
        for seed in expected:
            pair = _pair_seed(label, first, second, size, budget, seed, known, left_out, mismatches, missing)
            if pair is not None:
                pairs.append(pair)
        versions = {
            known.run_info.get(r, {}).get("code_version") for p in pairs for r in (p.run_first, p.run_second)
        }
        versions.discard(None)
        for pair in pairs:
            cell_versions.update(
                {r: known.run_info.get(r, {}).get("code_version") for r in (pair.run_first, pair.run_second)}
            )
        sets.append(
            PairedSet(
                comparison=label,
                first=first,
                second=second,
                kind=kind,
                size=size,
                budget_tokens=budget,
                pairs=tuple(pairs),
                missing=tuple(missing),
                code_versions=tuple(sorted(versions)),
            )
        )
    if len(set(cell_versions.values()) - {None}) > 1:
        warn.append(
            f"size={size} budget_tokens={budget}: paired runs mix code versions: "
            + _version_summary(cell_versions)
        )
    return sets


def _pair_seed(
    label: str,
    first: str,
    second: str,
    size: str,
    budget: int,
    seed: int,
    known: _KnownRuns,
    left_out: list[LeftOut],
    mismatches: list[str],
    missing: list[str],
) -> Pair | None:
    """The pair ``first - second`` at one seed, or None with the reason appended to ``missing`` (and, for
    a protocol mismatch, to ``mismatches`` and ``left_out``)."""
    a = known.values.get(RunKey(first, size, budget, seed))
    b = known.values.get(RunKey(second, size, budget, seed))
    if a is None or b is None:
        why = [
            f"{v}: {known.why_missing.get(RunKey(v, size, budget, seed), 'no run')}"
            for v, row in ((first, a), (second, b))
            if row is None
        ]
        missing.append(f"seed {seed} ({'; '.join(why)})")
        return None
    if a["protocol_hash"] != b["protocol_hash"]:
        fields = config_diff(
            known.run_info.get(a["run_id"], {}).get("config"),
            known.run_info.get(b["run_id"], {}).get("config"),
            values=True,
            ignore=_VARIANT_KEYS,
        )
        named = "; ".join(fields) if fields else "none outside the variant keys"
        mismatches.append(
            f"{label} size={size} budget_tokens={budget} seed={seed}: protocol_hash "
            f"{a['protocol_hash']} (run {a['run_id']}) != {b['protocol_hash']} "
            f"(run {b['run_id']}); differing fields: {named}"
        )
        missing.append(f"seed {seed} (protocol mismatch: {named})")
        left_out.append(LeftOut.pair(a, b, label, seed, size, budget, f"protocol mismatch: {named}"))
        return None
    return Pair(
        comparison=label,
        size=size,
        budget_tokens=budget,
        seed=seed,
        run_first=a["run_id"],
        run_second=b["run_id"],
        nll_first=a["val_nll"],
        nll_second=b["val_nll"],
        diff=a["val_nll"] - b["val_nll"],
    )
