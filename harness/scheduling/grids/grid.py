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

Expansion gives one run config per (size, budget, variant, seed), ordered size, then
budget (smallest first, so early-budget results arrive first), then seed, then variant
(parent, treatment, controls, references): finishing seed 0 of every variant before
seed 1 gives complete pairs early. The run id is ``grid:size:variant:s<seed>:<budget>``.

The analysis plan (``[analysis]``, defaults where absent) is stored in every run config
under ``"analysis"``; it is not part of the protocol hash, and :func:`check_plan_unchanged`
refuses to queue a grid whose plan differs from the one its queued runs carry.

Owns a grid file's keys, checks and expansion into runs. Must not touch the queue's storage.
"""

from __future__ import annotations

import dataclasses
import glob
import math
import os
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness.common.terms import (
    DEFAULT_PAIR_HARDWARE,
    NAME_RE,
    PAIR_HARDWARE,
    ROLES,
    TUNE_SEED_BASE,
    is_tune_grid,
)
from harness.data.corpus_identity import parse_ref
from harness.design.analysis_plan import AnalysisPlan, parse_plan, plan_diff
from harness.design.config import RunConfig, train_config
from harness.design.factorial import parse_factorial
from harness.design.train_table import AUTO_FIELDS
from harness.design.train_values import train_keys
from harness.models import available_variants
from harness.models.sizes import SIZES
from harness.scheduling.tuning import TUNABLE, WARMUP_FRAC, train_overrides

_TOML_POS_RE = re.compile(r"\(at line (\d+), column (\d+)\)")


def resolve_corpus(spec: str, cwd: str | os.PathLike | None = None) -> str:
    """Absolute form of a corpus spec; ``hf:`` specs are returned unchanged.

    A relative path (or glob) is joined to ``cwd`` (default: the current working
    directory) and normalised; it is not required to exist here (see :func:`check_corpus`).
    """
    if spec.startswith("hf:") or parse_ref(spec) is not None:  # a hub spec or a corpus reference: no path
        return spec
    path = Path(spec).expanduser()
    if not path.is_absolute():
        path = Path(cwd or os.getcwd()) / path
    return os.path.normpath(path)


def choose_corpus(cli: str | None, grid: Grid | None = None) -> tuple[str | None, str]:
    """The corpus of a command, by the one precedence every command uses (DESIGN section 1, grid
    files): ``--corpus``, else ``$HARNESS_CORPUS`` (both relative to the working directory), else
    the grid's ``corpus`` (relative to the grid file's folder, so a grid works from any directory).

    Args:
        cli: the command's ``--corpus`` value, or ``None``.
        grid: the grid the command reads, if any.

    Returns:
        ``(corpus, source)``: the absolute corpus (an ``hf:`` spec unchanged) and where it came
        from, for messages; ``(None, "")`` when none of the three gives one.
    """
    if cli:
        return resolve_corpus(cli), "--corpus"
    if os.environ.get("HARNESS_CORPUS"):
        return resolve_corpus(os.environ["HARNESS_CORPUS"]), "$HARNESS_CORPUS"
    if grid is not None and grid.corpus:
        folder = grid.path.resolve().parent if grid.path is not None else None
        where = (
            f"key 'corpus' of {grid.path}" if grid.path is not None else f"key 'corpus' of grid {grid.name}"
        )
        return resolve_corpus(grid.corpus, folder), where
    return None, ""


def check_corpus(resolved: str, *, source: str) -> None:
    """Raise ``FileNotFoundError`` if a local corpus (path or glob) matches nothing.

    ``source`` says where the spec came from (e.g. ``"grid key 'corpus' in X.toml"``);
    ``hf:`` specs are not checked (they need a network).
    """
    if resolved.startswith("hf:"):
        return
    ref = parse_ref(resolved)
    if ref is not None:
        raise FileNotFoundError(
            f"corpus {ref[1]} (fingerprint {ref[0]}, from {source}) is a reference to a corpus, not a path: "
            "pass --corpus PATH (checked against that fingerprint)"
        )
    exists = bool(glob.glob(resolved)) if glob.has_magic(resolved) else os.path.exists(resolved)
    if not exists:
        raise FileNotFoundError(
            f"corpus {resolved} not found (from {source}); pass --corpus PATH or set $HARNESS_CORPUS"
        )


@dataclass(frozen=True)
class Cell:
    """One run of a grid: the (size, budget, variant, seed) point and the variant's role."""

    size: str
    budget_tokens: int
    variant: str
    role: str
    seed: int


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

    @property
    def parent(self) -> str:
        """Name of the parent variant."""
        return next(v for v, r in self.variants.items() if r == "parent")

    def train_for(self, variant: str) -> dict:
        """The training overrides of ``variant``'s runs: ``[train]``, then ``[train.VARIANT]``."""
        return {**self.train, **self.train_by_variant.get(variant, {})}

    def cells(self) -> list[Cell]:
        """All untuned runs, in queue order: size, budget (ascending), seed, variant by role."""
        by_role = sorted(self.variants.items(), key=lambda vr: ROLES.index(vr[1]))  # stable
        out = []
        for size in self.sizes:
            for budget in self.budgets_tokens:
                for seed in self.seeds:
                    for variant, role in by_role:
                        if size in self.sizes_by_role[role] and budget in self.budgets_by_role[role]:
                            out.append(Cell(size, budget, variant, role, seed))
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
            seed_cell = (c.size, c.budget_tokens, c.seed)
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
        )


