"""Re-train archived runs on this machine with their archived configs (the re-train check, DESIGN 13).

An archive (``harness archive``, read through :func:`harness.store.archive.read_archive`) holds every run's config as
queued and its final validation NLL. :func:`archived_runs` lists them, :func:`choose_seeds` picks K seeds
(pairs) where every variant of the grid is done, :func:`check_protocols` builds one run per archived
protocol hash and refuses, before anything trains, when this code gives a config another protocol hash
(another corpus, tokenizer, model shape, schedule or torch), and :func:`retrain` trains the chosen runs in
``workers`` processes of ``threads`` torch threads each, into a results folder of their own.

Each run is re-trained with the archive's numerics where this code still has them (DESIGN section 13): an
archived run's numerics (:attr:`ArchivedRun.numerics`: its result file's, else what its training commit
implies, :mod:`harness.models.numerics`) names a routing path and revision; where that is one of this code's
current identifiers the run trains on that path (the check then compares machines), else on the default
path (unknown numerics, or a revision this code no longer has: the check then measures code plus machine;
:func:`routing_for`, :func:`identity`). It re-trains at the micro-batch size its result file records (another
split of the batch re-rounds a run: DESIGN section 13, "Settings that re-round"; not recorded: the grid's, else
``auto``), and refuses a run recorded on more than one rank before anything trains (a re-training is one rank).
"""

from __future__ import annotations

import json
import multiprocessing
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, fields, replace
from pathlib import Path

from harness.common.files import atomic_write
from harness.common.terms import UNKNOWN
from harness.corpus.spec import parse_ref
from harness.design.config import RunConfig
from harness.models.numerics import DEFAULT_ROUTING, numerics_id, routing_of, run_numerics_of
from harness.store.archive import Archive
from harness.store.runfile import read_result, result_end, result_path
from harness.train.execution import ExecutionSettings, set_threads


class ProtocolChanged(ValueError):
    """This code gives an archived config another protocol hash than the archive records (one line)."""


@dataclass(frozen=True)
class ArchivedRun:
    """One done run of an archive: its config as queued, protocol hash, final val NLL (nats/token) and the
    numerics it trained with (its result file's; else what its training commit implies; else ``unknown``:
    :func:`harness.models.numerics.run_numerics_of`); the micro-batch size (sequences) and world size (ranks)
    its result file records, ``None`` where it does not (never guessed)."""

    config: RunConfig
    protocol_hash: str
    val_nll: float
    numerics: str = UNKNOWN
    micro_batch_size: int | None = None
    world_size: int | None = None

    @property
    def key(self) -> tuple[str, int]:
        """``(variant, seed)``."""
        return self.config.variant, self.config.seed


@dataclass(frozen=True)
class RetrainedRun:
    """A run trained again here: status (``done``/``diverged``), final val NLL (nats/token; None without one),
    the protocol hash this code gave it, its wall time in seconds, and what re-trained it, as its result file
    records: the training commit (``-dirty`` kept), numerics and hardware class, and from its environment record
    the CPU model, cores, torch version and torch threads it trained with; ``workers``: the processes training
    at once in the call that trained it, as that call recorded in the results folder (:func:`mark_folder`).
    None / :data:`UNKNOWN` where the record does not say (a folder or result file written before it did)."""

    run_id: str
    status: str
    val_nll: float | None
    protocol_hash: str
    wall_s: float
    code_version: str = UNKNOWN
    numerics: str = UNKNOWN
    hardware: str = UNKNOWN
    threads: int | None = None
    workers: int | None = None
    cpu_model: str = UNKNOWN
    cpu_cores: int | None = None
    torch: str = UNKNOWN


