"""Chaos check of the run queue (DESIGN section 10): SIGKILL random workers while a grid drains.

    python tests/chaos.py --cells 24 --workers 3 --kills 10 --seed 0
    python tests/chaos.py --cells 12 --kills 4 --storage postgresql://USER@HOST/DB

A grid of tiny cells on real text (the FineWeb-Edu sample, ``tiny`` preset, 2 variants x
cells/2 seeds, a budget of a few seconds per cell) is queued, and ``--workers`` real
``harness work`` processes (``--wait``, one CPU thread, a short ``--lease-s``) drain it. At
random times (seeded) a random worker is SIGKILLed, mostly one holding a run, and a new one
is started in its place (a run is hit at most MAX_RECLAIMS times: past that the queue leaves
it failed on purpose, as a run that keeps killing its worker). Once
the queue shows every cell finished, the workers are stopped and the script checks, per cell:

* done exactly once: the queue holds exactly one COMPLETE trial, and its result file was
  written once (the script watches the files' inodes: each write is an atomic rename);
* nothing lost: the queue says ``done`` and DuckDB's ``final`` view has its NLL;
* the final validation NLL equals, bit for bit, the same cell trained by one uninterrupted
  worker in another results folder (the reference; trained first, journal queue).

It prints one line per kill and a summary; the exit status is 0 only if every check held.
The test suite runs a small version (tests/scheduling/test_scaleout.py); its functions are importable.
"""

from __future__ import annotations

import argparse
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import warm

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO.parent / "shared" / "data" / "fineweb_edu_sample"
GRID_NAME = "chaos"
BUDGET_TOKENS = 32768  # 32 steps of 1024 tokens: about a second of training per cell on one thread
GRID = """\
name = "{name}"
corpus = "{corpus}"
sizes = ["tiny"]
seeds = {seeds}
budgets_tokens = [{budget}]

[variants]
block_attnres = "parent"
rd_attnres = "treatment"

# a load and fault test, not a study: as many seeds as it asks for (harness queue refuses a cell with more
# seeds than its plan's max_seeds, default 30); the same for every size, so one reference serves them all
[analysis]
max_seeds = 100_000

[train]
vocab_size = 512
batch_tokens = 1024
eval_tokens = 2048
eval_every_tokens = 16384
checkpoint_every_tokens = 2048
"""


