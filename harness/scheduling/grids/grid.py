"""Ablation grid specs (DESIGN section 1.2): read a grid TOML, check it, expand it into runs.

A grid is variants x seeds x budgets x sizes. Every variant plays one *role*: the
single ``parent``, ``treatment`` s, ``control`` s, and optional ``reference`` s::

    name = "rd_controls_small"
    corpus = "../../shared/data/fineweb_edu_sample"   # relative: to this file's folder
    sizes = ["small"]
    seeds = [0, 1, 2]
    budgets_tokens = [200_000]       # every budget is its own run (its own LR schedule)

    [variants]                       # variant name = role
    block_attnres = "parent"
    rd_attnres = "treatment"
    param_matched = "control"

    [budgets_by_role]                # optional: a role runs only at these budgets
    control = [200_000]
    [sizes_by_role]                  # optional: a role runs only at these sizes
    reference = ["small"]

    [train]                          # optional TrainConfig overrides (harness.design.config)
    eval_every_tokens = 50_000
    [train.rd_attnres]               # optional: overrides of one variant (changes its protocol)
    lr = 2.5e-3

    [tuned]                          # optional: variants that also run at their own tuned settings
    block_attnres = "tune:parent_small"          # the best params of a tuning study (DESIGN 9)
    rd_attnres = { lr = 3e-3, warmup_frac = 0.1 }  # or explicit params (harness.scheduling.tuning)

    [analysis]                       # optional analysis plan (harness.design.analysis_plan, DESIGN section 6)
    min_effect_nats = 0.01

    [schedule]                       # optional: how workers take the runs (harness.scheduling.queue.hardware_pairs)
    pair_hardware = "same"           # default; "any": a seed's runs may train on different hardware classes

    [axes]                           # optional: protocol settings swept, each value its own cell
    lr = [1e-3, 4e-3]                # (harness.scheduling.grids.checks.AXIS_KEYS; checked as [train] is)

    [factorial]                      # optional 2 x 2 design over four variants (harness.design.factorial, DESIGN 12)
    factors = ["offset", "decoupled_v"]
    levels = { block_attnres = [0, 0], param_matched = [1, 0], rd_attnres = [0, 1], rd_offset = [1, 1] }

``[train.VARIANT]`` tables override ``[train]`` for one variant; that variant's runs then
have another protocol than the parent's, and a report refuses to pair them (naming the
fields). To ask whether a gain survives giving each side its best settings, list the
variants in ``[tuned]`` instead: each listed variant also runs, at every cell and seed,
with its tuned parameters on top of its ``[train]``; those runs have ids ending in
``:tuned`` and :attr:`harness.design.config.RunConfig.tuned` set, and the report pairs them in
the robustness row "treatment (tuned) - parent (tuned)". A ``"tune:NAME"`` entry takes
the best parameters of that tuning study in the queue's storage when the grid is queued
(:func:`resolve_tuned`); a table gives the parameters (space names: a TrainConfig field or
``warmup_frac``). Grid seeds stay below :data:`harness.common.terms.TUNE_SEED_BASE`, the tuning
trials' seeds.

``[budgets_by_role]`` / ``[sizes_by_role]`` map a role to a subset of the grid's
``budgets_tokens`` / ``sizes``; roles not listed run at all of them. Paired statistics
need the parent wherever a treatment or control runs, so a treatment or control at a
(size, budget) without the parent is an error.

``[axes]`` sweeps protocol settings: a *cell* is (size, budget, axis values), every combination of
the axes' values (in file order) is its own cell, with its own pairs and verdict, the value set in
the run's ``[train]`` (so in its protocol hash) and named in its id. A key of ``[axes]`` may not also
be set by ``[train]`` / ``[train.VARIANT]``, nor be a ``[tuned]`` setting.

Expansion gives one run config per (size, budget, axis values, variant, seed), ordered size, then
budget (smallest first, so early-budget results arrive first), then axis values, then seed, then
variant (parent, treatment, controls, references): finishing seed 0 of every variant before
seed 1 gives complete pairs early. The run id is ``grid:size:variant:s<seed>:<budget>``, then
``:KEY=VALUE`` per axis (``...:4096:lr=0.001``; a grid without ``[axes]`` keeps the ids it had).

The analysis plan (``[analysis]``, defaults where absent) is stored in every run config
under ``"analysis"``; it is not part of the protocol hash, and :func:`check_plan_unchanged`
refuses to queue a grid whose plan differs from the one its queued runs carry.

The checks of its tables are :mod:`harness.scheduling.grids.checks`'s, a corpus's spellings
:mod:`harness.corpus.spec`'s.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness.common.terms import DEFAULT_PAIR_HARDWARE, ROLES
from harness.corpus.spec import choose_corpus, resolve_corpus
from harness.design.analysis_plan import AnalysisPlan, parse_plan, plan_diff
from harness.design.config import RunConfig
from harness.design.factorial import parse_factorial
from harness.models.sizes import SIZES
from harness.scheduling.grids.checks import (
    check_axes,
    check_factorial_cells,
    check_keys,
    check_pairing,
    check_seeds,
    check_train,
    check_tuned,
    check_variants,
    grid_texts,
    int_list,
    parse_schedule,
    roles_table,
    str_list,
    train_tables,
)
from harness.scheduling.tuning import train_overrides

_TOML_POS_RE = re.compile(r"\(at line (\d+), column (\d+)\)")


@dataclass(frozen=True)
class Cell:
    """One run of a grid: the (size, budget, variant, seed) point, the variant's role and the cell's axis
    values (``((KEY, value), ...)`` in ``[axes]`` order; empty without ``[axes]``)."""

    size: str
    budget_tokens: int
    variant: str
    role: str
    seed: int
    axes: tuple[tuple[str, object], ...] = ()


@dataclass(frozen=True)
class Grid:
    """A checked grid spec (see the module docstring for the file format).

    Attributes:
        name: grid name; the first field of every run id.
        corpus: corpus spec as written in the file (possibly relative: to the file's folder).
        sizes: size presets, in file order.
        seeds: seeds, in file order.
        budgets_tokens: budgets in tokens, ascending.
        variants: variant name -> role, in file order.
        budgets_by_role: role -> the budgets that role runs at (every role present).
        sizes_by_role: role -> the sizes that role runs at (every role present).
        train: ``[train]`` overrides exactly as written (preset defaults are not merged in),
            without the per-variant tables.
        train_by_variant: variant -> its ``[train.VARIANT]`` overrides.
        tuned: variant -> its ``[tuned]`` entry: ``"tune:NAME"`` or a table of params.
        analysis: the checked ``[analysis]`` plan (defaults for keys not written).
        pair_hardware: ``[schedule] pair_hardware``: ``same`` (both runs of a seed on one hardware class,
            the default) or ``any`` (:mod:`harness.scheduling.queue.hardware_pairs`).
        description: free text.
        path: the file it was read from, if any.
        axes: ``[axes]``: setting -> its values, in file order (empty: no axis).
    """

    name: str
    corpus: str
    sizes: tuple[str, ...]
    seeds: tuple[int, ...]
    budgets_tokens: tuple[int, ...]
    variants: dict[str, str]
    budgets_by_role: dict[str, tuple[int, ...]]
    sizes_by_role: dict[str, tuple[str, ...]]
    train: dict = field(default_factory=dict)
    train_by_variant: dict = field(default_factory=dict)
    tuned: dict = field(default_factory=dict)
    analysis: AnalysisPlan = field(default_factory=AnalysisPlan)
    pair_hardware: str = DEFAULT_PAIR_HARDWARE
    description: str = ""
    path: Path | None = None
    axes: dict[str, tuple] = field(default_factory=dict)

    @property
    def parent(self) -> str:
        """Name of the parent variant."""
        return next(v for v, r in self.variants.items() if r == "parent")

    def choose_corpus(self, cli: str | None) -> tuple[str | None, str]:
        """``(corpus, source)`` of a command reading this grid: ``--corpus`` (``cli``), else
        ``$HARNESS_CORPUS``, else this grid's ``corpus`` relative to its file's folder
        (:func:`harness.corpus.spec.choose_corpus`, the one precedence)."""
        folder = self.path.resolve().parent if self.path is not None else None
        where = (
            f"key 'corpus' of {self.path}" if self.path is not None else f"key 'corpus' of grid {self.name}"
        )
        return choose_corpus(cli, self.corpus, folder=folder, where=where)

    def train_for(self, variant: str) -> dict:
        """The training overrides of ``variant``'s runs: ``[train]``, then ``[train.VARIANT]``."""
        return {**self.train, **self.train_by_variant.get(variant, {})}

    def axis_points(self) -> list[tuple[tuple[str, object], ...]]:
        """Every combination of the axes' values, ``((KEY, value), ...)``, the first axis slowest (one empty
        point without ``[axes]``)."""
        points: list[tuple[tuple[str, object], ...]] = [()]
        for key, values in self.axes.items():
            points = [p + ((key, v),) for p in points for v in values]
        return points

    def cells(self) -> list[Cell]:
        """All untuned runs, in queue order: size, budget (ascending), axis values, seed, variant by role."""
        by_role = sorted(self.variants.items(), key=lambda vr: ROLES.index(vr[1]))  # stable
        out = []
        for size in self.sizes:
            for budget in self.budgets_tokens:
                for point in self.axis_points():
                    for seed in self.seeds:
                        for variant, role in by_role:
                            if size in self.sizes_by_role[role] and budget in self.budgets_by_role[role]:
                                out.append(Cell(size, budget, variant, role, seed, point))
        return out

    def expand(
        self,
        corpus: str | None = None,
        cwd: str | os.PathLike | None = None,
        tuned: dict[str, dict] | None = None,
    ) -> list[RunConfig]:
        """Run configs, one per cell (see :meth:`cells` for the order); after each seed's
        runs of a cell, that seed's ``[tuned]`` runs (same role order).

        Args:
            corpus: overrides the grid's corpus (``--corpus`` / ``$HARNESS_CORPUS``).
            cwd: folder a relative corpus is resolved against; default: the current
                directory for ``corpus``, the grid file's folder for the grid's own (so a
                grid queues the same corpus from any directory).
            tuned: the ``[tuned]`` entries resolved (:func:`resolve_tuned`): variant ->
                ``{"source", "params"}``; default: explicit entries only.

        Returns:
            :class:`~harness.design.config.RunConfig` s with ``corpus`` absolute (or an ``hf:``
            spec), ``train`` the grid's overrides only (a tuned run: plus its tuned params)
            and ``analysis`` the plan (:meth:`harness.design.analysis_plan.AnalysisPlan.as_config`).

        Raises:
            ValueError: a variant whose head groups cannot split a size's heads; a
                ``[tuned]`` study entry not resolved.
        """

        if corpus is None and cwd is None and self.path is not None:
            corpus, cwd = self.corpus, self.path.resolve().parent
        resolved = resolve_corpus(corpus if corpus is not None else self.corpus, cwd)
        analysis = self.analysis.as_config()
        tuned = resolve_tuned(self, None) if tuned is None else tuned
        out = []
        cells = self.cells()
        for i, c in enumerate(cells):
            out.append(self._run(c, resolved, analysis))
            seed_cell = _seed_cell(c)
            last_of_seed = i + 1 == len(cells) or _seed_cell(cells[i + 1]) != seed_cell
            if last_of_seed and tuned:  # (the scan is over every cell: skipped when nothing is tuned)
                out += [
                    self._run(t, resolved, analysis, tuned[t.variant])
                    for t in cells
                    if _seed_cell(t) == seed_cell and t.variant in tuned
                ]
        return out

    def _run(self, cell: Cell, corpus: str, analysis: dict, tuned: dict | None = None) -> RunConfig:
        """The run config of ``cell``; with ``tuned`` (a resolved ``[tuned]`` entry) its tuned run."""
        extra = {} if tuned is None else train_overrides(tuned["params"], cell.budget_tokens)
        return RunConfig.create(
            cell.variant,
            cell.size,
            cell.seed,
            cell.budget_tokens,
            corpus,
            grid=self.name,
            role=cell.role,
            train={**self.train_for(cell.variant), **extra},
            analysis=analysis,
            tuned=None
            if tuned is None
            else {"source": tuned["source"], "params": dict(tuned["params"]), "fields": sorted(extra)},
            axes=dict(cell.axes) or None,
        )


def _seed_cell(cell: Cell) -> tuple:
    """``(size, budget, seed, axis values)``: the runs of one seed in one cell, after which its tuned runs follow."""
    return cell.size, cell.budget_tokens, cell.seed, cell.axes


# ----------------------------------------------------------------------------- loading


def load_grid(path: str | os.PathLike) -> Grid:
    """Read and check a grid TOML file.

    Raises:
        FileNotFoundError: no such file.
        ValueError: a folder, not TOML, unknown or missing key, bad type or value, unknown variant
            or role, not exactly one parent, a duplicate key, or a treatment/control
            without the parent at the same size and budget. The message names the file,
            the key and what is allowed.
    """
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{path} is a folder, not a grid file: give the GRID.toml inside it")
    if not path.is_file():
        raise FileNotFoundError(f"grid file {path} not found")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")  # -sig: a byte-order mark (Windows editors) is not TOML
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a TOML grid file (not UTF-8 text)") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(_toml_error(path, text, exc)) from None
    return parse_grid(data, path=path)


def _toml_error(path: Path, text: str, exc: tomllib.TOMLDecodeError) -> str:
    """Turn tomllib's message into one naming the file, the line and, for duplicates, the key."""
    msg = str(exc)
    m = _TOML_POS_RE.search(msg)
    line_no = int(m.group(1)) if m else None
    where = f"{path}: line {line_no}" if line_no else f"{path}"
    if msg.startswith("Cannot overwrite a value") and line_no:
        line = text.splitlines()[line_no - 1]
        key = line.split("=", 1)[0].strip().strip("\"'")
        return (
            f"{where}: duplicate key {key!r}: a key may appear once per table "
            f"(in [variants], list each variant once with one role)"
        )
    if msg.startswith("Cannot declare") and line_no:
        return f"{where}: table {text.splitlines()[line_no - 1].strip()} declared twice"
    return f"{where}: not valid TOML: {_TOML_POS_RE.sub('', msg).strip()}"


def parse_grid(data: dict, *, path: str | os.PathLike | None = None) -> Grid:
    """Check a parsed grid mapping and build a :class:`Grid` (errors as :func:`load_grid`)."""
    where = str(path) if path is not None else "<grid>"

    def err(key: str, msg: str) -> ValueError:
        return ValueError(f"{where}: {key}: {msg}")

    check_keys(data, err)
    name, description, corpus = grid_texts(data, err)
    sizes = str_list(data["sizes"], "sizes", err)
    for s in sizes:
        if s not in SIZES:
            raise err("sizes", f"unknown size {s!r}; valid sizes: {', '.join(SIZES)}")
    seeds = int_list(data["seeds"], "seeds", err, minimum=0)
    budgets = tuple(sorted(int_list(data["budgets_tokens"], "budgets_tokens", err, minimum=1)))
    variants = check_variants(data["variants"], err)
    budgets_by_role = roles_table(data.get("budgets_by_role", {}), "budgets_by_role", budgets, variants, err)
    sizes_by_role = roles_table(data.get("sizes_by_role", {}), "sizes_by_role", sizes, variants, err)
    check_pairing(variants, sizes_by_role, budgets_by_role, err)
    train, by_variant = train_tables(data.get("train", {}), sizes, variants, where, err)
    tuned = check_tuned(data.get("tuned", {}), variants, err)
    check_seeds(seeds, err)
    axes = check_axes(data.get("axes", {}), train, by_variant, tuned, sizes, where, err)
    analysis = parse_plan(
        data.get("analysis", {}), where=where, source="[analysis]" if "analysis" in data else "defaults"
    )
    if "factorial" in data:
        analysis = dataclasses.replace(
            analysis, factorial=parse_factorial(data["factorial"], variants, where=where)
        )
    check_factorial_cells(analysis.factorial, variants, sizes_by_role, budgets_by_role, err)
    pair_hardware = parse_schedule(data.get("schedule", {}), err)
    return Grid(
        name=name,
        corpus=corpus,
        sizes=sizes,
        seeds=seeds,
        budgets_tokens=budgets,
        variants=variants,
        budgets_by_role=budgets_by_role,
        sizes_by_role=sizes_by_role,
        train=dict(train),
        train_by_variant=by_variant,
        tuned=tuned,
        analysis=analysis,
        pair_hardware=pair_hardware,
        description=description,
        path=Path(path) if path is not None else None,
        axes=axes,
    )


def check_plan_unchanged(grid: Grid, queued: dict[str, RunConfig]) -> None:
    """Refuse a grid whose analysis plan differs from the one its queued runs carry.

    The plan is fixed before the runs (DESIGN section 6): once any run of the grid is in
    the queue (any state, failed included), ``[analysis]`` may not change, also for runs
    a re-queue would add (new seeds), since the report reads all of them under one plan.

    Args:
        grid: the grid about to be queued.
        queued: run id -> stored config of the runs already in the queue (any grid;
            only ``grid.name``'s are checked).

    Raises:
        ValueError: naming the grid, the differing ``analysis.KEY`` and the runs.
    """
    new = grid.analysis.as_config()
    for run, config in sorted(queued.items()):
        if config.grid != grid.name:
            continue
        diff = plan_diff(config.analysis, new)
        if diff:
            n = sum(c.grid == grid.name for c in queued.values())
            raise ValueError(
                f"grid {grid.name!r}: {diff[0].split(':')[0]} changed after its runs were queued "
                f"({'; '.join(diff)}; first run {run}, {n} run(s) queued); the analysis plan is fixed "
                "before the runs: undo the change, or give the grid a new `name`"
            )


def resolve_tuned(grid: Grid, best: Callable[[str], tuple[str, dict]] | None) -> dict[str, dict]:
    """The grid's ``[tuned]`` entries as ``variant -> {"source", "params"}``.

    Args:
        grid: the grid.
        best: ``best("tune:NAME") -> (tuned variant, best params)`` from the queue's storage
            (:func:`harness.scheduling.tuning.best_params`); ``None`` where no storage is at
            hand (then a study entry is an error).

    Raises:
        ValueError: a study entry without ``best``, or a study that tuned another variant;
            an explicit entry whose params make an invalid TrainConfig.
    """

    where = str(grid.path) if grid.path else "<grid>"
    out = {}
    for variant, entry in grid.tuned.items():
        if isinstance(entry, str):
            if best is None:
                raise ValueError(
                    f"{where}: tuned.{variant} = {entry!r}: a tuning study's best params are read "
                    "from the queue's storage (harness queue does this)"
                )
            tuned_variant, params = best(entry)
            if tuned_variant != variant:
                raise ValueError(
                    f"{where}: tuned.{variant} = {entry!r}: that study tuned {tuned_variant!r}, "
                    f"not {variant!r}"
                )
            out[variant] = {"source": entry, "params": dict(params)}
        else:
            out[variant] = {"source": "explicit", "params": dict(entry)}
        for budget in grid.budgets_tokens:
            extra = train_overrides(out[variant]["params"], budget)
            check_train({**grid.train_for(variant), **extra}, grid.sizes, where, prefix=f"tuned.{variant}")
    return out


__all__ = [
    "Cell",
    "Grid",
    "load_grid",
    "parse_grid",
    "check_plan_unchanged",
    "resolve_tuned",
]
