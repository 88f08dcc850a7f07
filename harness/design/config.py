"""Configuration of a run (DESIGN sections 2 and 4): the schema of its training settings and of the run itself.

* :class:`TrainConfig` -- optimiser, schedule, evaluation and data settings; per-size
  defaults in :data:`TRAIN_DEFAULTS`, merged by :func:`train_config`; a ``[train]`` table may also
  set execution settings, outside :class:`TrainConfig` (the split: :func:`harness.design.train_table.split_train`);
* :class:`RunConfig` -- one run: variant, size, seed, budget, corpus and the overrides.
  It is what the queue carries, what the protocol hash is computed from and the runner's
  only input.

Precedence for training settings: preset defaults, then a grid's ``[train]`` table, then
command-line flags (``harness run --set KEY=VALUE``). The model's shape per size is
:mod:`harness.models.sizes`'s; a ``[train]`` value's type rule and its reading from text are
:mod:`harness.design.train_table`'s;
the model and the corpus are built by their own packages' factories (:func:`harness.models.build_model`,
:func:`harness.data.prepare_corpus`) from what :meth:`RunConfig.build_model` and
:meth:`RunConfig.corpus_key` say.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from harness.common.terms import NAME_RE, RUN_ROLES, is_tune_grid, run_id
from harness.corpus.key import CorpusKey, requested_vocab
from harness.design.settings import PRECISIONS, TRAIN_SETTINGS
from harness.design.train_table import EXECUTION_KEYS, check_value, split_train
from harness.models import VariantSpec, build_model, get_spec
from harness.models.catalog import is_shipped
from harness.models.numerics import DEFAULT_ROUTING
from harness.models.sizes import ModelConfig, derive, get_size, padded_vocab
from harness.models.spec import parse_spec_text

if TYPE_CHECKING:  # annotations only: the model and the corpus load torch and numpy
    from harness.data.prepared import PreparedCorpus
    from harness.models.gpt import DepthRoutedLM

#: Each ``[train]`` protocol setting's default (its declaration: :data:`harness.design.settings.TRAIN_SETTINGS`).
_DEFAULT = {s.name: s.default for s in TRAIN_SETTINGS}
#: Largest budget a run may have, in tokens: 1e15, far above any pretraining run (the largest
#: are ~4e13) and far below what ``runs.budget_tokens`` (BIGINT) holds.
MAX_BUDGET_TOKENS = 10**15


def check_budget(train: TrainConfig, *, size: str, context: int, budget_tokens: int) -> None:
    """Refuse a budget the run cannot train: ``batch_tokens`` not a multiple of the context,
    a budget below one batch, not a whole number of global batches (a step is one global
    batch, DESIGN 11: the run would train fewer tokens than its id says), or above
    :data:`MAX_BUDGET_TOKENS` (tokens).

    Raises:
        ValueError: naming the value and what is allowed (for a budget between two whole
            numbers of batches: those two budgets).
    """
    if train.batch_tokens % context:
        raise ValueError(
            f"batch_tokens={train.batch_tokens} must be a multiple of the {size} context ({context} tokens)"
        )
    if budget_tokens < train.batch_tokens:
        raise ValueError(
            f"budget_tokens={budget_tokens} is less than one batch "
            f"(batch_tokens={train.batch_tokens}); raise the budget or lower batch_tokens"
        )
    if budget_tokens > MAX_BUDGET_TOKENS:
        raise ValueError(
            f"budget_tokens={budget_tokens:_} is more than {MAX_BUDGET_TOKENS:_} tokens "
            "(the largest budget a run may have)"
        )
    if budget_tokens % train.batch_tokens:
        steps = budget_tokens // train.batch_tokens  # >= 1: the budget is at least one batch
        raise ValueError(
            f"budget_tokens={budget_tokens:_} is not a whole number of global batches "
            f"(batch_tokens={train.batch_tokens:_}); the nearest budgets that are: "
            f"{steps * train.batch_tokens:_} ({steps} step{'s' if steps > 1 else ''}) or "
            f"{(steps + 1) * train.batch_tokens:_} ({steps + 1} steps)"
        )


@dataclass(frozen=True)
class TrainConfig:
    """Optimiser, schedule and evaluation settings of one run (DESIGN section 4).

    Every field can be set by a grid's ``[train]`` table (which may also set the execution
    settings of :data:`EXECUTION_KEYS`, kept outside this class); unknown keys are errors.
    Budgets and intervals are in tokens, never steps. Each field's type, default, meaning, choices or
    range, and whether it enters the protocol hash: its declaration in
    :data:`harness.design.settings.TRAIN_SETTINGS` (in this order), which :meth:`__post_init__` checks by.
    """

    lr: float = _DEFAULT["lr"]
    min_lr_ratio: float = _DEFAULT["min_lr_ratio"]
    warmup_tokens: int = _DEFAULT["warmup_tokens"]
    schedule: str = _DEFAULT["schedule"]
    decay_frac: float = _DEFAULT["decay_frac"]
    weight_decay: float = _DEFAULT["weight_decay"]
    beta1: float = _DEFAULT["beta1"]
    beta2: float = _DEFAULT["beta2"]
    grad_clip: float = _DEFAULT["grad_clip"]
    batch_tokens: int = _DEFAULT["batch_tokens"]
    eval_every_tokens: int = _DEFAULT["eval_every_tokens"]
    eval_tokens: int = _DEFAULT["eval_tokens"]
    val_fraction: float = _DEFAULT["val_fraction"]
    vocab_size: int = _DEFAULT["vocab_size"]
    max_docs: int = _DEFAULT["max_docs"]
    tokenizer: str = _DEFAULT["tokenizer"]
    max_epochs: float = _DEFAULT["max_epochs"]
    checkpoint_every_tokens: int = _DEFAULT["checkpoint_every_tokens"]
    precision: str = _DEFAULT["precision"]

    def __post_init__(self) -> None:
        """Each field checked by its declaration (:data:`harness.design.settings.TRAIN_SETTINGS`): its type
        (:func:`~harness.design.train_table.check_value`, an int widened to a float), then its choices or range.

        Raises:
            ValueError: one line naming the first bad value and what is allowed.
        """
        for setting in TRAIN_SETTINGS:
            object.__setattr__(
                self, setting.name, check_value(setting.name, getattr(self, setting.name), setting.kind)
            )
        for setting in TRAIN_SETTINGS:
            setting.check(getattr(self, setting.name))

    @classmethod
    def from_dict(cls, values: Mapping, *, where: str = "[train]") -> TrainConfig:
        """Build from a mapping of its fields; any other key raises ``ValueError`` (listing what a
        ``[train]`` table allows: these fields and :data:`EXECUTION_KEYS`, read by :func:`train_config`)."""
        unknown = set(values) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: {sorted(train_keys())}")
        return cls(**values)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def train_keys() -> dict[str, str]:
    """Every key a ``[train]`` table may hold -> the type of its values (``int``, ``float``, ``str``,
    ``bool``, ``tuple``): :class:`TrainConfig`'s fields, then the execution settings
    (:data:`~harness.design.train_table.EXECUTION_KEYS`), from their declarations
    (:data:`harness.design.settings.SETTINGS`). The grid check, ``--set`` and ``--space`` read
    a key's type here (:func:`harness.design.train_table.parse_value`)."""
    return {**{s.name: s.kind for s in TRAIN_SETTINGS}, **EXECUTION_KEYS}


