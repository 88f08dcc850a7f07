"""The shared vocabulary of a study: roles, run statuses, run ids, and config differences.

Defined once here and imported by the grid, the queue, the runner, the result-file
validator (:mod:`harness.store.validate`) and the report (:mod:`harness.report.stats.pairing`). Plain Python, no
dependencies, so every layer may import it.

* A *role* is what a variant plays in a study (DESIGN section 1.2): the single
  ``parent`` (Block AttnRes), the ``treatment`` (RD-AttnRes), ``control`` s and
  ``reference`` s; the order is the queue order of a grid's variants.
* A run *status* is where a run is in its life (DESIGN section 5, ``runs.status``).
* A *run id* names one run of a grid: ``grid:size:variant:s<seed>:<budget_tokens>``, then ``:KEY=VALUE`` per
  axis of a grid with ``[axes]`` (``:lr=0.001``, :func:`axis_text`), then ``:tuned`` for a run with a tuning
  study's settings; :func:`run_id` writes it, :func:`parse_run_id` reads it back.
* What a record does not say (a result file written before a field existed) reads :data:`UNKNOWN`.
* A ``--grid NAME`` that names no grid is one error naming the grids there (:func:`check_grid`).
* A run's timestamps (``runs.started_at``, ``finished_at``) are naive UTC (:func:`utc_now`).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterable, Mapping
from typing import NamedTuple

ROLES = ("parent", "treatment", "control", "reference")
#: The role of a tuning trial's run (DESIGN section 9): never a grid variant's role.
TUNE_ROLE = "tune"
#: Every role a run may carry (``runs.role``): the grid roles and :data:`TUNE_ROLE`.
RUN_ROLES = (*ROLES, TUNE_ROLE)
#: ``runs.status`` values (DESIGN sections 5 and 9), in the order error messages list them;
#: ``pruned`` only for tuning trials stopped early by the study's pruner.
STATUSES = ("queued", "running", "done", "failed", "diverged", "pruned")
#: Statuses of a run that ended for good without an error (a diverged run is finished, not
#: failed; a pruned tuning trial is finished early).
FINISHED = ("done", "diverged", "pruned")
#: The prefix of a tuning study's name and of its runs' grid: ``tune:NAME`` (DESIGN section 9).
TUNE_PREFIX = "tune:"
#: Seeds of tuning trials: trial k of a study trains at seed ``TUNE_SEED_BASE + k``; grids use
#: seeds below it, so no tuning trial shares a seed with a run it helps to choose settings for.
TUNE_SEED_BASE = 10_000
#: Grid names: letters, digits, ``_ . -``, starting with a letter or digit (no ``:``, the
#: run-id separator).
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*")  # use with fullmatch: "$" would pass a trailing newline
#: Characters of a failed attempt's error text (the traceback's tail) kept in the queue and
#: in its result file.
ERROR_CHARS = 8000
#: Results-store tables ``harness export`` writes one grid's rows of (DESIGN section 5), and its formats.
EXPORT_TABLES = ("final", "runs", "metrics", "routing", "route_pairs", "route_params")
EXPORT_FORMATS = ("parquet", "csv")
#: How :func:`config_diff` shows a key one side lacks.
ABSENT = "<absent>"
#: What a record does not say: the commit, numerics or hardware class of a result file written before the
#: field existed (and a CPU whose model the system does not name).
UNKNOWN = "unknown"
#: The last part of the run id of a run trained with a tuning study's settings (``harness queue --tuned``).
TUNED_SUFFIX = "tuned"


def axis_text(value) -> str:
    """An axis value as a run id and a report write it: an integer as is (``256``), a float as Python's
    shortest repr (``0.001``, ``4e-05``), a bool ``true``/``false``, a string as is (``wsd``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


def axes_label(axes: Iterable[tuple[str, object]]) -> str:
    """A cell's axis values as a report names them: ``"lr 0.001, warmup_tokens 256"`` (``""`` for none)."""
    return ", ".join(f"{k} {v if isinstance(v, str) else axis_text(v)}" for k, v in axes)


def run_id(
    grid: str,
    size: str,
    variant: str,
    seed: int,
    budget_tokens: int,
    *,
    tuned: bool = False,
    axes: Mapping[str, object] | None = None,
) -> str:
    """Stable, readable id of one run: ``"{grid}:{size}:{variant}:s{seed}:{budget_tokens}"``, then
    ``":KEY=VALUE"`` per axis value of its cell (``axes``, in the grid's ``[axes]`` order; :func:`axis_text`),
    then ``":tuned"`` when ``tuned`` (:data:`TUNED_SUFFIX`). A run without axes keeps the id it always had."""
    axis_parts = "".join(f":{k}={axis_text(v)}" for k, v in (axes or {}).items())
    return f"{grid}:{size}:{variant}:s{int(seed)}:{int(budget_tokens)}{axis_parts}" + (
        f":{TUNED_SUFFIX}" if tuned else ""
    )


class RunId(NamedTuple):
    """The parts of a run id (:func:`parse_run_id`)."""

    grid: str
    size: str
    variant: str
    seed: int
    budget_tokens: int
    tuned: bool
    #: ``((KEY, VALUE text), ...)``: the cell's axis values, in the id's order (empty without ``[axes]``).
    axes: tuple[tuple[str, str], ...] = ()

    def cell_seed(self) -> str:
        """``SIZE:BUDGET:SEED`` (then ``:KEY=VALUE`` per axis): what the runs of one seed in one cell share
        (the runs a paired difference pairs, whatever their variant)."""
        return f"{self.size}:{self.budget_tokens}:{self.seed}" + "".join(f":{k}={v}" for k, v in self.axes)

    def without_seed(self) -> tuple:
        """Everything but the seed: the runs of one variant, size, budget and axis values (they compute alike)."""
        return (self.grid, self.size, self.variant, self.budget_tokens, self.tuned) + (
            (self.axes,) if self.axes else ()
        )


def parse_run_id(rid: str) -> RunId:
    """The parts of a run id written by :func:`run_id`, read from the right (a tuning study's grid,
    ``tune:NAME``, holds the separator itself).

    Raises:
        ValueError: ``rid`` is not of that form (naming it).
    """
    parts = rid.split(":")
    tuned = parts[-1] == TUNED_SUFFIX
    if tuned:
        parts = parts[:-1]
    axes: list[tuple[str, str]] = []
    while parts and re.fullmatch(r"[a-z_0-9]+=[^=]+", parts[-1]):  # no grid, size or variant holds '='
        key, value = parts.pop().split("=")
        axes.insert(0, (key, value))
    if len(parts) < 5 or not re.fullmatch(r"s\d+", parts[-2]) or not parts[-1].isdigit():
        raise ValueError(
            f"run id {rid!r}: expected GRID:SIZE:VARIANT:s<SEED>:<BUDGET_TOKENS>[:KEY=VALUE ...][:{TUNED_SUFFIX}]"
        )
    grid, size, variant = ":".join(parts[:-4]), parts[-4], parts[-3]
    return RunId(grid, size, variant, int(parts[-2][1:]), int(parts[-1]), tuned, tuple(axes))


def run_order(run_id: str) -> tuple:
    """Sort key putting the numbers inside a run id (or its result file's name) in numeric order, so
    seed ``s2`` comes before ``s10``: text and integers alternate, so any two keys compare."""
    parts = re.split(r"(\d+)", run_id)
    return tuple(int(p) if i % 2 else p for i, p in enumerate(parts))


def queue_order_key(role: str, run_id: str) -> tuple:
    """Where a run goes when a grid's runs are listed without their queue (an archive's ``queue.json``,
    its import): by role (:data:`RUN_ROLES` order: parent, treatment, controls, references), then by
    :func:`run_order` (variant, then seed numerically)."""
    rank = RUN_ROLES.index(role) if role in RUN_ROLES else len(RUN_ROLES)
    return (rank, run_order(run_id))


def check_grid_name(grid: object, where: str) -> None:
    """Refuse a grid name that ``harness queue`` would refuse (:data:`NAME_RE`; a tuning study's
    ``tune:NAME``): a grid name becomes a file and folder name (``RESULTS/grids/NAME.toml``,
    ``RESULTS/reports/NAME/``), so ``../x`` or ``a/b`` would write outside the results folder.

    Raises:
        ValueError: ``WHERE: grid name '../x' ...``, naming what is allowed.
    """
    if not isinstance(grid, str) or not (NAME_RE.fullmatch(grid) or is_tune_grid(grid)):
        raise ValueError(
            f"{where}: grid name {grid!r} must be letters, digits, '_', '.', '-' (starting with a "
            "letter or digit; no '/' or ':'), as `harness queue` requires of a grid file's name"
        )


def check_grid(grid: str, known: Iterable[str], where: str) -> None:
    """Check that ``grid`` is one of the ``known`` grid names found in ``where`` (the queue or
    the results store, as the message should name it).

    Raises:
        ValueError: ``no runs of grid 'nope' in WHERE; grids there: a, b`` (or ``none yet``).
    """
    names = sorted({str(g) for g in known})
    if grid not in names:
        raise ValueError(
            f"no runs of grid {grid!r} in {where}; grids there: {', '.join(names) or 'none yet'}"
        )


def _flatten(obj, prefix: str = "") -> dict:
    """``{"train": {"lr": 1}}`` -> ``{"train.lr": 1}`` (an empty mapping adds no key)."""
    if isinstance(obj, Mapping):
        out: dict = {}
        for k, v in obj.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: obj}