def _trained_on(environment: dict | None) -> dict:
    """What a run's environment record (:func:`harness.train.environment.environment_record`) says it trained on:
    the :class:`RetrainedRun` fields ``threads``, ``cpu_model``, ``cpu_cores``, ``torch`` (None / :data:`UNKNOWN`
    where it does not say)."""
    env = environment or {}
    cpu = env.get("cpu") or {}
    return {
        "threads": (env.get("run") or {}).get("threads"),
        "cpu_model": cpu.get("model") or UNKNOWN,
        "cpu_cores": cpu.get("cores"),
        "torch": (env.get("software") or {}).get("torch") or UNKNOWN,
    }


def routing_for(run: ArchivedRun) -> str:
    """The routing path ``run`` is re-trained with: its archived numerics' path where this code still has
    that revision (:func:`harness.models.numerics.routing_of`), else :data:`~harness.models.numerics.DEFAULT_ROUTING`."""
    return routing_of(run.numerics) or DEFAULT_ROUTING


def archived_runs(archive: Archive) -> list[ArchivedRun]:
    """Every run of ``archive`` that is ``done`` with a final NLL, its config read from the queue view (else
    from its result file's config, the fields of :class:`RunConfig`), sorted by variant and seed number."""
    queued = {r["config"]["run_id"]: r["config"] for r in archive.queue}
    commits = {rid: entry.get("code_version") for rid, entry in (archive.manifest.get("runs") or {}).items()}
    names = {f.name for f in fields(RunConfig)}
    out = []
    for run_id, data in archive.results.items():
        result = json.loads(data)
        end = result_end(result)
        if end["status"] != "done" or end["val_nll"] is None:
            continue
        run = result["run"]
        stored = queued.get(run_id) or {k: v for k, v in run["config"].items() if k in names}
        recorded = run.get("numerics") or (run.get("environment") or {}).get("numerics")
        numerics = run_numerics_of(recorded, run.get("code_version") or commits.get(run_id))
        out.append(
            ArchivedRun(
                RunConfig.from_dict(stored),
                run["protocol_hash"],
                float(end["val_nll"]),
                numerics,
                run.get("micro_batch_size"),
                run.get("world_size"),
            )
        )
    return sorted(out, key=lambda r: r.key)


def choose_seeds(runs: list[ArchivedRun], pairs: int, seeds: list[int] | None = None) -> list[int]:
    """The seeds to re-train: ``seeds`` if given, else the ``pairs`` smallest seeds at which every variant
    of ``runs`` is done.

    Raises:
        ValueError: fewer than ``pairs`` such seeds (naming how many there are), or a given seed missing one.
    """
    variants = sorted({r.config.variant for r in runs})
    by_seed: dict[int, set[str]] = {}
    for r in runs:
        by_seed.setdefault(r.config.seed, set()).add(r.config.variant)
    complete = sorted(s for s, v in by_seed.items() if len(v) == len(variants))
    if seeds is not None:
        missing = [s for s in seeds if s not in complete]
        if missing:
            raise ValueError(
                f"--seeds: seed {missing[0]} is not done for every variant ({', '.join(variants)}) in the archive; "
                f"complete seeds: {_seed_list(complete)}"
            )
        return list(seeds)
    if pairs > len(complete):
        raise ValueError(
            f"--pairs {pairs}: the archive has {len(complete)} seeds done for every variant "
            f"({_seed_list(complete)}); allowed: 2 to {len(complete)}"
        )
    return complete[:pairs]


def _seed_list(seeds: list[int]) -> str:
    return " ".join(map(str, seeds)) or "none"


def repoint(run: ArchivedRun, corpus: str | None) -> ArchivedRun:
    """``run`` reading ``corpus`` (made absolute) instead of its archived corpus; unchanged for None.
    Whether it is the same text is the protocol hash's question (:func:`check_protocols`)."""
    return (
        run
        if corpus is None
        else replace(run, config=replace(run.config, corpus=str(Path(corpus).resolve())))
    )


