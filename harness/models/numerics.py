"""Numerics lineage: which rounding the training code gives a run (DESIGN section 13).

Floats are bit-identical on one machine only (DESIGN section 4), and on one machine only for one code:
two codes that compute the same function round differently. Two-phase and per-site routing
(:mod:`harness.models.routing`) agree to ~1e-6 a step in float32, and over a study's hundreds of steps
that grows to the size of a machine change. So the code carries a *numerics revision* per routing path
it keeps, and every result file records the one its run trained with (``environment.numerics``, the
``runs.numerics`` column); ``[schedule] pair_hardware = "same"`` compares it beside the hardware class
(a seed never straddles two numerics), and the report shows it beside hardware.

A numerics identifier is ``PATH/REVISION``: ``two_phase/2``, ``per_site/1`` (:func:`numerics_id`).
:data:`LINEAGE` says what code each identifier was; an identifier that is not a current path's
(``two_phase/1``) is one this code can no longer train with.

Runs written before the record read as their training commit implies where that is known
(:data:`KNOWN_COMMITS`, :func:`implied_numerics`), else :data:`UNKNOWN`: never a guess.

A run's *numerics key* (:func:`numerics_key`) is the identifier with the execution settings that re-round it
beside the code (DESIGN section 13, "Settings that re-round"): the micro-batch size as resolved (gradients
accumulate over another split: another float sum) and the world size (ranks sum gradients in another order),
``two_phase/2, micro-batch 16, world size 1``. Every result file and ``runs`` row records the three
(``numerics``, ``micro_batch_size``, ``world_size``); a run that does not is :data:`UNKNOWN` there.

Light on purpose (no torch): the report and the queue read it.
"""

from __future__ import annotations

from harness.common.terms import UNKNOWN

#: How routing sites are computed (the same function, rounded differently at ~1e-6): ``two_phase`` reads a
#: block's completed sources once for all its sites (:class:`~harness.models.routing.BlockPrefix`);
#: ``per_site`` reads them at every site (:func:`~harness.models.routing.mix_routes`). A run picks one
#: with the execution setting ``routing`` (:class:`harness.train.execution.ExecutionSettings`).
ROUTING_PATHS = ("two_phase", "per_site")
#: The path a run trains with unless its grid or command line says otherwise.
DEFAULT_ROUTING = "two_phase"

#: The numerics revision of each routing path. BUMP A PATH'S NUMBER in the commit of any change that
#: changes a float of a run trained on it: routing, attention, MLP, norms, initialisation, loss, the
#: optimiser or its schedule, micro-batching, a kernel choice (a change to shared code bumps both paths).
#: Then add the old identifier's line to :data:`LINEAGE` and regenerate the float64 golden that
#: tests/train/test_numerics_golden.py checks:
#: ``.venv/bin/python tests/train/numerics_golden.py --write`` (docs/design.md, "Numerics lineage").
NUMERICS_REVISIONS = {"two_phase": 2, "per_site": 1}

#: What code each numerics identifier was (established by re-running the commits named on this machine:
#: tiny runs and float32/float64 gradients compared bit for bit; docs/design.md, "Numerics lineage").
LINEAGE = {
    "per_site/1": "per-site routing: the only path before 0106e74, kept since behind routing = per_site",
    "two_phase/1": "two-phase routing from 0106e74 (the default) to d299c74: the running maxima differentiated",
    "two_phase/2": "two-phase routing from d299c74: the running maxima not differentiated",
}

#: Training commits of runs written before the record (the committed studies' archives) -> the numerics
#: they trained with, each checked by re-running that commit here (a tiny run, float32 and float64
#: gradients of three variants) against this code's paths, bit for bit.
KNOWN_COMMITS = {
    # reports/factorial_study (96 runs): per-site, bit-identical to this code's per_site
    "0ab9ba51950dd714a847e87c22960e5aebb96136": "per_site/1",
    # reports/cpu_study, demo, sample: two-phase before d299c74 (float32 gradients 4e-7 to 8e-7 from two_phase/2)
    "b217dbbbb3df01385227a61195141710cb9960ed": "two_phase/1",
}


def numerics_id(routing: str) -> str:
    """The numerics identifier this code trains the routing path ``routing`` with: ``PATH/REVISION``.

    Raises:
        ValueError: ``routing`` is not one of :data:`ROUTING_PATHS`.
    """
    if routing not in NUMERICS_REVISIONS:
        raise ValueError(f"routing={routing!r}; allowed: {', '.join(ROUTING_PATHS)}")
    return f"{routing}/{NUMERICS_REVISIONS[routing]}"


def routing_of(numerics: str) -> str | None:
    """The routing path this code trains with to reproduce ``numerics``: the path when ``numerics`` is its
    current identifier, else ``None`` (unknown, or a revision this code no longer has)."""
    path = numerics.partition("/")[0]
    return path if path in NUMERICS_REVISIONS and numerics_id(path) == numerics else None


#: Between the numerics identifier and the re-rounding settings in a numerics key (:func:`numerics_key`).
SETTINGS_SEP = ", micro-batch "


def numerics_key(numerics: str, micro_batch_size: int | str | None, world_size: int | None) -> str:
    """A run's numerics key: ``NUMERICS, micro-batch M, world size W`` (``two_phase/2, micro-batch 16, world
    size 1``). ``micro_batch_size``: sequences per micro-batch as resolved, or ``auto`` where it is resolved only at
    the fit's start (probed on CUDA, :mod:`harness.train.microbatch`); ``None`` (not recorded) and a missing
    ``world_size`` read :data:`UNKNOWN`."""
    micro = UNKNOWN if micro_batch_size is None else micro_batch_size
    world = UNKNOWN if world_size is None else world_size
    return f"{numerics}{SETTINGS_SEP}{micro}, world size {world}"


def implied_numerics(code_version: str | None) -> str:
    """The numerics of a run written before the record, from its training commit (``runs.code_version``,
    ``-dirty`` kept): :data:`KNOWN_COMMITS`' entry, else :data:`UNKNOWN` (a dirty tree is unknown too)."""
    return KNOWN_COMMITS.get(code_version or "", UNKNOWN)


def run_numerics_of(recorded: str | None, code_version: str | None) -> str:
    """A run's numerics: ``recorded`` (its result file's) where present, else :func:`implied_numerics`."""
    return recorded or implied_numerics(code_version)


__all__ = [
    "ROUTING_PATHS",
    "DEFAULT_ROUTING",
    "NUMERICS_REVISIONS",
    "LINEAGE",
    "KNOWN_COMMITS",
    "numerics_id",
    "routing_of",
    "implied_numerics",
    "run_numerics_of",
    "SETTINGS_SEP",
    "numerics_key",
]