def config_diff(
    old: Mapping | str | None,
    new: Mapping | str | None,
    *,
    values: bool = False,
    ignore: tuple[str, ...] = (),
) -> list[str]:
    """The dotted keys whose values differ between two (nested) run configs, sorted.

    Args:
        old, new: configs as mappings or as JSON text (a ``runs.config`` cell).
        values: give each key as ``"train.lr: 0.001 != 0.003"`` (a key one side lacks
            shows as ``'<absent>'``); else the keys alone (``"train.lr"``).
        ignore: last key parts to skip (e.g. ``("variant", "role", "run_id")``: they
            differ between paired runs by design).

    Returns:
        The differences; a config that is missing or not valid JSON gives the one
        entry ``"config JSON missing or unreadable, fields cannot be compared"``.
    """
    flat = []
    for config in (old, new):
        try:
            config = json.loads(config) if isinstance(config, str) else config
        except json.JSONDecodeError:
            config = None
        flat.append(_flatten(config) if isinstance(config, Mapping) else None)
    a, b = flat
    if a is None or b is None:
        return ["config JSON missing or unreadable, fields cannot be compared"]
    out = []
    for key in sorted(set(a) | set(b)):
        if key.rsplit(".", 1)[-1] in ignore:
            continue
        va, vb = a.get(key, ABSENT), b.get(key, ABSENT)
        if va != vb:
            out.append(f"{key}: {va!r} != {vb!r}" if values else key)
    return out