def _build_and_check(run: ArchivedRun, results_dir: Path, settings: ExecutionSettings):
    """Build ``run`` here; raise :class:`ProtocolChanged` when its protocol hash is not the archived one."""
    config = run.config
    ref = parse_ref(config.corpus)
    if ref is not None:  # an archive names its corpus by content: no path of the machine that wrote it
        raise FileNotFoundError(
            f"run {config.run_id} reads corpus {ref[1]} (fingerprint {ref[0][:16]}), which the archive names by "
            "its content, not a path: pass --corpus PATH to the same text on this machine"
        )
    if not config.corpus.startswith("hf:") and not Path(config.corpus).exists():
        raise FileNotFoundError(
            f"corpus {config.corpus} of run {config.run_id} does not exist on this machine; "
            "pass --corpus PATH to point the runs at the same text here"
        )
    # lazy: torch and Lightning load in seconds (4.7 s measured), so the refusals above come first
    from harness.train.protocol import protocol_hash
    from harness.train.runner import build

    built = build(config, results_dir, settings)
    got = protocol_hash(built.protocol)
    if got != run.protocol_hash:
        raise ProtocolChanged(
            f"run {config.run_id}: this code gives protocol hash {got[:12]}, the archive records "
            f"{run.protocol_hash[:12]} (another corpus, tokenizer, model shape, schedule or torch): "
            "re-training would not repeat the archived runs"
        )
    return built


def check_protocols(runs: list[ArchivedRun], results_dir: str | Path) -> None:
    """Build one run of each archived protocol hash among ``runs`` here (its corpus prepared in
    ``results_dir``'s cache; on the routing path it will re-train with) and compare hashes; nothing trains.

    Raises:
        ProtocolChanged: a hash differs (one line naming the run and both hashes).
        FileNotFoundError: a run's corpus does not exist here.
        ValueError: a run's result file records more than one rank (one line naming it).
    """
    for run in runs:
        if (run.world_size or 1) > 1:
            raise ValueError(
                f"run {run.config.run_id} trained on {run.world_size} ranks; harness retrain trains each run on one "
                "rank, which would re-round it (DESIGN section 13): re-train it with `harness run --devices "
                f"{run.world_size}`"
            )
    seen = set()
    for run in runs:
        if run.protocol_hash not in seen:
            seen.add(run.protocol_hash)
            _build_and_check(run, Path(results_dir), _settings(run))


def _settings(run: ArchivedRun, progress: bool = False) -> ExecutionSettings:
    """How ``run`` is re-trained: on :func:`routing_for`'s path at its recorded micro-batch size (``None``, not
    recorded: the grid's, else ``auto``), with ``harness work``'s progress display when ``progress``
    (:mod:`harness.train.progress`: a bar on a terminal of its own, else lines; ``$HARNESS_PROGRESS``)."""
    return ExecutionSettings(
        progress=progress, routing=routing_for(run), micro_batch_size=run.micro_batch_size
    )


def _retrain_one(payload: dict) -> RetrainedRun:
    """Train one archived run (a worker process's task): build, check its protocol hash, fit, record."""
    from harness.train.protocol import protocol_hash  # lazy: with build, see _build_and_check
    from harness.train.runner import fit, record

    set_threads(payload["threads"])
    run = ArchivedRun(
        RunConfig.from_dict(payload["config"]),
        payload["protocol_hash"],
        payload["val_nll"],
        payload["numerics"],
        payload["micro_batch_size"],
        payload["world_size"],
    )
    t0 = time.perf_counter()
    built = _build_and_check(run, Path(payload["results_dir"]), _settings(run, payload["progress"]))
    outcome = record(built, fit(built))
    env = built.environment
    return RetrainedRun(
        run.config.run_id,
        outcome.status,
        outcome.val_nll,
        protocol_hash(built.protocol),
        time.perf_counter() - t0,
        env["code_version"],
        env["numerics"],
        env["hardware"],
        workers=payload["workers"],
        **_trained_on(env),
    )


