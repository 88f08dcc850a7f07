"""Pairs on one hardware class and numerics: a grid's ``[schedule] pair_hardware`` (DESIGN section 13).

A paired difference cancels what its two runs share: data order, initial weights, and the rounding of the
machine, code and settings they ran with. Two runs of one seed on two hardware classes
(:mod:`harness.train.environment`) or two numerics keys (:func:`harness.models.numerics.numerics_key`: two-phase
vs per-site routing or code that re-rounds, another micro-batch size, another world size) do not share the rounding: at the study's scale that partly re-draws a run, and a precision or
kernel that treats variants differently biases the difference. So with ``pair_hardware = "same"`` (the
default) the first run of a seed that trains *binds* the seed (size, budget, seed) to its worker's key
(:func:`pair_key`: its class and numerics key), and every other run of the seed is claimed only by a worker of
that key; ``"any"`` claims anywhere. A claim released untrained (the corpus not on the machine, the
results folder full, a configuration error) binds nothing: the seed is bound when a run of it trains
(:meth:`PairGate.bind`, called by the worker once the claim passed its checks), not when it is claimed. ``harness work --any-hardware`` overrides the binding for one worker (the
report's provenance section then shows the pair straddling two classes or numerics keys). A binding written
before the key held the numerics (a class alone) compares the class only, one written before it held the
micro-batch and world size (class and numerics identifier) compares those (:func:`same_key`): what its first
run had beyond them, the queue cannot tell.

Where it is kept: the grid's Optuna study user attributes: :data:`POLICY_ATTR` (set by ``harness queue``)
and one :data:`BIND_PREFIX` ``SIZE:BUDGET:SEED`` attribute per seed (set once, under a lock, by the first
run of the seed that trains; of two workers that claimed runs of an unbound seed at once, the first to
bind keeps its run and the other's is released, no retry spent); each claimed trial records its worker's
key in its user attribute :data:`TRIAL_ATTR` (``pair_key``; ``hardware`` in queues written before, read too). A
grid queued
before the option reads as the default. Tuning studies (``tune:NAME``) hold no pairs and are not bound.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from optuna.storages import BaseStorage

from harness.common.terms import DEFAULT_PAIR_HARDWARE, PAIR_HARDWARE, is_tune_grid, parse_run_id
from harness.design.config import RunConfig
from harness.models.numerics import SETTINGS_SEP
from harness.scheduling.queue.live_trials import LiveTrial
from harness.scheduling.queue.storage import grid_lock
from harness.scheduling.queue.trials import Claim, config_of

#: Study user attribute holding the grid's policy.
POLICY_ATTR = "pair_hardware"
#: Prefix of the study user attribute binding one seed (``SIZE:BUDGET:SEED``) to a key (:func:`pair_key`: class and numerics).
BIND_PREFIX = "pair_hardware:"
#: Trial user attribute: the key (:func:`pair_key`) of the worker that claimed the trial.
TRIAL_ATTR = "pair_key"
#: Its name in queues written before it held the numerics key beside the class (still read).
LEGACY_TRIAL_ATTR = "hardware"
#: Between the hardware class and the numerics identifier in a key (:func:`pair_key`).
NUMERICS_SEP = " + numerics "


def pair_key(hardware: str, numerics: str) -> str:
    """What ``pair_hardware = "same"`` compares: ``CLASS + numerics KEY``, e.g.
    ``cpu-amd-epyc-avx512/fp32/torch2.13.0/eager + numerics two_phase/2, micro-batch 16, world size 1`` (the
    hardware class of :func:`harness.train.environment.hardware_class` and the numerics key of
    :func:`harness.models.numerics.numerics_key`)."""
    return f"{hardware}{NUMERICS_SEP}{numerics}"


def same_key(bound: str, mine: str) -> bool:
    """Whether a worker of key ``mine`` may take a run of a seed bound to ``bound``: the same key; for a
    binding written before keys held the numerics (a class alone), the same class; for one written before
    they held the micro-batch size and world size (class and numerics identifier), the same of those."""
    if NUMERICS_SEP not in bound:
        return bound == mine.partition(NUMERICS_SEP)[0]
    if SETTINGS_SEP not in bound:
        return bound == mine.partition(SETTINGS_SEP)[0]
    return bound == mine


def seed_key(run_id: str) -> str:
    """``SIZE:BUDGET:SEED`` of a grid run id (:func:`harness.common.terms.parse_run_id`): what the runs of
    one seed in one cell share."""
    return parse_run_id(run_id).cell_seed()


def set_policy(storage: BaseStorage, study_id: int, policy: str) -> None:
    """Record a grid's ``pair_hardware`` on its study (``harness queue``; a later queue may change it)."""
    if policy not in PAIR_HARDWARE:
        raise ValueError(f"pair_hardware {policy!r}; allowed: {', '.join(PAIR_HARDWARE)}")
    if storage.get_study_user_attrs(study_id).get(POLICY_ATTR) != policy:
        storage.set_study_user_attr(study_id, POLICY_ATTR, policy)


def policy_of(attrs: dict) -> str:
    """The policy in a study's user attributes (a grid queued before the option: the default)."""
    return attrs.get(POLICY_ATTR, DEFAULT_PAIR_HARDWARE)