def is_tune_grid(grid: str) -> bool:
    """Whether ``grid`` names a tuning study's runs (``tune:NAME`` with NAME as :data:`NAME_RE`)."""
    return grid.startswith(TUNE_PREFIX) and bool(NAME_RE.fullmatch(grid[len(TUNE_PREFIX) :]))


def utc_now() -> dt.datetime:
    """Now in UTC without a time zone, as a run's timestamps are stored (``runs.started_at``, DESIGN section 5)."""
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


#: The values of a grid's ``[schedule] pair_hardware`` (harness.scheduling.queue.hardware_pairs): both runs of a
#: seed on one hardware class, or anywhere.
PAIR_HARDWARE = ("same", "any")
#: The default: a paired design stays paired on hardware too (docs/scaling-out.md says why).
DEFAULT_PAIR_HARDWARE = "same"

__all__ = [
    "PAIR_HARDWARE",
    "DEFAULT_PAIR_HARDWARE",
    "ROLES",
    "TUNE_ROLE",
    "RUN_ROLES",
    "STATUSES",
    "FINISHED",
    "TUNE_PREFIX",
    "TUNE_SEED_BASE",
    "is_tune_grid",
    "NAME_RE",
    "check_grid_name",
    "ERROR_CHARS",
    "EXPORT_TABLES",
    "EXPORT_FORMATS",
    "ABSENT",
    "UNKNOWN",
    "TUNED_SUFFIX",
    "run_id",
    "axis_text",
    "axes_label",
    "RunId",
    "parse_run_id",
    "utc_now",
    "check_grid",
    "config_diff",
    "run_order",
    "queue_order_key",
]