def _seed_cell(cell: Cell) -> tuple[str, int, int]:
    """``(size, budget, seed)``: the runs of one seed in one cell, after which its tuned runs follow."""
    return cell.size, cell.budget_tokens, cell.seed


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
    "GRID_KEYS",
    "REQUIRED_KEYS",
    "resolve_corpus",
    "choose_corpus",
    "check_corpus",
    "Cell",
    "Grid",
    "load_grid",
    "parse_grid",
    "check_plan_unchanged",
    "resolve_tuned",
]


# --- The checks of a grid file's tables (:func:`harness.scheduling.grids.grid.parse_grid`'s steps): keys, names,
# lists of sizes/seeds/budgets, roles, pairing, ``[train]`` and ``[tuned]``. Each raises the one-line
# ``ValueError`` its ``err(key, message)`` builds ("<grid path>: KEY: message").
#
# The checks are public: :mod:`harness.scheduling.grids.grid` runs them in order (and re-exports
# :data:`GRID_KEYS` and :data:`REQUIRED_KEYS`); each takes the parsed TOML value and returns it checked.

# Top-level keys of a grid file -> what each holds (shown in "unknown key" errors).
GRID_KEYS = {
    "name": "grid name (letters, digits, _ . -)",
    "description": "free text",
    "corpus": "corpus path, directory, glob or hf:OWNER/NAME:CONFIG",
    "sizes": f"list of size presets ({', '.join(SIZES)})",
    "seeds": "list of non-negative integers",
    "budgets_tokens": "list of positive integers (tokens)",
    "variants": "table: variant name = role",
    "budgets_by_role": "table: role = list of budgets (subset of budgets_tokens)",
    "sizes_by_role": "table: role = list of sizes (subset of sizes)",
    "train": "table of TrainConfig overrides, with optional [train.VARIANT] tables",
    "tuned": "table: variant = \"tune:NAME\" (a tuning study's best params) or a table of params",
    "analysis": "table: the analysis plan (alpha, reproduce_fraction, min_effect_nats, power, max_seeds, looks)",
    "schedule": 'table: how workers take the runs (pair_hardware = "same" or "any")',
    "factorial": "table: factors = [A, B] and levels = { variant = [a, b], ... } (a 2 x 2 design, DESIGN section 12)",
}
REQUIRED_KEYS = ("name", "corpus", "sizes", "seeds", "budgets_tokens", "variants")


def check_keys(data: dict, err) -> None:
    """Every top-level key known, every required key present."""
    unknown = [k for k in data if k not in GRID_KEYS]
    if unknown:
        allowed = "; ".join(f"{k} ({d})" for k, d in GRID_KEYS.items())
        raise err(unknown[0], f"unknown key {unknown[0]!r}; allowed keys: {allowed}")
    for key in REQUIRED_KEYS:
        if key not in data:
            raise err(key, f"missing required key {key!r} ({GRID_KEYS[key]})")


def grid_texts(data: dict, err) -> tuple[str, str, str]:
    """The grid's ``(name, description, corpus)``, checked."""
    name = data["name"]
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise err("name", f"{name!r} must be a string of letters, digits, '_', '.', '-' (no ':')")
    description = data.get("description", "")
    if not isinstance(description, str):
        raise err("description", f"must be a string, got {type(description).__name__}")
    corpus = data["corpus"]
    if not isinstance(corpus, str) or not corpus.strip():
        raise err("corpus", f"{corpus!r} must be a non-empty string ({GRID_KEYS['corpus']})")
    return name, description, corpus


def train_tables(
    train, sizes: tuple[str, ...], variants: dict[str, str], where: str, err
) -> tuple[dict, dict]:
    """``([train] overrides, variant -> its [train.VARIANT] table)``, each checked for every size."""
    if not isinstance(train, dict):
        raise err("train", f"must be a table of TrainConfig overrides, got {type(train).__name__}")
    by_variant = {k: v for k, v in train.items() if isinstance(v, dict)}
    train = {k: v for k, v in train.items() if not isinstance(v, dict)}
    check_train(train, sizes, where)
    for variant, table in by_variant.items():
        if variant not in variants:
            raise err(
                f"train.{variant}",
                f"a [train.VARIANT] table must name a variant of [variants] "
                f"({', '.join(variants)}); {variant!r} is not one",
            )
        check_train({**train, **table}, sizes, where, prefix=f"train.{variant}")
    return train, by_variant