def write_grid(path: Path, cells: int, *, corpus: Path = SAMPLE, budget: int = BUDGET_TOKENS) -> Path:
    """The chaos grid of ``cells`` cells (2 variants x cells/2 seeds) as TOML at ``path``.

    Grids of different sizes share their cells (same name and settings), so one reference
    serves them all.

    Raises:
        ValueError: ``cells`` odd or below 2.
    """
    check_cells(cells)
    path.write_text(GRID.format(name=GRID_NAME, corpus=corpus, seeds=list(range(cells // 2)), budget=budget))
    return path


def check_cells(cells: int) -> None:
    """Raises ``ValueError`` unless ``cells`` is even and >= 2 (2 variants x cells/2 seeds)."""
    if cells < 2 or cells % 2:
        raise ValueError(f"--cells {cells}: must be an even number >= 2 (2 variants x cells/2 seeds)")


def harness(*args: str) -> list[str]:
    """The ``harness`` command line run with this interpreter."""
    return [sys.executable, "-m", "harness", *args]


def _storage_args(storage: str | None) -> list[str]:
    return ["--storage", storage] if storage else []


def queue_grid(grid: Path, results: Path, storage: str | None = None) -> None:
    """``harness queue GRID`` (raises ``RuntimeError`` with its output if it fails)."""
    proc = warm.run(
        harness("queue", str(grid), "--results", str(results), *_storage_args(storage)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"harness queue failed ({proc.returncode}): {proc.stdout}{proc.stderr}")


def final_values(results: Path) -> dict[str, float]:
    """``run_id -> val_nll`` (nats/token) of the ``done`` runs in DuckDB's ``final`` view."""
    sys.path.insert(0, str(REPO))
    from harness.store.store import Store

    frame = Store(results).query("select run_id, val_nll from final")  # final: status done only
    return dict(zip(frame["run_id"].to_list(), frame["val_nll"].to_list()))


def reference(
    workdir: Path, cells: int, *, corpus: Path = SAMPLE, budget: int = BUDGET_TOKENS
) -> dict[str, float]:
    """Train every cell with one uninterrupted worker on a journal queue in ``workdir``;
    returns ``run_id -> val_nll``.

    Raises:
        RuntimeError: the worker failed or a cell has no result.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    results = workdir / "results"
    grid = write_grid(workdir / "chaos.toml", cells, corpus=corpus, budget=budget)
    queue_grid(grid, results)
    proc = warm.run(
        harness("work", "--results", str(results), "--threads", "1", "--quiet"),
        capture_output=True,
        text=True,
        timeout=1800,
    )
    values = final_values(results)
    if proc.returncode != 0 or len(values) != cells:
        raise RuntimeError(
            f"reference worker: exit {proc.returncode}, {len(values)} of {cells} cells done\n"
            f"{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
        )
    return values


@dataclass
class Summary:
    """What one chaos run saw (counts of cells unless said otherwise)."""

    cells: int
    workers: int
    kills: int = 0  # SIGKILLs sent
    kills_mid_run: int = 0  # ... to a worker holding a run at that moment
    resumed: int = 0  # runs resumed from a checkpoint (workers' "resuming from step" lines)
    reclaimed: int = 0  # runs reclaimed from a dead worker (workers' "reclaimed" lines)
    done: int = 0  # cells the queue shows done
    exits: int = 0  # workers that exited by themselves (none should: they run with --wait)
    duplicates: list[str] = field(default_factory=list)  # >1 COMPLETE trial or >1 result write
    lost: list[str] = field(default_factory=list)  # not done in the queue, or no NLL in DuckDB
    differed: list[str] = field(default_factory=list)  # final NLL != the reference's
    wall_s: float = 0.0
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return (
            self.done == self.cells
            and not (self.duplicates or self.lost or self.differed)
            and not self.exits
            and not self.timed_out
        )

    def line(self) -> str:
        return (
            f"chaos: {self.cells} cells, {self.workers} workers, {self.kills} kills "
            f"({self.kills_mid_run} mid-run), {self.reclaimed} runs reclaimed, {self.resumed} resumed "
            f"from a checkpoint; done {self.done}/{self.cells}, duplicates {len(self.duplicates)}, "
            f"lost {len(self.lost)}, NLL differed {len(self.differed)} (vs an uninterrupted reference), "
            f"workers exited by themselves {self.exits}; {self.wall_s:.0f} s"
            + (" (TIMED OUT)" if self.timed_out else "")
            + (
                ""
                if self.ok
                else f"\n  duplicates: {self.duplicates}\n  lost: {self.lost}\n  differed: {self.differed}"
            )
        )


class _Writes:
    """Counts atomic writes of result files by watching their inodes (each write is a rename)."""

    def __init__(self, runs_dir: Path) -> None:
        self.runs_dir = runs_dir
        self.inode: dict[str, int] = {}
        self.count: Counter = Counter()

    def poll(self) -> None:
        if not self.runs_dir.is_dir():
            return
        for f in self.runs_dir.glob("*.json"):
            try:
                ino = f.stat().st_ino
            except FileNotFoundError:
                continue
            if self.inode.get(f.name) != ino:
                self.inode[f.name] = ino
                self.count[f.name] += 1


def chaos(
    workdir: Path,
    *,
    cells: int,
    workers: int = 3,
    kills: int = 3,
    seed: int = 0,
    storage: str | None = None,
    ref: dict[str, float] | None = None,
    lease_s: float = 3.0,
    kill_every_s: tuple[float, float] = (1.0, 3.0),
    p_idle: float = 0.25,
    mid_run_only: bool = False,
    corpus: Path = SAMPLE,
    budget: int = BUDGET_TOKENS,
    timeout_s: float = 900.0,
    log=print,
) -> Summary:
    """Queue the chaos grid, drain it with ``workers`` workers while killing ``kills`` of them
    at random (seeded by ``seed``), then check it (see the module docstring).

    Args:
        workdir: fresh folder for the grid, the results (``workdir/results``) and worker logs.
        storage: ``--storage`` of the queue (default: the results folder's journal).
        ref: ``run_id -> val_nll`` of uninterrupted runs (default: :func:`reference` in
            ``workdir/reference`` first).
        lease_s: the workers' ``--lease-s`` (seconds), short so lost leases come back soon.
        kill_every_s: a kill comes this many seconds (uniform) after the previous one, the
            first after the first run started. The victim is a random worker among those
            holding a run; when none does, with probability ``p_idle`` a random worker
            (starting up or between runs), else the kill waits 0.5 s and looks again.
        mid_run_only: kill only workers that hold a run at that moment.
        timeout_s: give up (``timed_out``) if the grid has not drained by then.
    """
    sys.path.insert(0, str(REPO))
    from optuna.trial import TrialState

    from harness.scheduling.queue.run_queue import RunQueue
    from harness.scheduling.workers.retry import MAX_RECLAIMS

    workdir.mkdir(parents=True, exist_ok=True)
    if ref is None:
        ref = reference(workdir / "reference", cells, corpus=corpus, budget=budget)
    results = workdir / "results"
    logs = workdir / "logs"
    logs.mkdir(exist_ok=True)
    grid = write_grid(workdir / "chaos.toml", cells, corpus=corpus, budget=budget)
    queue_grid(grid, results, storage)
    rng = random.Random(seed)
    summary = Summary(cells=cells, workers=workers)
    writes = _Writes(results / "runs")
    started = 0

    def start() -> subprocess.Popen:
        nonlocal started
        started += 1
        out = open(logs / f"worker-{started:02d}.log", "wb")
        try:
            return warm.popen(
                harness(
                    "work",
                    "--results",
                    str(results),
                    *_storage_args(storage),
                    "--wait",
                    "--poll-s",
                    "0.5",
                    "--lease-s",
                    str(lease_s),
                    "--storage-retry-s",
                    "30",
                    "--threads",
                    "1",
                ),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        finally:
            out.close()

    def queue() -> RunQueue:
        return RunQueue.open(storage, results, create=False, retry_s=30)

    def holders() -> dict[int, str]:  # worker pid -> the run it holds
        return {
            r.lease.pid: rid
            for rid, r in queue().runs(GRID_NAME).items()
            if r.state == "running" and r.lease is not None
        }

    killed_runs: Counter = Counter()  # run_id -> kills of a worker holding it
    t0 = time.monotonic()
    procs = [start() for _ in range(workers)]
    next_kill = float("inf")  # the kill clock starts when the first run is being trained
    next_check = t0
    try:
        while True:
            writes.poll()
            now = time.monotonic()
            if now > t0 + timeout_s:
                summary.timed_out = True
                break
            if now >= next_check:
                next_check = now + 0.5
                finished, total = queue().progress(GRID_NAME)
                if total and finished == total:
                    break
                if next_kill == float("inf") and holders():
                    next_kill = now + rng.uniform(*kill_every_s)
            for i, p in enumerate(procs):  # a worker that exited by itself is a bug: restart, note it
                if p.poll() is not None:
                    summary.exits += 1
                    log(f"worker pid {p.pid} exited by itself with {p.returncode}; started another")
                    procs[i] = start()
            if summary.kills < kills and now >= next_kill:
                # the victim: a random worker holding a run; when none does, now and then
                # (p_idle) any worker (starting up or between runs), else look again soon
                # a run is not killed more than MAX_RECLAIMS times: the queue would then (by
                # design: a run that keeps killing its worker) leave it failed
                held = holders()
                spared = {pid for pid, rid in held.items() if killed_runs[rid] >= MAX_RECLAIMS}
                holding = {pid: rid for pid, rid in held.items() if pid not in spared}
                mid = [i for i, p in enumerate(procs) if p.pid in holding]
                idle_ok = not mid_run_only and rng.random() < p_idle
                victims = mid or ([i for i, p in enumerate(procs) if p.pid not in spared] if idle_ok else [])
                if not victims:
                    next_kill = now + 0.5
                else:
                    i = rng.choice(victims)
                    p = procs[i]
                    p.send_signal(signal.SIGKILL)
                    p.wait()
                    summary.kills += 1
                    summary.kills_mid_run += p.pid in holding
                    if p.pid in holding:
                        killed_runs[holding[p.pid]] += 1
                    what = f"holding {holding[p.pid]}" if p.pid in holding else "holding no run"
                    log(f"kill {summary.kills}/{kills} at {now - t0:.1f} s: worker pid {p.pid} ({what})")
                    procs[i] = start()
                    next_kill = now + rng.uniform(*kill_every_s)
            time.sleep(0.05)
    finally:
        for p in procs:  # idle (--wait) workers: SIGTERM ends them cleanly
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        writes.poll()
    summary.wall_s = time.monotonic() - t0

    text = "\n".join(f.read_text(errors="replace") for f in sorted(logs.glob("worker-*.log")))
    summary.resumed = text.count("resuming from step")
    summary.reclaimed = sum(line.startswith("reclaimed ") for line in text.splitlines())
    runs = queue().runs(GRID_NAME)
    values = final_values(results)
    from harness.scheduling.grids.grid import load_grid
    from harness.store.validate import result_filename

    for rid in (c.run_id for c in load_grid(grid).expand()):
        r = runs.get(rid)
        if r is None or r.state != "done" or rid not in values:
            summary.lost.append(
                f"{rid} ({r.state if r else 'not in the queue'}, "
                f"{'NLL' if rid in values else 'no NLL'} in DuckDB)"
            )
            continue
        summary.done += 1
        n_complete = sum(t.state == TrialState.COMPLETE for t in r.trials)
        n_writes = writes.count[result_filename(rid)]
        if n_complete != 1 or n_writes != 1:
            summary.duplicates.append(f"{rid} ({n_complete} complete trials, {n_writes} result writes)")
        if values[rid] != ref.get(rid):
            summary.differed.append(f"{rid} ({values[rid]!r} vs reference {ref.get(rid)!r})")
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--cells", type=int, default=12, help="cells in the grid (even; default 12)")
    ap.add_argument("--workers", type=int, default=3, help="worker processes (default 3)")
    ap.add_argument("--kills", type=int, default=4, help="SIGKILLs to send (default 4)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the kill times and victims (default 0)")
    ap.add_argument("--storage", default=None, help="queue storage URL (default: a journal in the results)")
    ap.add_argument(
        "--budget-tokens", type=int, default=BUDGET_TOKENS, help=f"per cell (default {BUDGET_TOKENS})"
    )
    ap.add_argument("--corpus", type=Path, default=SAMPLE, help="corpus (default: the FineWeb-Edu sample)")
    ap.add_argument(
        "--dir", type=Path, default=None, help="work folder, kept (default: a temp folder, removed)"
    )
    args = ap.parse_args(argv)
    import shutil
    import tempfile

    try:
        check_cells(args.cells)
    except ValueError as exc:
        print(f"chaos: error: {exc}", file=sys.stderr)
        return 2
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="rd-harness-chaos-"))
    try:
        t0 = time.monotonic()
        ref = reference(workdir / "reference", args.cells, corpus=args.corpus, budget=args.budget_tokens)
        print(f"reference: {len(ref)} cells trained uninterrupted in {time.monotonic() - t0:.0f} s")
        summary = chaos(
            workdir / "chaos",
            cells=args.cells,
            workers=args.workers,
            kills=args.kills,
            seed=args.seed,
            storage=args.storage,
            ref=ref,
            corpus=args.corpus,
            budget=args.budget_tokens,
        )
        print(summary.line())
        return 0 if summary.ok else 1
    finally:
        if args.dir is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
