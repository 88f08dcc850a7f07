"""Re-train archived runs on this machine with their archived configs (the cross-machine A/A check, DESIGN 13).

An archive (``harness archive``, read through :func:`harness.store.archive.read_archive`) holds every run's config as
queued and its final validation NLL. :func:`archived_runs` lists them, :func:`choose_seeds` picks K seeds
(pairs) where every variant of the grid is done, :func:`check_protocols` builds one run per archived
protocol hash and refuses, before anything trains, when this code gives a config another protocol hash
(another corpus, tokenizer, model shape, schedule or torch), and :func:`retrain` trains the chosen runs in
``workers`` processes of ``threads`` torch threads each, into a results folder of their own.
"""

from __future__ import annotations

import json
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, fields, replace
from pathlib import Path

from harness.common.files import atomic_write
from harness.corpus.spec import parse_ref
from harness.design.config import RunConfig
from harness.store.archive import Archive
from harness.store.runfile import read_result, result_end, result_path
from harness.train.execution import ExecutionSettings, set_threads
from harness.train.protocol import protocol_hash
from harness.train.runner import build, fit, record


class ProtocolChanged(ValueError):
    """This code gives an archived config another protocol hash than the archive records (one line)."""


@dataclass(frozen=True)
class ArchivedRun:
    """One done run of an archive: its config as queued, protocol hash and final val NLL (nats/token)."""

    config: RunConfig
    protocol_hash: str
    val_nll: float

    @property
    def key(self) -> tuple[str, int]:
        """``(variant, seed)``."""
        return self.config.variant, self.config.seed


@dataclass(frozen=True)
class RetrainedRun:
    """A run trained again here: status (``done``/``diverged``), final val NLL (nats/token; None without one),
    the protocol hash this code gave it, and its wall time in seconds."""

    run_id: str
    status: str
    val_nll: float | None
    protocol_hash: str
    wall_s: float


def archived_runs(archive: Archive) -> list[ArchivedRun]:
    """Every run of ``archive`` that is ``done`` with a final NLL, its config read from the queue view (else
    from its result file's config, the fields of :class:`RunConfig`), sorted by variant and seed number."""
    queued = {r["config"]["run_id"]: r["config"] for r in archive.queue}
    names = {f.name for f in fields(RunConfig)}
    out = []
    for run_id, data in archive.results.items():
        result = json.loads(data)
        end = result_end(result)
        if end["status"] != "done" or end["val_nll"] is None:
            continue
        stored = queued.get(run_id) or {k: v for k, v in result["run"]["config"].items() if k in names}
        out.append(
            ArchivedRun(RunConfig.from_dict(stored), result["run"]["protocol_hash"], float(end["val_nll"]))
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
    built = build(config, results_dir, settings)
    got = protocol_hash(built.protocol)
    if got != run.protocol_hash:
        raise ProtocolChanged(
            f"run {config.run_id}: this code gives protocol hash {got[:12]}, the archive records "
            f"{run.protocol_hash[:12]} (another corpus, tokenizer, model shape, schedule or torch): "
            "re-training would not repeat the archived runs"
        )
    return built


def check_protocols(runs: list[ArchivedRun], results_dir: str | Path, settings: ExecutionSettings) -> None:
    """Build one run of each archived protocol hash among ``runs`` here (its corpus prepared in
    ``results_dir``'s cache) and compare hashes; nothing trains.

    Raises:
        ProtocolChanged: a hash differs (one line naming the run and both hashes).
        FileNotFoundError: a run's corpus does not exist here.
    """
    seen = set()
    for run in runs:
        if run.protocol_hash not in seen:
            seen.add(run.protocol_hash)
            _build_and_check(run, Path(results_dir), settings)


def _retrain_one(payload: dict) -> RetrainedRun:
    """Train one archived run (a worker process's task): build, check its protocol hash, fit, record."""
    set_threads(payload["threads"])
    run = ArchivedRun(RunConfig.from_dict(payload["config"]), payload["protocol_hash"], payload["val_nll"])
    t0 = time.perf_counter()
    built = _build_and_check(run, Path(payload["results_dir"]), ExecutionSettings(progress=False))
    outcome = record(built, fit(built))
    return RetrainedRun(
        run.config.run_id,
        outcome.status,
        outcome.val_nll,
        protocol_hash(built.protocol),
        time.perf_counter() - t0,
    )


def retrain(
    runs: list[ArchivedRun], results_dir: str | Path, *, workers: int = 1, threads: int = 0, on_done=None
) -> list[RetrainedRun]:
    """Train ``runs`` again into ``results_dir`` with their archived configs, ``workers`` at a time.

    Args:
        workers: processes training at once (1: in this process; more: spawned processes, none forked
            from a process that already runs torch threads).
        threads: torch CPU threads per worker (0: torch's default).
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
    hash), which need not train again.

    Raises:
        ValueError: the folder holds a result of one of ``runs`` that no re-training of this archive wrote
            (e.g. the folder the archive was imported into, whose results are the archived ones).
    """
    results_dir = Path(results_dir)
    marker = results_dir / MARKER
    ours = marker.is_file() and json.loads(marker.read_text()).get("archive_sha256") == archive_sha256
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
        end = result_end(result)
        if (
            end["status"] == "done"
            and end["val_nll"] is not None
            and result["run"]["protocol_hash"] == r.protocol_hash
        ):
            found[r.config.run_id] = RetrainedRun(
                r.config.run_id,
                "done",
                float(end["val_nll"]),
                r.protocol_hash,
                float(result["run"]["wall_s"]),
            )
    return found


def mark_folder(results_dir: str | Path, archive_sha256: str) -> None:
    """Record in ``results_dir`` that the runs re-trained into it are of the archive ``archive_sha256``
    (what :func:`claim_folder` reads back)."""
    Path(results_dir).mkdir(parents=True, exist_ok=True)
    atomic_write(Path(results_dir) / MARKER, json.dumps({"archive_sha256": archive_sha256}) + "\n")


def machine(workers: int, threads: int, config: RunConfig | None = None) -> dict:
    """What produced the new numbers, without a path or host name: CPU model, cores, torch version, the
    workers and torch threads per worker (0 resolved to torch's default), and the hardware class the
    re-trained runs get here (:func:`harness.train.environment.run_class` of ``config``, an archived run's
    config, under the settings :func:`retrain` trains with; ``unknown`` without one). Read once per process
    (:func:`harness.train.environment.machine_record`)."""
    import torch  # lazy: torch loads only to train

    from harness.train.environment import UNKNOWN, machine_record, run_class  # lazy: torch, as above

    record = machine_record()
    return {
        "cpu_model": record["cpu"]["model"] or "unknown",
        "cpu_cores": record["cpu"]["cores"],
        "torch": torch.__version__,
        "workers": workers,
        "threads_per_worker": threads or torch.get_num_threads(),
        "hardware": run_class(config, ExecutionSettings(progress=False)) if config is not None else UNKNOWN,
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
    "machine",
    "mark_folder",
    "repoint",
    "retrain",
]