def retrain(
    runs: list[ArchivedRun],
    results_dir: str | Path,
    *,
    workers: int = 1,
    threads: int = 0,
    progress: bool = False,
    on_done=None,
) -> list[RetrainedRun]:
    """Train ``runs`` again into ``results_dir`` with their archived configs, ``workers`` at a time.

    Args:
        workers: processes training at once (1: in this process; more: spawned processes, none forked
            from a process that already runs torch threads).
        threads: torch CPU threads per worker (0: torch's default).
        progress: show each run's progress on stderr as ``harness work`` does (which run, tokens, tok/s, ETA;
            a bar on a terminal no other process trains on, else lines; ``$HARNESS_PROGRESS``), from every
            worker process.
        on_done: called with each :class:`RetrainedRun` as it finishes.

    Returns:
        The re-trained runs, in the order of ``runs``.

    Raises:
        ProtocolChanged: a run's protocol hash differs here (before it trains).
    """
    payloads = [
        {
            "config": r.config.to_dict(),
            "protocol_hash": r.protocol_hash,
            "val_nll": r.val_nll,
            "results_dir": str(Path(results_dir).resolve()),
            "threads": threads,
            "workers": max(workers, 1),
            "numerics": r.numerics,
            "micro_batch_size": r.micro_batch_size,
            "world_size": r.world_size,
            "progress": progress,
        }
        for r in runs
    ]
    done: dict[str, RetrainedRun] = {}
    if workers <= 1:
        for p in payloads:
            done[p["config"]["run_id"]] = out = _retrain_one(p)
            if on_done:
                on_done(out)
    else:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            for out in pool.map(_retrain_one, payloads):
                done[out.run_id] = out
                if on_done:
                    on_done(out)
    return [done[r.config.run_id] for r in runs]


MARKER = ".harness-retrain.json"  # in a results folder: which archive's runs were re-trained into it


def claim_folder(
    results_dir: str | Path, archive_sha256: str, runs: list[ArchivedRun]
) -> dict[str, RetrainedRun]:
    """Check ``results_dir`` may be the re-training folder of the archive with SHA-256 ``archive_sha256``; return the
    runs of ``runs`` already re-trained there by an earlier call for the same archive (done, same protocol
    hash, the numerics this call would train them with), which need not train again.

    Raises:
        ValueError: the folder holds a result of one of ``runs`` that no re-training of this archive wrote
            (e.g. the folder the archive was imported into, whose results are the archived ones), or one
            re-trained with other numerics than this code gives it (another code re-trained it).
    """
    results_dir = Path(results_dir)
    marker = _marker(results_dir)
    ours = marker.get("archive_sha256") == archive_sha256
    workers = (marker.get("workers") or {}) if ours else {}
    found = {}
    for r in runs:
        path = result_path(results_dir, r.config.run_id)
        if not path.exists():
            continue
        if not ours:
            raise ValueError(
                f"--results {str(results_dir)!r} already holds a result of {r.config.run_id} that no re-training "
                "of this archive wrote: re-train into another folder (not the one the archive was imported into)"
            )
        result = read_result(path)
        end, row = result_end(result), result["run"]
        numerics = run_numerics_of(row.get("numerics"), row.get("code_version"))
        if end["status"] == "done" and end["val_nll"] is not None and row["protocol_hash"] == r.protocol_hash:
            planned = numerics_id(routing_for(r))
            if numerics != planned:
                raise ValueError(
                    f"--results {str(results_dir)!r}: {r.config.run_id} was re-trained there with numerics "
                    f"{numerics}, this code re-trains it with {planned}: re-train into another folder"
                )
            found[r.config.run_id] = RetrainedRun(
                r.config.run_id,
                "done",
                float(end["val_nll"]),
                r.protocol_hash,
                float(row["wall_s"]),
                row.get("code_version") or UNKNOWN,
                numerics,
                row.get("hardware") or UNKNOWN,
                workers=workers.get(r.config.run_id),
                **_trained_on(row.get("environment")),
            )
    return found


def _marker(results_dir: Path) -> dict:
    """The folder's :data:`MARKER` record (``{}`` without one)."""
    marker = results_dir / MARKER
    return json.loads(marker.read_text()) if marker.is_file() else {}


