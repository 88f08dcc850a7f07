"""Tuning the protocol with Optuna before it is frozen (DESIGN section 9).

A tuning study ``tune:NAME`` lives in the queue's storage beside the grids' studies. Its
user attribute ``harness_tune`` holds what it tunes (:class:`TuneSpec`: variant, size,
budget, corpus, base training settings, the search space, the number of trials, the
sampler's seed and the pruner). ``harness tune`` creates it and enqueues one run per trial
(:meth:`TuneSpec.configs`: grid ``tune:NAME``, role ``tune``, trial k at seed
``10_000 + k``, disjoint from every grid's seeds) whose parameters are not drawn yet
(trial attribute ``tune_pending``). The ordinary ``harness work`` workers take them
like any run; the parameters are drawn when a worker takes a trial (:func:`draw_params`,
ask), by a TPE sampler seeded per trial number that conditions on every trial finished
by then and treats the running ones as ``constant_liar``: with several workers, later
trials still learn from earlier ones, and a killed worker's trial is retried with the
parameters it drew (they are in its run config). During training, every evaluation's
validation NLL goes to the study (:func:`pruning_hook`: ``trial.report`` and
``should_prune``); a pruned run ends with status ``pruned``, and the worker tells the
queue the final NLL (tell). The median pruner starts once the random startup trials
have finished and judges evaluations from half the budget on (an early NLL favours high
learning rates and short warmups); Hyperband judges from the first evaluation.

A search-space entry is ``NAME=LOW:HIGH`` (uniform), ``NAME=log:LOW:HIGH`` (log-uniform),
``NAME=int:LOW:HIGH`` or ``NAME=choice:A,B,...``. Names are :class:`~harness.design.config.TrainConfig`
fields that shape the optimisation (:data:`TUNABLE`), plus ``warmup_frac``, the warmup as a
fraction of the budget: ``warmup_tokens = max(1, round(warmup_frac * budget_tokens))`` (one
token is no warmup step; 0 would mean the 5 % default).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.common.terms import NAME_RE, TUNE_PREFIX, TUNE_ROLE, TUNE_SEED_BASE
from harness.design.config import RunConfig, check_budget, train_config, train_keys
from harness.design.train_table import parse_value
from harness.models.sizes import get_size

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution
    from optuna.storages import BaseStorage

#: TrainConfig fields a study may tune (the optimiser and schedule); the others fix the data,
#: the evaluation set or the execution, which tuning must not move.
TUNABLE = (
    "lr",
    "min_lr_ratio",
    "warmup_tokens",
    "schedule",
    "decay_frac",
    "weight_decay",
    "beta1",
    "beta2",
    "grad_clip",
    "batch_tokens",
)
WARMUP_FRAC = "warmup_frac"
DEFAULT_SPACE = ("lr=log:1e-4:3e-2", "warmup_frac=0:0.2")
PRUNERS = ("median", "hyperband", "none")
SPEC_ATTR = "harness_tune"  # the study user attribute holding the TuneSpec
EVALS_PER_TRIAL = 4  # a trial without eval_every_tokens is evaluated at every quarter of its budget


@dataclass(frozen=True)
class Param:
    """One search-space dimension.

    Attributes:
        name: a :data:`TUNABLE` field or ``warmup_frac``.
        kind: ``float`` (uniform), ``log`` (log-uniform), ``int`` or ``choice``.
        low, high: the range (inclusive) for float/log/int.
        choices: the values of a ``choice``.
    """

    name: str
    kind: str
    low: float | int | None = None
    high: float | int | None = None
    choices: tuple = ()

    @property
    def text(self) -> str:
        """The canonical entry, ``NAME=log:0.0001:0.03`` (how it is stored and compared)."""
        if self.kind == "choice":
            return f"{self.name}=choice:{','.join(map(str, self.choices))}"
        prefix = "" if self.kind == "float" else f"{self.kind}:"
        return f"{self.name}={prefix}{self.low!r}:{self.high!r}"

    def distribution(self) -> BaseDistribution:
        """The Optuna distribution of this dimension."""
        # lazy: Optuna, only with a queue
        from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

        if self.kind == "choice":
            return CategoricalDistribution(list(self.choices))
        if self.kind == "int":
            return IntDistribution(int(self.low), int(self.high))
        return FloatDistribution(float(self.low), float(self.high), log=self.kind == "log")


def parse_param(entry: str) -> Param:
    """Parse one ``--space`` entry (see the module docstring).

    Raises:
        ValueError: malformed, an unknown or untunable name, an empty range, a log range
            reaching 0 or below; the message names the entry and what is allowed.
    """
    allowed = f"allowed names: {', '.join((*TUNABLE, WARMUP_FRAC))}"
    form = "NAME=LOW:HIGH, NAME=log:LOW:HIGH, NAME=int:LOW:HIGH or NAME=choice:A,B"
    name, eq, rng = (entry or "").partition("=")
    name, rng = name.strip(), rng.strip()
    if not eq or not name or not rng:
        raise ValueError(f"--space {entry!r}: malformed; write {form}")
    types = train_keys()
    if name != WARMUP_FRAC and name not in TUNABLE:
        why = (
            "not a training setting"
            if name not in types
            else "not tunable (it fixes data, evaluation or execution)"
        )
        raise ValueError(f"--space {entry!r}: {name!r} is {why}; {allowed}")
    kind, body = "float", rng
    head, colon, rest = rng.partition(":")
    if colon and head in ("log", "int", "choice", "float"):
        kind, body = head, rest
    if kind == "choice":
        values = [v.strip() for v in body.split(",") if v.strip()]
        if len(values) < 2:
            raise ValueError(
                f"--space {entry!r}: a choice needs at least two values, e.g. schedule=choice:cosine,wsd"
            )
        try:
            parsed = tuple(parse_value(name, v, types) if name != WARMUP_FRAC else float(v) for v in values)
        except ValueError as exc:
            raise ValueError(f"--space {entry!r}: {exc}") from None
        if len(set(parsed)) != len(parsed):
            raise ValueError(f"--space {entry!r}: repeated choice")
        return Param(name, "choice", choices=parsed)
    if name == "schedule":
        raise ValueError(f"--space {entry!r}: schedule takes a choice, e.g. schedule=choice:cosine,wsd")
    parts = body.split(":")
    if len(parts) != 2:
        raise ValueError(f"--space {entry!r}: malformed range {rng!r}; write {form}")
    integer = kind == "int" or (name != WARMUP_FRAC and types[name] == "int")
    try:
        low, high = ((int(p.replace("_", "")) if integer else float(p)) for p in parts)
    except ValueError:
        what = "integers" if integer else "numbers"
        raise ValueError(
            f"--space {entry!r}: the range ends must be {what}, got {parts[0]!r} and {parts[1]!r}"
        ) from None
    if integer:
        kind = "log" if kind == "log" else "int"
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError(f"--space {entry!r}: the range ends must be finite")
    if not low < high:
        raise ValueError(f"--space {entry!r}: empty range {low!r}:{high!r}; LOW must be below HIGH")
    if kind == "log" and low <= 0:
        raise ValueError(f"--space {entry!r}: a log range needs LOW > 0, got {low!r}")
    if integer and kind == "log":
        raise ValueError(f"--space {entry!r}: integer settings take int:LOW:HIGH, not log")
    return Param(name, kind, low, high)


def parse_space(entries: list[str] | tuple[str, ...] | None) -> dict[str, Param]:
    """Parse ``--space`` entries (default :data:`DEFAULT_SPACE`); name -> :class:`Param`.

    Raises:
        ValueError: a bad entry (:func:`parse_param`), a name given twice, or both
            ``warmup_frac`` and ``warmup_tokens``.
    """
    out: dict[str, Param] = {}
    for entry in entries or DEFAULT_SPACE:
        p = parse_param(entry)
        if p.name in out:
            raise ValueError(f"--space {entry!r}: {p.name!r} is already in the space ({out[p.name].text})")
        out[p.name] = p
    if WARMUP_FRAC in out and "warmup_tokens" in out:
        raise ValueError("--space: warmup_frac and warmup_tokens both set the warmup; keep one")
    return out


def train_overrides(params: Mapping[str, Any], budget_tokens: int) -> dict[str, Any]:
    """TrainConfig overrides of drawn (or best) parameters: ``warmup_frac`` becomes
    ``warmup_tokens = max(1, round(warmup_frac * budget_tokens))``; others are fields."""
    out = {}
    for name, value in params.items():
        if name == WARMUP_FRAC:
            out["warmup_tokens"] = max(1, int(round(float(value) * budget_tokens)))
        else:
            out[name] = value
    return out


def check_space(space: Mapping[str, Param], size: str, train: Mapping[str, Any], budget_tokens: int) -> None:
    """Every corner of the space must give a valid TrainConfig with ``train`` as the base, and
    one that can train ``budget_tokens`` (:func:`harness.design.config.check_budget`).

    Raises:
        ValueError: naming the entry and the invalid setting (e.g. ``beta2=1.5``).
    """
    for p in space.values():
        ends = p.choices if p.kind == "choice" else (p.low, p.high)
        for value in ends:
            try:
                settings = train_config(size, **{**train, **train_overrides({p.name: value}, budget_tokens)})
                check_budget(settings, size=size, context=get_size(size).context, budget_tokens=budget_tokens)
            except ValueError as exc:
                raise ValueError(f"--space {p.text}: at {p.name}={value!r}: {exc}") from None


@dataclass(frozen=True)
class TuneSpec:
    """What a tuning study tunes (stored in its ``harness_tune`` user attribute).

    Attributes:
        name: the study is ``tune:NAME``; its runs' grid too.
        variant, size, budget_tokens, corpus: the runs (corpus absolute or ``hf:``).
        train: base TrainConfig overrides (a grid's ``[train]``, ``--set``), under the space.
        space: canonical entries (:attr:`Param.text`) by name.
        trials: how many trials the study runs.
        seed: the TPE sampler's seed (trial k samples with ``seed * 1_000_003 + k``).
        pruner: ``median``, ``hyperband`` or ``none``.
        startup_trials: trials sampled at random before TPE models the finished ones.
    """

    name: str
    variant: str
    size: str
    budget_tokens: int
    corpus: str
    trials: int
    space: dict[str, str]
    train: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    pruner: str = "median"
    startup_trials: int = 2

    def __post_init__(self) -> None:
        if not NAME_RE.fullmatch(self.name):
            raise ValueError(f"tuning study name {self.name!r}: use letters, digits, '_', '.', '-'")
        if self.trials < 1:
            raise ValueError(f"--trials {self.trials} must be at least 1")
        if self.pruner not in PRUNERS:
            raise ValueError(f"--pruner {self.pruner!r}; allowed: {', '.join(PRUNERS)}")
        if self.startup_trials < 1:
            raise ValueError(f"--startup-trials {self.startup_trials} must be at least 1")

    @property
    def study_name(self) -> str:
        return TUNE_PREFIX + self.name

    def params(self) -> dict[str, Param]:
        """The space as :class:`Param` s."""
        return parse_space(list(self.space.values()))

    def configs(self) -> list[RunConfig]:
        """One run per trial k = 0 .. trials-1, at seed ``TUNE_SEED_BASE + k`` (parameters drawn later)."""
        return [
            RunConfig.create(
                self.variant,
                self.size,
                TUNE_SEED_BASE + k,
                self.budget_tokens,
                self.corpus,
                grid=self.study_name,
                role=TUNE_ROLE,
                train=self.train,
            )
            for k in range(self.trials)
        ]

    def differences(self, other: TuneSpec) -> list[str]:
        """Fields (other than ``trials``) where ``other`` differs, as ``field: old != new``."""
        a, b = dataclasses.asdict(self), dataclasses.asdict(other)
        return [f"{k}: {a[k]!r} != {b[k]!r}" for k in a if k != "trials" and a[k] != b[k]]

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TuneSpec:
        return cls(**{f.name: d[f.name] for f in dataclasses.fields(cls) if f.name in d})


def study_name_of(name: str) -> str:
    """``tune:NAME`` for ``NAME`` or ``tune:NAME`` (``--show`` takes either)."""
    return name if name.startswith(TUNE_PREFIX) else TUNE_PREFIX + name


def load_spec(storage: BaseStorage, name: str) -> TuneSpec:
    """The :class:`TuneSpec` of study ``tune:NAME``.

    Raises:
        ValueError: no such study, or it is not a tuning study; the message lists the
            tuning studies there.
    """
    study = study_name_of(name)
    try:
        sid = storage.get_study_id_from_name(study)
        attrs = storage.get_study_user_attrs(sid)
    except KeyError:
        attrs = {}
    if SPEC_ATTR not in attrs:
        names = sorted(s.study_name for s in storage.get_all_studies() if SPEC_ATTR in s.user_attrs)
        raise ValueError(
            f"no tuning study {study!r} in this storage; tuning studies: "
            f"{', '.join(names) if names else 'none (start one with harness tune)'}"
        )
    return TuneSpec.from_dict(attrs[SPEC_ATTR])


def create_or_check(storage: BaseStorage, spec: TuneSpec) -> str:
    """Create study ``tune:NAME`` with ``spec``, or check an existing one against it.

    Returns ``"created"``, ``"same"`` or ``"more trials"`` (an existing study with fewer
    trials: its ``trials`` is raised to ``spec.trials``).

    Raises:
        ValueError: the study exists with another space (or variant, size, budget, corpus,
            base settings, seed or pruner): the message names the study and the differences.
    """
    from optuna.exceptions import DuplicatedStudyError  # lazy: Optuna, only with a queue
    from optuna.study import StudyDirection

    try:
        sid = storage.create_new_study([StudyDirection.MINIMIZE], spec.study_name)
    except DuplicatedStudyError:
        sid = storage.get_study_id_from_name(spec.study_name)
        attrs = storage.get_study_user_attrs(sid)
        if SPEC_ATTR not in attrs:
            raise ValueError(
                f"study {spec.study_name!r} exists but is not a tuning study (no {SPEC_ATTR} "
                "attribute); pick another --name"
            ) from None
        old = TuneSpec.from_dict(attrs[SPEC_ATTR])
        diff = old.differences(spec)
        if diff:
            raise ValueError(
                f"tuning study {spec.study_name!r} exists with another "
                f"{'space' if any(d.startswith('space') for d in diff) else 'setup'}: "
                f"{'; '.join(diff)}; pick another --name, or repeat its setup"
            ) from None
        if spec.trials > old.trials:
            storage.set_study_user_attr(sid, SPEC_ATTR, dataclasses.asdict(spec))
            return "more trials"
        return "same"
    storage.set_study_user_attr(sid, SPEC_ATTR, dataclasses.asdict(spec))
    return "created"


def _sampler(spec: TuneSpec, number: int):
    from optuna.samplers import TPESampler  # lazy: Optuna, only with a queue

    # seeded per trial number: two workers asking at once draw different points, and a
    # study replayed with the same finished trials draws the same ones
    return TPESampler(
        seed=spec.seed * 1_000_003 + number, n_startup_trials=spec.startup_trials, constant_liar=True
    )


def _pruner(spec: TuneSpec):
    from optuna.pruners import HyperbandPruner, MedianPruner, NopPruner  # lazy: Optuna, only with a queue

    if spec.pruner == "median":
        # not before the random startup trials have finished, nor in the first half of a run: early in
        # a short run a low LR or a long warmup lags behind and may still come out ahead
        steps = spec.budget_tokens // train_config(spec.size, **spec.train).batch_tokens
        return MedianPruner(n_startup_trials=max(2, spec.startup_trials), n_warmup_steps=steps // 2)
    if spec.pruner == "hyperband":
        return HyperbandPruner(min_resource=1, max_resource="auto", reduction_factor=3)
    return NopPruner()


def _trial(storage: BaseStorage, study_name: str, trial_id: int, *, sampler=None, pruner=None):
    """An ``optuna.trial.Trial`` on a RUNNING trial of tuning study ``study_name``, and its spec."""
    import optuna  # lazy: Optuna, only with a queue

    spec = load_spec(storage, study_name)
    number = storage.get_trial_number_from_id(trial_id)
    study = optuna.load_study(
        study_name=study_name,
        storage=storage,
        sampler=sampler(spec, number) if sampler else optuna.samplers.RandomSampler(seed=0),
        pruner=pruner(spec) if pruner else None,
    )
    return optuna.trial.Trial(study, trial_id), spec


def draw_params(storage: BaseStorage, trial_id: int, config: RunConfig) -> RunConfig:
    """Ask: draw a tuning trial's parameters (the worker has just taken it) and fix its run.

    The TPE sampler sees every finished trial of the study and the running ones (constant
    liar). The parameters become the trial's (``trial.suggest_*``), its user attributes
    ``tune_params`` / ``tune_distributions``, and its run config's training overrides
    (``config`` attribute, which a retry keeps).

    Returns:
        ``config`` with the drawn settings in ``train``.
    """
    from optuna.distributions import distribution_to_json  # lazy: Optuna, only with a queue

    trial, spec = _trial(storage, config.grid, trial_id, sampler=_sampler)
    params = {}
    for name, p in spec.params().items():
        if p.kind == "choice":
            params[name] = trial.suggest_categorical(name, list(p.choices))
        elif p.kind == "int":
            params[name] = trial.suggest_int(name, int(p.low), int(p.high))
        else:
            params[name] = trial.suggest_float(name, float(p.low), float(p.high), log=p.kind == "log")
    drawn = dataclasses.replace(
        config, train={**config.train, **train_overrides(params, config.budget_tokens)}
    )
    drawn.train_config()  # every corner was checked at `harness tune`; this is the last line of defence
    storage.set_trial_user_attr(trial_id, "config", json.dumps(drawn.to_dict(), sort_keys=True))
    storage.set_trial_user_attr(trial_id, "tune_params", params)
    storage.set_trial_user_attr(
        trial_id,
        "tune_distributions",
        {n: distribution_to_json(p.distribution()) for n, p in spec.params().items()},
    )
    storage.set_trial_user_attr(trial_id, "tune_pending", False)
    return drawn


def pruning_hook(storage: BaseStorage, study_name: str, trial_id: int) -> Callable[[int, int, float], bool]:
    """``on_eval(step, tokens, val_nll) -> prune?`` for a tuning trial's run (study
    ``study_name``, its runs' grid): reports the validation NLL (nats/token) at optimiser
    step ``step`` to the study and asks its pruner."""
    trial, _ = _trial(storage, study_name, trial_id, pruner=_pruner)

    def on_eval(step: int, tokens: int, val_nll: float) -> bool:
        if not math.isfinite(val_nll):
            return False  # divergence is recorded as such, not as a pruned trial
        trial.report(float(val_nll), int(step))
        return bool(trial.should_prune())

    return on_eval


def best_params(storage: BaseStorage, name: str) -> tuple[TuneSpec, dict[str, Any], float]:
    """``(spec, best params, best value)`` of tuning study ``tune:NAME``: its COMPLETE trial
    with the smallest final validation NLL (nats/token).

    Raises:
        ValueError: no such tuning study, or no finished trial yet.
    """
    import optuna  # lazy: Optuna, only with a queue

    spec = load_spec(storage, name)
    study = optuna.load_study(study_name=spec.study_name, storage=storage)
    try:
        trial = study.best_trial
    except ValueError:
        raise ValueError(
            f"tuning study {spec.study_name!r} has no finished trial yet; run `harness work` first"
        ) from None
    return spec, dict(trial.params), float(trial.value)


def with_eval_points(train: Mapping[str, Any], size: str, budget_tokens: int) -> dict[str, Any]:
    """``train`` with ``eval_every_tokens`` set to a quarter of the budget when it has none, so
    the pruner sees intermediate NLLs (not part of the protocol hash: the tuned protocol is
    still the grid's)."""
    out = dict(train)
    if not train_config(size, **out).eval_every_tokens:
        out["eval_every_tokens"] = max(1, budget_tokens // EVALS_PER_TRIAL)
    return out


__all__ = [
    "TUNABLE",
    "WARMUP_FRAC",
    "DEFAULT_SPACE",
    "PRUNERS",
    "SPEC_ATTR",
    "Param",
    "parse_param",
    "parse_space",
    "train_overrides",
    "check_space",
    "TuneSpec",
    "study_name_of",
    "load_spec",
    "create_or_check",
    "draw_params",
    "pruning_hook",
    "best_params",
    "with_eval_points",
]