def check_seeds(seeds: tuple[int, ...], err) -> None:
    """Grid seeds stay below the tuning trials' (:data:`harness.common.terms.TUNE_SEED_BASE`)."""
    big = [s for s in seeds if s >= TUNE_SEED_BASE]
    if big:
        raise err(
            "seeds",
            f"{big[0]} is reserved: seeds from {TUNE_SEED_BASE:_} on are the tuning trials' "
            f"(DESIGN 9); grid seeds must be below {TUNE_SEED_BASE:_}",
        )


def str_list(value, key, err) -> tuple[str, ...]:
    """``value`` as a tuple: a non-empty list of distinct strings, else ``err(key, ...)``."""
    if not isinstance(value, list) or not value:
        raise err(key, f"must be a non-empty list, got {value!r}")
    for v in value:
        if not isinstance(v, str):
            raise err(key, f"{v!r} is not a string")
    if len(set(value)) != len(value):
        raise err(key, f"duplicate entries in {value!r}")
    return tuple(value)


def int_list(value, key, err, *, minimum: int) -> tuple[int, ...]:
    """``value`` as a tuple: a non-empty list of distinct integers >= ``minimum`` (a float such as
    ``2e5`` is refused, naming the integer to write), else ``err(key, ...)``."""
    kind = "positive" if minimum > 0 else "non-negative"
    if not isinstance(value, list) or not value:
        raise err(key, f"must be a non-empty list of {kind} integers, got {value!r}")
    for v in value:
        if isinstance(v, float) and v.is_integer() and v >= minimum:
            raise err(key, f"{v!r} is a float; write integers, e.g. {int(v):_} rather than {v:g}")
        if isinstance(v, bool) or not isinstance(v, int):
            raise err(key, f"{v!r} is not an integer; allowed: {kind} integers")
        if v < minimum:
            raise err(key, f"{v} is not allowed; allowed: {kind} integers")
    if len(set(value)) != len(value):
        raise err(key, f"duplicate entries in {value!r}")
    return tuple(value)


def check_variants(table, err) -> dict[str, str]:
    """The ``[variants]`` table (variant -> role): known variants and roles, exactly one parent."""
    if not isinstance(table, dict) or not table:
        raise err("variants", "must be a non-empty table of `variant = role` lines")
    known = available_variants()
    for variant, role in table.items():
        if variant not in known:
            raise err(
                f"variants.{variant}", f"unknown variant {variant!r}; valid variants: {', '.join(known)}"
            )
        if role not in ROLES:
            raise err(f"variants.{variant}", f"role {role!r} is not one of {', '.join(ROLES)}")
    parents = [v for v, r in table.items() if r == "parent"]
    if len(parents) != 1:
        found = f"found {len(parents)}: {', '.join(parents)}" if parents else "found none"
        raise err("variants", f"exactly one variant must have role 'parent' ({found})")
    return dict(table)


def roles_table(table, key, universe, variants, err) -> dict:
    """role -> tuple of allowed values (all of ``universe`` for roles the table omits)."""
    if not isinstance(table, dict):
        raise err(key, f"must be a table of `role = [...]` lines, got {type(table).__name__}")
    out = {role: tuple(universe) for role in ROLES}
    for role, values in table.items():
        if role not in ROLES:
            raise err(f"{key}.{role}", f"unknown role {role!r}; roles: {', '.join(ROLES)}")
        if role not in variants.values():
            raise err(f"{key}.{role}", f"no variant in [variants] has role {role!r}")
        if not isinstance(values, list) or not values:
            raise err(f"{key}.{role}", f"must be a non-empty list, got {values!r}")
        bad = [v for v in values if isinstance(v, bool) or v not in universe]
        if bad:
            grid_key = "budgets_tokens" if key == "budgets_by_role" else "sizes"
            raise err(f"{key}.{role}", f"{bad[0]!r} is not in the grid's {grid_key} {list(universe)}")
        out[role] = tuple(u for u in universe if u in values)
    return out


def check_pairing(variants, sizes_by_role, budgets_by_role, err) -> None:
    """Every treatment/control (size, budget) needs the parent there (paired statistics)."""
    parent = next(v for v, r in variants.items() if r == "parent")
    for variant, role in variants.items():
        if role not in ("treatment", "control"):
            continue
        for key, table, what in (
            ("sizes_by_role", sizes_by_role, "size"),
            ("budgets_by_role", budgets_by_role, "budget"),
        ):
            missing = [x for x in table[role] if x not in table["parent"]]
            if missing:
                raise err(
                    key,
                    f"the {role} {variant!r} runs at {what} {missing[0]!r} but the parent "
                    f"{parent!r} does not (parent {what}s: {list(table['parent'])}); every "
                    f"treatment and control needs its parent at the same size and budget",
                )