def mark_folder(
    results_dir: str | Path, archive_sha256: str, workers: int | None = None, run_ids: list[str] = ()
) -> None:
    """Record in ``results_dir`` that the runs re-trained into it are of the archive ``archive_sha256``
    (what :func:`claim_folder` reads back), and, before they train, that this call trains ``run_ids`` with
    ``workers`` processes at once (``{"workers": {run_id: workers}}``, kept across calls: a run re-trained
    again by a later call takes that call's). A run's torch threads are its own result file's record."""
    results_dir = Path(results_dir)
    results_dir.mkdir(parents=True, exist_ok=True)
    old = _marker(results_dir)
    kept = (old.get("workers") or {}) if old.get("archive_sha256") == archive_sha256 else {}
    if workers is not None:
        kept = {**kept, **dict.fromkeys(run_ids, max(workers, 1))}
    record = {"archive_sha256": archive_sha256, "workers": dict(sorted(kept.items()))}
    atomic_write(results_dir / MARKER, json.dumps(record) + "\n")


def identity(archived: list[ArchivedRun], new: list[RetrainedRun]) -> dict:
    """What re-trained ``new`` (the re-trainings of ``archived``, in the same order), as their result files
    record it, and whether it used the archive's numerics (DESIGN section 13)::

        {"commit", "numerics", "hardware", "archive_numerics", "archive_numerics_used"}

    ``commit``, ``numerics``, ``hardware`` and ``archive_numerics``: the one value, or ``"A (3 runs), B (1
    run)"`` (most first) when the runs differ (a check cut short, resumed by other code or on another
    machine); :data:`UNKNOWN` where a record lacks it. ``archive_numerics_used``: every run re-trained with
    its archived numerics; where not, the check measures code plus machine."""
    return {
        "commit": _tally(n.code_version for n in new),
        "numerics": _tally(n.numerics for n in new),
        "hardware": _tally(n.hardware for n in new),
        "archive_numerics": _tally(a.numerics for a in archived),
        "archive_numerics_used": bool(new)
        and all(a.numerics == n.numerics for a, n in zip(archived, new, strict=True)),
    }


def _tally(values):
    """The one value of ``values`` (its type kept), :data:`UNKNOWN` where none is recorded, or ``"A (3 runs),
    B (1 run)"`` (most first) where the runs differ or only some record it."""
    counts = Counter(UNKNOWN if v is None or v == "" else v for v in values)
    if len(counts) <= 1:
        return next(iter(counts), UNKNOWN)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], str(kv[0])))
    return ", ".join(f"{v} ({n} run{'s' if n > 1 else ''})" for v, n in ranked)


def machine(new: list[RetrainedRun]) -> dict:
    """What produced the new numbers, as recorded when the runs ``new`` trained (not this call's options; no
    path or host name): CPU model, cores and torch version (each run's environment record), the workers (the
    results folder's record of the call that trained each run) and torch threads per worker (each run's
    environment record), each the one value, ``"A (3 runs), B (1 run)"`` where the runs differ, or
    :data:`UNKNOWN` where not recorded; ``settings`` says where they were read. The re-trained runs' commit,
    numerics and hardware class are their result files' too (:func:`identity`)."""
    return {
        "cpu_model": _tally(n.cpu_model for n in new),
        "cpu_cores": _tally(n.cpu_cores for n in new),
        "torch": _tally(n.torch for n in new),
        "workers": _tally(n.workers for n in new),
        "threads_per_worker": _tally(n.threads for n in new),
        "settings": "as trained",
    }


__all__ = [
    "MARKER",
    "ArchivedRun",
    "ProtocolChanged",
    "RetrainedRun",
    "archived_runs",
    "check_protocols",
    "choose_seeds",
    "claim_folder",
    "identity",
    "machine",
    "mark_folder",
    "repoint",
    "retrain",
    "routing_for",
]