@dataclass
class PairGate:
    """A worker's check, before it takes a waiting trial, that the trial may run on its hardware class and
    numerics (:meth:`admit`), and the binding of a seed to them once a run of it trains (:meth:`bind`).

    Args:
        classify: ``classify(config) -> key``: the key this worker gives the run (:func:`pair_key` of its
            hardware class and numerics, :func:`harness.train.environment.run_numerics` with the worker's settings).
        anywhere: ``harness work --any-hardware``: bind seeds as usual but never hold a run back.

    Attributes:
        held: ``{run_id: key}`` of the runs the last claim left waiting for another key.
    """

    classify: Callable[[RunConfig], str]
    anywhere: bool = False
    held: dict[str, str] = field(default_factory=dict)
    _classes: dict[tuple, str] = field(default_factory=dict)  # run id without its seed -> class
    _attrs: dict[int, dict] = field(default_factory=dict)  # study id -> user attrs, for one claim

    def start(self) -> None:
        """Forget the study attributes read for the previous claim (bindings are added meanwhile)."""
        self._attrs.clear()
        self.held = {}

    def _class(self, run_id: str, config: Callable[[], RunConfig]) -> str | None:
        """This worker's key for the run ``run_id`` (``config()`` reads its config): one per variant, size and
        budget; ``None`` for a run it cannot classify (a bad ``[train]`` value: the claim's own check
        refuses the run, released)."""
        key = parse_run_id(run_id).without_seed()
        if key not in self._classes:
            try:
                self._classes[key] = self.classify(config())
            except ValueError:
                return None
        return self._classes[key]

    def _holds(self, attrs: dict, bound: str | None, mine: str) -> bool:
        """Whether a run of a seed bound to ``bound`` waits for a worker of that key rather than train here."""
        return (
            bound is not None
            and not same_key(bound, mine)
            and policy_of(attrs) == "same"
            and not self.anywhere
        )

    def admit(self, storage: BaseStorage, t: LiveTrial) -> tuple[bool, str | None]:
        """``(may take, this worker's key)`` for the waiting trial ``t``: held back (recorded in :attr:`held`)
        when its seed is bound to another key; a run of a seed not bound yet is taken, and binds it only once
        it trains (:meth:`bind`)."""
        if is_tune_grid(t.grid):
            return True, None
        mine = self._class(t.run_id, lambda: config_of(storage.get_trial(t.trial_id)))
        if mine is None:
            return True, None
        if t.study_id not in self._attrs:
            self._attrs[t.study_id] = storage.get_study_user_attrs(t.study_id)
        attrs = self._attrs[t.study_id]
        bound = attrs.get(BIND_PREFIX + seed_key(t.run_id))
        if self._holds(attrs, bound, mine):
            self.held[t.run_id] = bound
            return False, mine
        return True, mine

    def bind(self, storage: BaseStorage, study_id: int, claim: Claim) -> str | None:
        """Bind ``claim``'s seed to this worker's key as its run is about to train (in ``claim.grid``'s study
        ``study_id``), unless a run of the seed bound it already: set once, under a lock, so of two workers the
        first binds.

        Returns:
            The key the seed is bound to when it is another's and the run must wait for a worker of it (the
            caller releases the claim), else ``None``: bound to this key (now or before), ``any``, ``--any-
            hardware``, a tuning trial, or a run this worker cannot classify.
        """
        if is_tune_grid(claim.grid):
            return None
        mine = self._class(claim.run_id, lambda: claim.config)
        if mine is None:
            return None
        key = BIND_PREFIX + seed_key(claim.run_id)
        attrs = storage.get_study_user_attrs(study_id)
        if attrs.get(key) is None:
            with grid_lock(storage, f"{claim.grid}/pair-hardware"):
                attrs = storage.get_study_user_attrs(study_id)
                if attrs.get(key) is None:
                    storage.set_study_user_attr(study_id, key, mine)
                    return None
        bound = attrs[key]
        return bound if self._holds(attrs, bound, mine) else None


def waiting_for_hardware(storage: BaseStorage, runs: dict, study_ids: dict[str, int]) -> dict[str, list[str]]:
    """``{key: [run ids]}`` of queued runs of ``pair_hardware = "same"`` grids whose seed is bound to a
    key (:func:`pair_key`) that no running attempt's worker has (read from the trials' :data:`TRIAL_ATTR`).

    Args:
        runs: ``{run_id: RunState}`` (:meth:`harness.scheduling.queue.run_queue.RunQueue.runs`).
        study_ids: grid name -> study id (:meth:`~harness.scheduling.queue.run_queue.RunQueue.studies`).
    """
    live = {
        t.user_attrs.get(TRIAL_ATTR, t.user_attrs.get(LEGACY_TRIAL_ATTR))
        for r in runs.values()
        if r.state == "running"
        for t in r.trials
        if t.state.name == "RUNNING"
    }
    out: dict[str, list[str]] = {}
    attrs_of: dict[str, dict] = {}
    for r in runs.values():
        if r.state != "queued" or is_tune_grid(r.grid) or r.grid not in study_ids:
            continue
        if r.grid not in attrs_of:
            attrs_of[r.grid] = storage.get_study_user_attrs(study_ids[r.grid])
        attrs = attrs_of[r.grid]
        bound = attrs.get(BIND_PREFIX + seed_key(r.run_id))
        if (
            policy_of(attrs) == "same"
            and bound is not None
            and not any(same_key(bound, k) for k in live if k)
        ):
            out.setdefault(bound, []).append(r.run_id)
    return out


__all__ = [
    "POLICY_ATTR",
    "BIND_PREFIX",
    "TRIAL_ATTR",
    "LEGACY_TRIAL_ATTR",
    "NUMERICS_SEP",
    "pair_key",
    "same_key",
    "seed_key",
    "set_policy",
    "policy_of",
    "PairGate",
    "waiting_for_hardware",
]