# Per-size defaults of the training settings (preset level of the precedence chain).
TRAIN_DEFAULTS: dict[str, dict] = {
    "tiny": dict(lr=3e-3, batch_tokens=2048, eval_tokens=8192),
    "mini": dict(lr=3e-3, batch_tokens=1024, eval_tokens=32768),
    "small": dict(lr=2e-3, batch_tokens=4096, eval_tokens=32768),
    "120m": dict(lr=6e-4, batch_tokens=524288, eval_tokens=4_194_304, weight_decay=0.1),
    "343m": dict(lr=3e-4, batch_tokens=524288, eval_tokens=4_194_304, weight_decay=0.1),
}


def train_config(size: str, **overrides) -> TrainConfig:
    """Training settings of a preset with overrides applied (preset, then grid, then CLI). ``overrides``
    may be a whole ``[train]`` table: its execution settings are checked and left out
    (:func:`~harness.design.train_table.split_train`; :meth:`harness.train.execution.ExecutionSettings.for_run`
    reads them).

    Raises:
        ValueError: an unknown size or key, a bad value.
    """
    get_size(size)
    values = dict(TRAIN_DEFAULTS.get(size, {}))
    values.update(split_train(overrides).protocol)
    return TrainConfig.from_dict(values)


#: The grid name of a run started by hand (``harness run`` without ``--grid``).
ADHOC_GRID = "adhoc"


