"""Every setting of a run, declared once (DESIGN sections 4, 11 and 13): the protocol's settings of a ``[train]``
table and the execution settings, each a :class:`Setting` in :data:`SETTINGS`.

Adding a setting is one :class:`Setting` here plus its consumer. From these declarations come:

* :class:`harness.design.config.TrainConfig`'s defaults and checks (:data:`TRAIN_SETTINGS`, :meth:`Setting.check`);
* the keys a ``[train]`` table may hold and their types: the grid check, ``--set`` and ``--space``
  (:func:`harness.design.config.train_keys`, :data:`harness.design.train_table.EXECUTION_KEYS`,
  :func:`harness.design.train_table.parse_value`);
* :class:`harness.train.execution.ExecutionSettings`'s fallbacks (:meth:`~harness.train.execution.ExecutionSettings.for_run`)
  and the protocol hash's exclusions (:data:`harness.train.protocol.NON_PROTOCOL_TRAIN_FIELDS`);
* the command-line flags of ``harness run`` / ``work`` / ``launch`` that set one, with their help text
  (:func:`harness.commands.options.add_setting_argument`).

Each declaration says whether the setting enters the protocol hash (``protocol``), whether another value of it
re-rounds a run (``rerounds``: part of the run's numerics key, DESIGN section 13, "Settings that re-round"), and
whether it may differ between the cells of one grid (``per_cell``: a protocol setting may, since the protocol hash
tells cells apart; an execution setting that re-rounds may not, or the pairs of a comparison would differ in it).

Light on purpose (no torch): the commands declare their flags from it before anything heavy loads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from harness.models.numerics import DEFAULT_ROUTING, ROUTING_PATHS

#: Live-curve trackers a run can stream to (``[train] loggers``, ``--logger``; harness.train.trackers).
TRACKERS = ("tensorboard", "wandb", "mlflow", "csv")
#: Concrete Lightning precisions a ``[train] precision`` may name, and the per-machine choices.
PRECISIONS = ("auto", "auto-bf16", "32-true", "bf16-mixed")
#: ``--accelerator`` values (Lightning's, less those this harness does not train on: ``tpu``, ``hpu``).
ACCELERATORS = ("auto", "cpu", "gpu", "cuda", "mps")
AUTO = "auto"

#: Ranges a numeric setting may declare: name -> (test, the refusal's words after ``KEY=VALUE``).
RANGES = {
    "positive finite": (lambda v: v > 0 and math.isfinite(v), "must be a positive finite number"),
    "(0, 1)": (lambda v: 0 < v < 1, "must be in (0, 1)"),
    "[0, 1]": (lambda v: 0 <= v <= 1, "must be in [0, 1]"),
    "(0, 1]": (lambda v: 0 < v <= 1, "must be in (0, 1]"),
    "finite >= 0": (lambda v: v >= 0 and math.isfinite(v), "must be a finite number >= 0"),
    "> 0": (lambda v: v > 0, "must be positive"),
    ">= 0": (lambda v: v >= 0, "must be >= 0"),
}


@dataclass(frozen=True)
class Setting:
    """One setting's declaration.

    Attributes:
        name: its key in a ``[train]`` table and its field name (``micro_batch_size``).
        kind: the type of its values: ``int``, ``float``, ``bool``, ``str`` or ``tuple`` (a list of names).
        default: its value where nothing sets it (``auto`` where it is resolved per machine).
        meaning: one line: what it does, with its unit.
        protocol: whether it enters the protocol hash (a protocol setting) or not (an execution setting, or a
            protocol interval that changes nothing computed).
        choices: the values it allows, or ``None``.
        range: a key of :data:`RANGES` its value must satisfy, or ``None``.
        auto: whether ``auto`` is allowed (resolved per machine).
        rerounds: whether another value re-rounds a run: part of its numerics key (DESIGN section 13).
        per_cell: whether it may differ between the cells of one grid.
        in_table: whether a ``[train]`` table (a grid's, ``--set``) may set it; else only the command line.
        flag: its command-line option on ``harness run`` / ``work`` / ``launch``, or ``None``.
        metavar: the flag's value in ``--help``.
        refusal: the refusal of a value out of its choices or range, a template of ``{name}`` and ``{value}``
            (``None``: ``KEY=VALUE; allowed: ...`` for choices, ``KEY=VALUE must be ...`` for a range).
    """

    name: str
    kind: str
    default: Any
    meaning: str
    protocol: bool = True
    choices: tuple | None = None
    range: str | None = None
    auto: bool = False
    rerounds: bool = False
    per_cell: bool = True
    in_table: bool = True
    flag: str | None = None
    metavar: str | None = None
    refusal: str | None = None

    def problem(self, value) -> str | None:
        """What is wrong with ``value``'s range or choice (``KEY=VALUE must be ...``), after its type is checked;
        ``None`` when fine."""
        if self.auto and value == AUTO:
            return None
        if self.choices is not None and self.kind != "tuple" and value not in self.choices:
            template = self.refusal or "{name}={value!r}; allowed: " + ", ".join(map(repr, self.choices))
        elif self.range is not None and not RANGES[self.range][0](value):
            template = self.refusal or "{name}={value} " + RANGES[self.range][1]
        else:
            return None
        return template.format(name=self.name, value=value)

    def check(self, value):
        """``value`` checked against the range and choices (its type by
        :func:`harness.design.train_table.check_value`).

        Raises:
            ValueError: one line naming the value and what is allowed.
        """
        problem = self.problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @property
    def help(self) -> str:
        """The ``--help`` text of its flag: the meaning, where it stands (protocol or execution, whether it
        re-rounds a run) and its default."""
        return self.help_for()

    def help_for(self, scope: str | None = None, default: str | None = None) -> str:
        """:attr:`help` as one command says it: ``scope`` a clause on what the value applies to in that command
        (``for this worker; use cores / workers``), ``default`` the command's own default in words."""
        meaning = f"{self.meaning}; {scope}" if scope else self.meaning
        where = (
            "in the protocol hash"
            if self.protocol
            else "execution setting: the run id and the protocol hash stay"
            + (
                "; it re-rounds a run, so it is part of the run's numerics key, recorded per run"
                if self.rerounds
                else ""
            )
        )
        if default is None:
            default = (
                f"the grid's [train] {self.name}, and these besides"
                if self.kind == "tuple"
                else f"the grid's [train] {self.name}, else {self.default}"
                if self.in_table
                else "none"
                if self.default is None
                else str(self.default)
            )
        return f"{meaning} ({where}). Default: {default}"


def _train(name: str, kind: str, default, meaning: str, **more) -> Setting:
    return Setting(name, kind, default, meaning, **more)


#: Every setting, protocol settings first (:class:`~harness.design.config.TrainConfig`'s fields, in order), then
#: the execution settings a ``[train]`` table may set, then those only the command line sets.
SETTINGS: tuple[Setting, ...] = (
    _train("lr", "float", 3e-3, "peak AdamW learning rate", range="positive finite"),
    _train("min_lr_ratio", "float", 0.1, "final LR of the cosine as a fraction of lr", range="[0, 1]"),
    _train("warmup_tokens", "int", 0, "linear warmup length in tokens (0 = 5 % of the budget)", range=">= 0"),
    _train("schedule", "str", "cosine", "cosine, or wsd (warmup-stable-decay)", choices=("cosine", "wsd")),
    _train("decay_frac", "float", 0.2, "fraction of the budget spent decaying under wsd", range="(0, 1]"),
    _train(
        "weight_decay",
        "float",
        0.1,
        "AdamW decoupled weight decay (not on norms, biases, embeddings' gains or pseudo-queries)",
        range="finite >= 0",
    ),
    _train("beta1", "float", 0.9, "AdamW beta1", range="[0, 1]"),
    _train("beta2", "float", 0.95, "AdamW beta2", range="[0, 1]"),
    _train("grad_clip", "float", 1.0, "gradient-norm clip (0 disables)", range="finite >= 0"),
    _train(
        "batch_tokens",
        "int",
        4096,
        "tokens per optimiser step, the global batch (sequences = batch_tokens // context)",
        range="> 0",
    ),
    _train(
        "eval_every_tokens",
        "int",
        0,
        "validation interval in tokens (0 = only at the end)",
        range=">= 0",
        protocol=False,
    ),
    _train("eval_tokens", "int", 32768, "size of the fixed validation token set", range="> 0"),
    _train("val_fraction", "float", 0.05, "fraction of documents held out for validation", range="(0, 1)"),
    _train(
        "vocab_size", "int", 0, "BPE vocabulary size trained on the corpus (0 = the preset's)", range=">= 0"
    ),
    _train(
        "max_docs",
        "int",
        0,
        "use only the first max_docs documents of the corpus (0 = all; a hub corpus streamed by harness run: 50,000)",
        range=">= 0",
    ),
    _train("tokenizer", "str", "bpe", "bpe (trained on the training split) or gpt2", choices=("bpe", "gpt2")),
    _train(
        "max_epochs",
        "float",
        0.0,
        "passes over the train split a run may make (0 = one at most; in the protocol hash only when set)",
        range="finite >= 0",
    ),
    _train(
        "checkpoint_every_tokens",
        "int",
        0,
        "checkpoint interval in tokens (0 = every 5 minutes)",
        range=">= 0",
        protocol=False,
    ),
    _train(
        "precision",
        "str",
        "auto",
        "auto (fp32 on CPU, bf16-mixed on CUDA), auto-bf16 (bf16-mixed on CUDA and on a CPU with AVX512-BF16 or AMX, else fp32), 32-true or bf16-mixed; resolved per machine, the result in the protocol hash",
        choices=PRECISIONS,
    ),
    # Execution settings a [train] table may set (DESIGN section 11): how a run is computed, never what.
    Setting(
        "compile",
        "bool",
        AUTO,
        "wrap the model in torch.compile (auto: on CUDA, not on a CPU)",
        protocol=False,
        auto=True,
        per_cell=False,
    ),
    Setting(
        "micro_batch_size",
        "int",
        AUTO,
        "sequences per forward+backward on one device; a step's global batch (batch_tokens) runs as micro-batches "
        "of N, gradients accumulating. auto: the largest that fits, probed on CUDA at the start; the whole "
        "per-device batch on a CPU",
        protocol=False,
        range="> 0",
        auto=True,
        rerounds=True,
        per_cell=False,
        flag="--micro-batch-size",
        metavar="N|auto",
        refusal="{name}={value} must be 'auto' or a positive number of sequences",
    ),
    Setting(
        "loggers",
        "tuple",
        (),
        f"trackers that stream the run's curves live ({', '.join(TRACKERS)}); repeatable",
        protocol=False,
        choices=TRACKERS,
        flag="--logger",
        metavar="NAME",
    ),
    Setting(
        "routing",
        "str",
        DEFAULT_ROUTING,
        "how routing sites are computed: two_phase or per_site, the same function rounded differently, each "
        "path with its numerics revision (runs.numerics)",
        protocol=False,
        choices=ROUTING_PATHS,
        rerounds=True,
        per_cell=False,
        flag="--routing",
        refusal="{name}={value!r} is not a routing path; allowed: " + ", ".join(ROUTING_PATHS),
    ),
    # Execution settings only the command line sets.
    Setting(
        "accelerator",
        "str",
        AUTO,
        "where to train (auto: gpu when CUDA is available, else cpu; the device is part of the hardware class)",
        protocol=False,
        choices=ACCELERATORS,
        per_cell=False,
        in_table=False,
        flag="--accelerator",
    ),
    Setting(
        "devices",
        "int",
        1,
        "ranks (devices) per node, a positive number or auto (every visible GPU on a GPU, 1 elsewhere)",
        protocol=False,
        auto=True,
        rerounds=True,
        per_cell=False,
        in_table=False,
        flag="--devices",
        metavar="N|auto",
    ),
    Setting(
        "strategy",
        "str",
        AUTO,
        "Lightning strategy, e.g. ddp (auto: ddp when this process starts several ranks)",
        protocol=False,
        per_cell=False,
        in_table=False,
        flag="--strategy",
    ),
    Setting(
        "num_nodes",
        "int",
        1,
        "nodes of this run, each rank started by torchrun or srun: docs/paper-scale.md",
        protocol=False,
        range="> 0",
        rerounds=True,
        per_cell=False,
        in_table=False,
        flag="--num-nodes",
        metavar="N",
    ),
    Setting(
        "threads",
        "int",
        0,
        "torch CPU threads (0 = torch's default)",
        protocol=False,
        range=">= 0",
        per_cell=False,
        in_table=False,
        flag="--threads",
        metavar="N",
    ),
    Setting(
        "stop_after_tokens",
        "int",
        None,
        "checkpoint and stop after this many tokens (a planned stop; run again to resume)",
        protocol=False,
        in_table=False,
        flag="--stop-after-tokens",
        metavar="TOKENS",
    ),
)

#: Name -> declaration.
BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
#: The protocol's settings of a ``[train]`` table: :class:`~harness.design.config.TrainConfig`'s fields, in order.
TRAIN_SETTINGS: tuple[Setting, ...] = SETTINGS[: [s.name for s in SETTINGS].index("compile")]
#: The execution settings a ``[train]`` table may set (outside :class:`~harness.design.config.TrainConfig`).
TABLE_EXECUTION: tuple[Setting, ...] = tuple(s for s in SETTINGS if s.in_table and s not in TRAIN_SETTINGS)


__all__ = [
    "ACCELERATORS",
    "AUTO",
    "BY_NAME",
    "PRECISIONS",
    "RANGES",
    "SETTINGS",
    "Setting",
    "TABLE_EXECUTION",
    "TRACKERS",
    "TRAIN_SETTINGS",
]
