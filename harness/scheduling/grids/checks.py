"""The checks of a grid file's tables (DESIGN section 1.2): keys, names, lists of sizes, seeds and
budgets, roles, pairing, ``[train]``, ``[tuned]`` and ``[schedule]``.

:func:`harness.scheduling.grids.grid.parse_grid` runs them in order; each takes the parsed TOML value
and returns it checked, or raises the one-line ``ValueError`` its ``err(key, message)`` builds
(``"<grid path>: KEY: message"``).
"""

from __future__ import annotations

from harness.common.terms import (
    DEFAULT_PAIR_HARDWARE,
    NAME_RE,
    PAIR_HARDWARE,
    ROLES,
    TUNE_SEED_BASE,
    is_tune_grid,
)
from harness.design.config import train_config, train_keys
from harness.design.settings import TRAIN_SETTINGS
from harness.design.train_table import value_problem
from harness.models import available_variants
from harness.models.sizes import SIZES
from harness.scheduling.tuning import TUNABLE, WARMUP_FRAC

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
    "axes": "table: protocol setting = list of values (each value its own cell, e.g. lr = [0.001, 0.004])",
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


def check_train(train: dict, sizes: tuple[str, ...], where: str, prefix: str = "train") -> None:
    """Unknown keys, value types (the one rule, :func:`harness.design.train_table.value_problem`), and
    each size's merged TrainConfig must be valid (its ranges: a float must be finite, ...)."""
    types = train_keys()
    unknown = [k for k in train if k not in types]
    if unknown:
        raise ValueError(f"{where}: {prefix}.{unknown[0]}: unknown key; allowed keys: {', '.join(types)}")
    for key, value in train.items():
        problem = value_problem(key, value, types[key])
        if problem is not None:
            raise ValueError(f"{where}: {prefix}.{key}: {problem}")
    for size in sizes:
        try:
            train_config(size, **train)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{where}: {prefix} (size {size}): {exc}") from None


#: The settings a grid's ``[axes]`` may sweep: the protocol settings of a ``[train]`` table that may differ
#: between the cells of one grid (their declarations, :data:`harness.design.settings.TRAIN_SETTINGS`).
AXIS_KEYS = tuple(s.name for s in TRAIN_SETTINGS if s.per_cell and s.protocol)


def check_axes(
    table, train: dict, by_variant: dict, tuned: dict, sizes: tuple[str, ...], where: str, err
) -> dict[str, tuple]:
    """The ``[axes]`` table (DESIGN section 1.2): key -> its values, in file order, each value type-checked and
    range-checked at every size as a ``[train]`` value is (:func:`check_train`).

    Raises:
        ValueError: (``err``) not a table; a key that is not a sweepable setting (:data:`AXIS_KEYS`); not a
            non-empty list of distinct values; a bad value; a key ``[train]`` or a ``[train.VARIANT]`` also sets;
            a key a ``[tuned]`` table may set (a tuned run would overwrite its cell's value).
    """
    if not isinstance(table, dict):
        raise err("axes", f"must be a table of `setting = [values]` lines, got {type(table).__name__}")
    out = {}
    for key, values in table.items():
        if key not in AXIS_KEYS:
            raise err(f"axes.{key}", f"not a sweepable setting; allowed: {', '.join(AXIS_KEYS)}")
        if not isinstance(values, list) or not values:
            raise err(f"axes.{key}", f"must be a non-empty list of values, got {values!r}")
        if len({(type(v), v) for v in values}) != len(values):
            raise err(f"axes.{key}", f"duplicate entries in {values!r}")
        setters = ["[train]"] * (key in train) + [f"[train.{v}]" for v, t in by_variant.items() if key in t]
        if setters:
            raise err(
                f"axes.{key}",
                f"also set in {setters[0]}: a setting is either an axis or a fixed value; remove one",
            )
        if tuned and key in TUNABLE:
            raise err(
                f"axes.{key}",
                f"a [tuned] grid and an axis on {key!r} (a tuned setting) cannot be combined; "
                "drop the axis or the [tuned] table",
            )
        for value in values:
            problem = value_problem(key, value, train_keys()[key])
            if problem is not None:
                raise err(f"axes.{key}", problem)
            check_train({**train, key: value}, sizes, where, prefix=f"axes.{key}")
        out[key] = tuple(values)
    return out


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


__all__ = [
    "GRID_KEYS",
    "REQUIRED_KEYS",
    "check_keys",
    "grid_texts",
    "train_tables",
    "check_seeds",
    "str_list",
    "int_list",
    "check_variants",
    "roles_table",
    "check_pairing",
    "check_factorial_cells",
    "check_train",
    "check_tuned",
    "AXIS_KEYS",
    "check_axes",
    "parse_schedule",
]