def check_factorial_cells(factorial, variants, sizes_by_role, budgets_by_role, err) -> None:
    """Every variant of a ``[factorial]`` runs at the same sizes and budgets (``[sizes_by_role]`` /
    ``[budgets_by_role]`` through its role): the interaction contrast needs all four variants in every
    cell the factorial covers (DESIGN section 12), or a cell has fewer than its seeds' pairs.

    Raises:
        ValueError: (``err``) naming the table, the variant left out and the cell.
    """
    if factorial is None:
        return
    for key, table, what in (
        ("budgets_by_role", budgets_by_role, "budget"),
        ("sizes_by_role", sizes_by_role, "size"),
    ):
        covered = sorted({x for v in factorial.variants for x in table[variants[v]]}, key=str)
        for variant in factorial.variants:
            left_out = [x for x in covered if x not in table[variants[variant]]]
            if left_out:
                raise err(
                    key,
                    f"the factorial variant {variant!r} (role {variants[variant]}) does not run at {what} "
                    f"{left_out[0]!r}, where other factorial variants do; every factorial variant must run "
                    "in every cell the factorial covers (give their roles the same "
                    f"{what}s, or leave {variant!r}'s role out of [{key}])",
                )


_PY_TYPES = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,)}


def check_train(train: dict, sizes: tuple[str, ...], where: str, prefix: str = "train") -> None:
    """Unknown keys, value types, and each size's merged TrainConfig must be valid."""
    types = train_keys()
    unknown = [k for k in train if k not in types]
    if unknown:
        raise ValueError(f"{where}: {prefix}.{unknown[0]}: unknown key; allowed keys: {', '.join(types)}")
    for key, value in train.items():
        ok = _PY_TYPES.get(types[key])
        if key in AUTO_FIELDS and value == "auto":
            continue
        if ok and (not isinstance(value, ok) or (types[key] != "bool" and isinstance(value, bool))):
            raise ValueError(f"{where}: {prefix}.{key}: {value!r} is not a {types[key]}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{where}: {prefix}.{key}: {value!r} must be finite")
    for size in sizes:
        try:
            train_config(size, **train)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{where}: {prefix} (size {size}): {exc}") from None


def check_tuned(table, variants: dict[str, str], err) -> dict:
    """Check a ``[tuned]`` table: variant -> ``"tune:NAME"`` or a table of tunable params."""

    if not isinstance(table, dict):
        raise err("tuned", f"must be a table of `variant = \"tune:NAME\"` lines, got {type(table).__name__}")
    for variant, entry in table.items():
        key = f"tuned.{variant}"
        if variant not in variants:
            raise err(key, f"{variant!r} is not a variant of [variants] ({', '.join(variants)})")
        if isinstance(entry, str):
            if not is_tune_grid(entry):
                raise err(
                    key,
                    f"{entry!r}: write \"tune:NAME\" (a tuning study of `harness tune`) or a table "
                    "of params, e.g. { lr = 3e-3, warmup_frac = 0.1 }",
                )
            continue
        if not isinstance(entry, dict) or not entry:
            raise err(key, f"{entry!r}: write \"tune:NAME\" or a non-empty table of params")
        for name, value in entry.items():
            if name not in (*TUNABLE, WARMUP_FRAC):
                raise err(
                    f"{key}.{name}", f"not a tunable setting; allowed: {', '.join((*TUNABLE, WARMUP_FRAC))}"
                )
            if name == WARMUP_FRAC and (
                isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1
            ):
                raise err(f"{key}.{name}", f"{value!r} must be a fraction of the budget in [0, 1)")
    return dict(table)


def parse_schedule(table, err) -> str:
    """The ``pair_hardware`` of a grid's ``[schedule]`` table (default :data:`DEFAULT_PAIR_HARDWARE`).

    Raises:
        ValueError: from ``err(key, message)``: not a table, an unknown key, or a value other than
            ``"same"`` / ``"any"``.
    """
    if not isinstance(table, dict):
        raise err("schedule", f"must be a table ([schedule]), got {type(table).__name__}")
    unknown = [k for k in table if k != "pair_hardware"]
    if unknown:
        raise err(f"schedule.{unknown[0]}", 'unknown key; allowed: pair_hardware ("same" or "any")')
    value = table.get("pair_hardware", DEFAULT_PAIR_HARDWARE)
    if value not in PAIR_HARDWARE:
        raise err(
            "schedule.pair_hardware",
            f'{value!r} is not allowed; allowed: "same" (both runs of a seed on one hardware class) or "any"',
        )
    return value