def corpus_key(corpus: str, size: str, train: TrainConfig) -> CorpusKey:
    """The corpus a run of preset ``size`` with settings ``train`` reads from ``corpus`` (a spec): the
    vocabulary is ``train.vocab_size``, else the preset's (:func:`~harness.corpus.key.requested_vocab`).

    Raises:
        ValueError: unknown size.
    """
    return CorpusKey(
        corpus,
        train.tokenizer,
        requested_vocab(train.vocab_size, get_size(size).vocab_size),
        train.val_fraction,
        train.max_docs or None,
    )


@dataclass(frozen=True)
class RunConfig:
    """One run of a study: the queued payload, the protocol hash's input, the runner's input.

    :meth:`to_dict` gives the JSON object the queue stores (trial attribute ``config``),
    the result file keeps under ``run.config`` (with what the runner adds: ``protocol``,
    ``total_steps``, ...) and a checkpoint keeps in ``config.json``; :meth:`from_dict`
    reads one back, including those written before this class existed. Build a checked
    one with :meth:`create` (a grid's cell) or :meth:`adhoc` (``harness run``).

    Attributes:
        run_id: ``grid:size:variant:s<seed>:<budget_tokens>`` (:func:`harness.common.terms.run_id`),
            plus ``:<8 hex digits>`` for an ad-hoc run with training overrides.
        grid: grid name (``adhoc`` for a run started by hand).
        variant: variant name (:func:`harness.models.available_variants`).
        role: ``parent``, ``treatment``, ``control`` or ``reference``.
        size: size preset (:data:`SIZES`).
        seed: data-order and initialisation seed (>= 0).
        budget_tokens: training budget in tokens (> 0).
        corpus: corpus spec, an absolute path or ``hf:OWNER/NAME:CONFIG``.
        train: the grid's ``[train]`` table, then ``--set``: overrides of the preset's :class:`TrainConfig`
            (:meth:`train_config`) and the execution settings it may set (:data:`EXECUTION_KEYS`,
            :meth:`execution`), kept in one table so that a payload queued before they left
            :class:`TrainConfig` reads back unchanged.
        analysis: the grid's analysis plan (:meth:`harness.design.analysis_plan.AnalysisPlan.as_config`);
            ``None`` for an ad-hoc run. Not part of the protocol.
        model: overrides of :class:`ModelConfig` fields (not ``vocab_size``: the tokenizer
            sets it); empty for the preset's shape. Part of the protocol through the model.
        tuned: ``None``, or for a run of a grid's ``[tuned]`` table (the variant at its own
            tuned settings, DESIGN section 9) ``{"source": "tune:NAME" or "explicit",
            "params": {...}, "fields": [TrainConfig fields they set]}``; its id ends in
            ``:tuned``. The settings themselves are in :attr:`train`.
        axes: ``None``, or for a run of a grid with ``[axes]`` its cell's axis values (``{"lr": 0.001}``, in the
            grid's order; DESIGN section 1.2); they are in :attr:`train` too (so in the protocol hash), and its id
            names them (``...:<budget>:lr=0.001``).
        spec: ``None`` for a variant shipped with the harness (built-ins, ``controls/``); for a
            user's spec (from ``$HARNESS_SPEC_PATH`` when the run was created) its TOML text
            (text, not tables: the queue stores payloads with sorted keys, and the order of a
            spec's tables orders its modules), so a worker without that folder builds the
            same model (:meth:`variant_spec`).
    """

    run_id: str
    grid: str
    variant: str
    role: str
    size: str
    seed: int
    budget_tokens: int
    corpus: str
    train: dict[str, Any] = field(default_factory=dict)
    analysis: dict[str, Any] | None = None
    model: dict[str, Any] = field(default_factory=dict)
    tuned: dict[str, Any] | None = None
    spec: str | None = None
    axes: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        for name in ("run_id", "grid", "variant", "size", "corpus"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"run config {name}={getattr(self, name)!r} must be a non-empty string")
        if self.role not in RUN_ROLES:
            raise ValueError(f"run config role={self.role!r}; allowed: {', '.join(RUN_ROLES)}")
        for name in ("seed", "budget_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"run config {name}={value!r} must be an integer")
        for name in ("train", "model", "analysis", "tuned", "axes"):
            value = getattr(self, name)
            if not isinstance(value, Mapping) and not (
                name in ("analysis", "tuned", "axes") and value is None
            ):
                raise ValueError(f"run config {name}={value!r} must be a table")
            # a private copy, as JSON gives it back (lists, not tuples): a config read from the
            # queue equals the one that was queued, and later edits of the caller's dict do not leak in
            object.__setattr__(self, name, None if value is None else json.loads(json.dumps(dict(value))))
        if self.spec is not None:
            if not isinstance(self.spec, str):
                raise ValueError(f"run config spec={self.spec!r} must be a spec's TOML text")
            if self.variant_spec().name != self.variant:
                raise ValueError(
                    f"run config spec name={self.variant_spec().name!r} must be the variant {self.variant!r}"
                )

    # -- building ---------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        variant: str,
        size: str,
        seed: int,
        budget_tokens: int,
        corpus: str,
        *,
        grid: str = ADHOC_GRID,
        role: str | None = None,
        train: Mapping | None = None,
        analysis: Mapping | None = None,
        model: Mapping | None = None,
        tuned: Mapping | None = None,
        axes: Mapping | None = None,
    ) -> RunConfig:
        """A checked config; its run id is ``grid:size:variant:s<seed>:<budget_tokens>``
        (``...:lr=0.001`` per axis value with ``axes``, which also set :attr:`train`; ``...:tuned`` with
        ``tuned``; see the class docstring).

        ``role`` defaults to the variant spec's role. ``grid`` is a grid name, or
        ``tune:NAME`` for a tuning trial's run (:func:`harness.common.terms.is_tune_grid`).

        Raises:
            ValueError: unknown variant or size, a variant whose head groups cannot split
                the size's heads, bad budget, seed or grid name, bad train or model overrides.
                (Whether the budget fits the batch and the vocabulary the tokenizer:
                :meth:`check_trainable`, at queue time.)
        """
        spec = get_spec(variant)
        preset = get_size(size)
        if spec.residual != "prenorm":
            try:  # a split of the heads that this size cannot make fails now, not in a worker
                spec.sites["attn"].head_counts(preset.n_heads)
            except ValueError as exc:
                raise ValueError(f"variant {variant!r} at size {size!r}: {exc}") from None
        if not (NAME_RE.fullmatch(grid) or is_tune_grid(grid)):
            raise ValueError(
                f"grid name {grid!r}: use letters, digits, '_', '.', '-' (starting with a letter or digit)"
            )
        if int(budget_tokens) <= 0:
            raise ValueError(f"budget_tokens={budget_tokens} must be a positive number of tokens")
        if int(seed) < 0:
            raise ValueError(f"seed={seed} must be >= 0")
        train, model = {**(train or {}), **(axes or {})}, dict(model or {})
        train_config(size, **train)  # validate now, not in a worker hours later
        if "vocab_size" in model:
            raise ValueError(
                "model override vocab_size: the tokenizer sets the vocabulary; use train.vocab_size"
            )
        derive(size, **model)
        rid = run_id(grid, size, variant, seed, budget_tokens, tuned=tuned is not None, axes=axes)
        return cls(
            run_id=rid,
            grid=grid,
            variant=variant,
            role=role or spec.role,
            size=size,
            seed=int(seed),
            budget_tokens=int(budget_tokens),
            corpus=corpus,
            train=train,
            analysis=None if analysis is None else dict(analysis),
            model=model,
            tuned=None if tuned is None else dict(tuned),
            spec=None if is_shipped(spec) else spec.text,
            axes=dict(axes) if axes else None,
        )

    @classmethod
    def adhoc(
        cls,
        variant: str,
        size: str,
        seed: int,
        budget_tokens: int,
        corpus: str,
        *,
        grid: str = ADHOC_GRID,
        role: str | None = None,
        train: Mapping | None = None,
    ) -> RunConfig:
        """:meth:`create` for ``harness run``: in the ``adhoc`` grid, a run with training
        overrides gets ``:<sha256 of the overrides, 8 hex digits>`` appended to its id, so a
        hand-made sweep (``--set lr=...``) keeps one result per setting.

        Raises:
            ValueError: as :meth:`create`.
        """
        config = cls.create(variant, size, seed, budget_tokens, corpus, grid=grid, role=role, train=train)
        if grid == ADHOC_GRID and config.train:
            digest = hashlib.sha256(json.dumps(config.train, sort_keys=True).encode()).hexdigest()[:8]
            config = dataclasses.replace(config, run_id=f"{config.run_id}:{digest}")
        return config

    def check_trainable(self) -> None:
        """Refuse a run that would fail in every worker: a budget the batch does not fit or
        that is too large to store (:func:`check_budget`), a tokenizer the corpus cannot be prepared
        with (:func:`harness.data.tokenizer.check_key_tokenizer`). ``harness queue`` calls it for
        every run before queueing any.

        Raises:
            ValueError: naming the run, the value and what is allowed.
        """
        from harness.data.tokenizer import check_key_tokenizer  # lazy: it loads HF tokenizers

        settings = self.train_config()
        try:
            check_budget(
                settings,
                size=self.size,
                context=self.model_config(1).context,
                budget_tokens=self.budget_tokens,
            )
            check_key_tokenizer(self.corpus_key())
        except ValueError as exc:
            raise ValueError(f"run {self.run_id}: {exc}") from None

    # -- reading and writing ------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of this run (``analysis``, ``tuned``, ``spec`` and ``axes`` only when set,
        ``model`` only when non-empty)."""
        out = {f.name: copy.deepcopy(getattr(self, f.name)) for f in fields(self)}
        for name in ("analysis", "tuned", "spec", "axes"):
            if out[name] is None:
                del out[name]
        if not out["model"]:
            del out["model"]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunConfig:
        """Read :meth:`to_dict`'s object back (a queue payload or a checkpoint's ``config.json``).

        Raises:
            ValueError: a key that is not a field, a missing field, or a bad value.
        """
        names = [f.name for f in fields(cls)]
        unknown = [k for k in data if k not in names]
        if unknown:
            raise ValueError(f"run config: unknown key {unknown[0]!r}; allowed keys: {', '.join(names)}")
        missing = [
            f.name
            for f in fields(cls)
            if f.name not in data
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        ]
        if missing:
            raise ValueError(f"run config: missing key {missing[0]!r}")
        return cls(**data)

    # -- derived ------------------------------------------------------------------------

    def train_config(self) -> TrainConfig:
        """The training settings: the size's defaults with :attr:`train` applied."""
        return train_config(self.size, **self.train)

    def execution(self) -> dict[str, Any]:
        """The execution settings the run's grid (or ``--set``) gives in :attr:`train` (:data:`EXECUTION_KEYS`
        -> value); :meth:`harness.train.execution.ExecutionSettings.for_run` merges them with the
        command line's. Outside the protocol hash (DESIGN section 11).

        Raises:
            ValueError: a value of the wrong type (:func:`~harness.design.train_table.split_train`).
        """
        return split_train(self.train).execution

    def corpus_key(self) -> CorpusKey:
        """The corpus this run reads (:class:`~harness.corpus.key.CorpusKey`): its spec and the
        training settings that decide its tokens; the vocabulary is ``[train] vocab_size``, else the
        size preset's (:func:`~harness.corpus.key.requested_vocab`)."""
        return corpus_key(self.corpus, self.size, self.train_config())

    def variant_spec(self) -> VariantSpec:
        """The variant's spec: the one stored in the config (a user's spec), else the shipped one.

        Raises:
            ValueError: an unknown variant, or a stored spec that no longer parses.
        """
        if self.spec is None:
            return get_spec(self.variant)
        return parse_spec_text(
            self.spec, where=f"run {self.run_id}: the variant spec stored when it was queued"
        )

    def model_config(self, vocab_size: int) -> ModelConfig:
        """The model's shape: the size's preset with :attr:`model`, and an embedding for a tokenizer
        of ``vocab_size`` ids padded to a multiple of 64 (:func:`~harness.models.sizes.padded_vocab`:
        50257 -> 50304; the loss leaves the padding out, :class:`harness.train.lit.LitLM`)."""
        return derive(self.size, **self.model, vocab_size=padded_vocab(vocab_size))

    def build_model(self, corpus: PreparedCorpus, routing: str = DEFAULT_ROUTING) -> DepthRoutedLM:
        """The run's model initialised from :attr:`seed` (DESIGN section 4), shaped by
        :meth:`model_config` for ``corpus``'s tokenizer (the model is sized from the tokenizer, as
        torchtitan's model arguments are). float32 on the CPU: tokens ``[B, T]`` -> logits ``[B, T, V]``.
        ``routing``: how its routing sites are computed (an execution setting,
        :data:`harness.models.numerics.ROUTING_PATHS`; the same function, rounded differently).
        The factory is :func:`harness.models.build_model`; this says which variant, size, seed and shape."""
        shape = dataclasses.asdict(self.model_config(corpus.vocab_size))
        return build_model(self.variant_spec(), self.size, seed=self.seed, routing=routing, **shape)

    @property
    def label(self) -> str:
        """``variant s<seed>``, the run's name in progress lines."""
        return f"{self.variant} s{self.seed}"


__all__ = [
    "PRECISIONS",
    "MAX_BUDGET_TOKENS",
    "check_budget",
    "TrainConfig",
    "TRAIN_DEFAULTS",
    "train_config",
    "ADHOC_GRID",
    "corpus_key",
    "train_keys",
    "RunConfig",
]
