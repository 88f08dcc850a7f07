"""Load test of the run queue: N workers drain a grid through the real worker loop, the queue alone measured.

    python scripts/queue_load.py --workers 16 --runs 200 --postgres
    python scripts/queue_load.py --workers 16 --runs 200 --postgres --history 20000
    python scripts/queue_load.py --workers 8 --runs 100 --kill 2 --storage postgresql://USER@HOST/DB
    python scripts/queue_load.py --workers 16 --runs 200               # a journal file in a temp folder

Each worker is a process running :func:`harness.scheduling.workers.loop.work` on its own
:class:`~harness.scheduling.queue.run_queue.RunQueue`, posing as its own host (so a dead worker is found
by its lease timing out, as on a cluster), with a stand-in train function that holds each run
50-200 ms and trains nothing. ``--history H`` first stores H finished trials in the same grid's
study (a queue with a long past); ``--kill K`` SIGKILLs K workers while they hold a run, each
replaced by a new one. ``--drain D`` stops after about D runs (a sample of a long queue).

Printed: the time ``enqueue`` took, then one table row: claims/s (runs finished per second of
the drain), claim latency p50 / p95 / max (one call of ``RunQueue.claim`` that took a run),
queue time per run (the workers' time outside the train function, per run), full scans per
claim (reads of every trial of a study), reads per claim (every read of many trials: full, live,
one run's), duplicates (trials discarded as a second live trial of their run), runs lost to a
kill, whether every run finished exactly once, and the CPU each run cost: the workers' (every
thread) and, with ``--postgres``, the server's (every backend). On a machine shared with other
work the times above are inflated by waiting for a core; the CPU per run is not, and gives the
last column, the claims/s two otherwise idle cores would sustain (2 / CPU per run: an estimate
that assumes perfect overlap). Exit status 0 only if every run finished once and duplicates <=
runs lost. The test suite runs a small version (tests/scheduling/test_queue_load.py).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GRID = "load"
HOLD_S = (0.05, 0.2)
LEASE_S = 10.0  # short, so a killed worker's run comes back soon; long enough for a loaded machine


def configs(n: int, *, offset: int = 0, name: str = GRID):
    """``n`` distinct run configs of one grid (seeds ``offset`` ...)."""
    from harness.design.config import RunConfig

    return [
        RunConfig.create("block_attnres", "tiny", offset + i, 1024, "/corpus", grid=name) for i in range(n)
    ]


def store_history(queue, n: int) -> None:
    """``n`` finished (COMPLETE) trials of the grid, as a long-drained queue holds (its own seeds)."""
    from optuna.trial import TrialState

    from harness.scheduling.queue.trials import attempt_template

    if n <= 0:
        return
    cfgs = configs(n, offset=10_000_000)
    engine = getattr(queue.storage, "engine", None)
    if engine is not None:  # PostgreSQL: one batch, then finished in one statement
        import sqlalchemy

        queue.enqueue(cfgs)
        with engine.begin() as conn:
            conn.execute(
                sqlalchemy.text(
                    "UPDATE trials SET state = 'COMPLETE', datetime_complete = now() WHERE state = 'WAITING'"
                )
            )
        return
    sid = queue.study_of(GRID)
    for i, c in enumerate(cfgs):
        tid = queue.storage.create_new_trial(
            sid, template_trial=attempt_template(c, attempt=1, failures=0, reclaims=0, order=[0.0, i])
        )
        queue.storage.set_trial_state_values(tid, TrialState.RUNNING)
        queue.storage.set_trial_state_values(tid, TrialState.COMPLETE, [3.0])


def _hold(record: str, config, results_dir) -> str:
    """The stand-in train function: note the run as held, hold it 50-200 ms, return ``done``."""
    with open(record, "a") as f:
        f.write(f"{config.run_id}\n")
    time.sleep(random.uniform(*HOLD_S))
    return "done"


class GridFinished:
    """The workers' stop request (the ``stop`` of :func:`~harness.scheduling.workers.loop.work`): asked once
    the driver has written ``flag`` (every run of the grid finished). Until then a worker with nothing
    to claim polls, as ``harness work --wait`` does, so that a killed worker's run is reclaimed once
    its lease is stale (LEASE_S) even when the rest of the grid drained sooner."""

    def __init__(self, flag: Path) -> None:
        self.flag = flag

    @property
    def requested(self) -> str | None:
        return "grid finished" if self.flag.exists() else None

    def wait(self, timeout_s: float) -> bool:
        # jittered: workers that ran dry together would otherwise poll in lockstep, all reclaiming a
        # stale run and looking for orphans in the same instant (a discarded duplicate retry each time)
        end = time.monotonic() + timeout_s * random.uniform(0.5, 1.5)
        while self.requested is None and time.monotonic() < end:
            time.sleep(0.05)
        return self.requested is not None


def worker(index: int, storage: str | None, results: str, out: str, max_runs: int | None) -> None:
    """One worker process: the real loop, posing as host ``load-INDEX``; one JSON line per claim to ``out``.
    Without ``max_runs`` it works until the driver says the grid is finished (:class:`GridFinished`)."""
    import optuna

    from harness.scheduling.queue import lease
    from harness.scheduling.queue import run_queue as queue_mod
    from harness.scheduling.workers.loop import work

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    host = f"load-{index}"
    lease.hostname = queue_mod.hostname = lambda: host  # its own host: found dead only by its lease
    q = queue_mod.RunQueue.open(storage, results, lease_timeout_s=LEASE_S)
    held = str(Path(out).with_suffix(".held"))
    hold_s = [0.0]
    f = open(out, "a", buffering=1)

    claim = q.claim

    def timed_claim(grid=None, pairs=None):
        t0 = time.perf_counter()
        c = claim(grid, pairs)
        dt = time.perf_counter() - t0
        if c is not None:
            f.write(json.dumps({"claim_s": dt, "at": time.time() - dt}) + "\n")
            Path(held).write_text(c.run_id)
        return c

    def train(config, results_dir):
        t0 = time.perf_counter()
        try:
            return _hold(str(Path(out).with_suffix(".trained")), config, results_dir)
        finally:
            hold_s[0] += time.perf_counter() - t0
            Path(held).write_text("")

    q.claim = timed_claim
    t0, cpu0 = time.perf_counter(), time.process_time()
    until = (
        {}
        if max_runs is not None
        else {"wait": True, "poll_s": LEASE_S / 2, "stop": GridFinished(Path(out).parent / "finished")}
    )
    outcomes = work(
        q, train, Path(results), max_runs=max_runs, beat_s=LEASE_S / 4, log=lambda m: None, **until
    )
    f.write(
        json.dumps(
            {
                "end": True,
                "at": time.time(),
                "wall_s": time.perf_counter() - t0,
                "hold_s": hold_s[0],
                "cpu_s": time.process_time() - cpu0,
                "runs": sum(outcomes.values()),
                "reads": dict(q.reads),
            }
        )
        + "\n"
    )
    f.close()


@dataclass
class Result:
    """One drain, measured (see the module docstring)."""

    storage: str
    workers: int
    runs: int
    enqueue_s: float
    drain_s: float = 0.0
    finished: int = 0
    claims: list[float] = field(default_factory=list)
    queue_s_per_run: float = math.nan
    full_per_claim: float = math.nan
    reads_per_claim: float = math.nan
    duplicates: int = 0
    lost: int = 0
    kills: int = 0
    exactly_once: bool = False
    history: int = 0
    reads: Counter = field(default_factory=Counter)
    cpu_s_per_run: float = math.nan  # the workers' CPU (all threads), per run
    server_cpu_s_per_run: float = math.nan  # PostgreSQL's CPU (every backend), per run; nan: not measured

    @property
    def free_claims_per_s(self) -> float:
        """Claims/s two otherwise idle cores could sustain: 2 / (CPU seconds per run, workers + server)."""
        server = 0.0 if math.isnan(self.server_cpu_s_per_run) else self.server_cpu_s_per_run
        return 2.0 / (self.cpu_s_per_run + server)

    @property
    def ok(self) -> bool:
        return self.exactly_once and self.duplicates <= self.lost

    def pct(self, q: float) -> float:
        c = sorted(self.claims)
        return c[min(len(c) - 1, int(math.ceil(q * len(c))) - 1)] if c else math.nan

    HEADER = (
        "| storage | N | runs | history | claims/s | claim p50 / p95 / max | queue time per run | "
        "full scans / claim | reads / claim | duplicates | lost | exactly once | CPU per run (workers + "
        "server) | claims/s on 2 free cores |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    )

    def row(self) -> str:
        return (
            f"| {self.storage} | {self.workers} | {self.runs} | {self.history} | "
            f"{self.finished / self.drain_s:.1f} | {self.pct(0.5):.3f} / {self.pct(0.95):.3f} / "
            f"{max(self.claims, default=math.nan):.3f} s | {self.queue_s_per_run:.3f} s | "
            f"{self.full_per_claim:.3f} | {self.reads_per_claim:.2f} | {self.duplicates} | {self.lost} | "
            f"{'yes' if self.exactly_once else 'NO'} | {self.cpu_s_per_run * 1e3:.0f} + "
            f"{self.server_cpu_s_per_run * 1e3:.0f} ms | {self.free_claims_per_s:.0f} |"
        )


def server_cpu_s(postmaster: int | None) -> float:
    """CPU seconds of a PostgreSQL server so far: its postmaster, the backends it reaped, the live ones."""
    if postmaster is None:
        return math.nan
    tick = os.sysconf("SC_CLK_TCK")

    def stat(pid):
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()

    fields = stat(postmaster)
    total = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                fields = stat(pid)
            except OSError:
                continue
            if int(fields[1]) == postmaster:
                total += int(fields[11]) + int(fields[12])
    return total / tick


class _Drain:
    """The driver's side of one drain: worker processes (spawned), the kills, the finish flag."""

    def __init__(self, storage: str | None, results: Path, logs: Path, max_runs: int | None) -> None:
        self.storage, self.results, self.logs, self.max_runs = storage, results, logs, max_runs
        self.procs: dict[int, mp.Process] = {}
        self.ctx = mp.get_context("spawn")

    def start(self, i: int) -> None:
        p = self.ctx.Process(
            target=worker,
            args=(i, self.storage, str(self.results), str(self.logs / f"w{i}.jsonl"), self.max_runs),
        )
        p.start()
        self.procs[i] = p

    def trained(self) -> int:
        return sum(len(p.read_text().splitlines()) for p in self.logs.glob("*.trained"))

    def kill_one(self, rng: random.Random, killed: int, log) -> bool:
        """SIGKILL a random worker holding a run and start one in its place; ``False`` if none holds one."""
        holding = [
            i
            for i, p in self.procs.items()
            if p.is_alive() and (self.logs / f"w{i}.held").exists() and (self.logs / f"w{i}.held").read_text()
        ]
        if not holding:
            return False
        victim = rng.choice(holding)
        os.kill(self.procs[victim].pid, signal.SIGKILL)
        self.procs[victim].join()
        log(f"killed worker {victim} holding {(self.logs / f'w{victim}.held').read_text()}")
        self.start(len(self.procs) + 100 * (killed + 1))  # a new worker in its place
        return True

    def run(self, q, *, workers: int, target: int, kills: int, until_finished: bool, rng, log) -> int:
        """Start ``workers`` workers and wait for them all; returns the number killed."""
        for i in range(workers):
            self.start(i)
        kill_at = sorted(rng.uniform(0.1, 0.6) for _ in range(kills))  # fractions of the drain
        killed, look_at = 0, 0.0
        while any(p.is_alive() for p in self.procs.values()):
            trained = self.trained()
            if killed < kills and trained >= kill_at[killed] * target and self.kill_one(rng, killed, log):
                killed += 1
            if until_finished and trained >= target and time.monotonic() >= look_at:
                look_at = time.monotonic() + 0.5  # one read of the live trials each half second
                done, total = q.tally(GRID)
                # tally counts a reclaimed run whose retry is not created yet as finished (a window that
                # a loaded machine widens): the workers stop only once every run's state says done
                if done == total and all(r.state == "done" for r in q.runs(GRID).values()):
                    (self.logs / "finished").touch()  # every run finished: the polling workers stop
            time.sleep(0.02)
        return killed


def _measure(res: Result, logs: Path) -> None:
    """Fill ``res`` from the workers' JSON lines: claim latencies, the drain, per-run queue time, CPU, reads."""
    ends = []
    for path in logs.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if "claim_s" in rec:
                res.claims.append(rec["claim_s"])
            elif rec.get("end"):
                ends.append(rec)
    starts = [
        json.loads(ln)["at"]
        for p in logs.glob("*.jsonl")
        for ln in p.read_text().splitlines()
        if "claim_s" in ln
    ]
    # the drain: from the first claim to the last worker's end (process start-up not counted)
    res.drain_s = max(e["at"] for e in ends) - min(starts) if ends and starts else math.nan
    for e in ends:
        res.reads.update(e["reads"])
    survivors_runs = sum(e["runs"] for e in ends)
    if survivors_runs:
        res.queue_s_per_run = sum(e["wall_s"] - e["hold_s"] for e in ends) / survivors_runs
        res.cpu_s_per_run = sum(e["cpu_s"] for e in ends) / survivors_runs
        res.full_per_claim = res.reads["full"] / survivors_runs
        res.reads_per_claim = sum(res.reads.values()) / survivors_runs


def _outcome(res: Result, q, cfgs, drain: int | None) -> None:
    """Fill ``res`` from the storage: runs finished, exactly once, duplicates, runs lost to a kill."""
    from optuna.trial import TrialState

    trials = [t for t in q.all_trials() if t.user_attrs.get("grid") == GRID]
    mine = {c.run_id for c in cfgs}
    complete = Counter(
        t.user_attrs["run_id"]
        for t in trials
        if t.state == TrialState.COMPLETE and t.user_attrs["run_id"] in mine
    )
    res.finished = sum(complete.values())
    res.duplicates = sum(t.user_attrs.get("ending") == "duplicate" for t in trials)
    res.lost = sum(
        t.state == TrialState.FAIL and t.user_attrs.get("ending") == "reclaimed"
        for t in trials
        if t.user_attrs["run_id"] in mine
    )
    done = {rid for rid, n in complete.items() if n == 1}
    res.exactly_once = all(n == 1 for n in complete.values()) and (drain is not None or done == mine)


def load(
    storage: str | None,
    workdir: Path,
    *,
    workers: int,
    runs: int,
    history: int = 0,
    kills: int = 0,
    drain: int | None = None,
    seed: int = 0,
    postmaster: int | None = None,
    log=print,
) -> Result:
    """Queue ``runs`` runs (after ``history`` finished ones), drain them with ``workers`` worker
    processes while ``kills`` of them are SIGKILLed holding a run; return the measurements.
    ``postmaster``: the pid of the PostgreSQL server, to measure its CPU (same machine)."""
    import optuna

    from harness.scheduling.queue.run_queue import RunQueue

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    results = workdir / "results"
    q = RunQueue.open(storage, results)
    store_history(q, history)
    cfgs = configs(runs)
    t0 = time.perf_counter()
    q.enqueue(cfgs)
    res = Result(
        storage="PostgreSQL" if storage else "journal",
        workers=workers,
        runs=runs,
        enqueue_s=time.perf_counter() - t0,
        kills=kills,
        history=history,
    )
    log(
        f"queued {runs} runs in {res.enqueue_s:.2f} s ({res.storage}, {history} finished trials stored before)"
    )
    logs = workdir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    server0 = server_cpu_s(postmaster)
    res.kills = _Drain(storage, results, logs, None if drain is None else max(1, drain // workers)).run(
        q,
        workers=workers,
        target=drain or runs,
        kills=kills,
        until_finished=drain is None,
        rng=random.Random(seed),
        log=log,
    )
    server_s = server_cpu_s(postmaster) - server0
    _measure(res, logs)
    res.server_cpu_s_per_run = server_s / max(1, len(res.claims))
    _outcome(res, q, cfgs, drain)
    return res


def postgres_server(max_connections: int = 300):
    """A throw-away PostgreSQL server (tests/services.py) allowing ``max_connections`` clients
    (each worker holds two: its loop and its heartbeat); returns ``(server, url of a new database)``."""
    sys.path.insert(0, str(REPO / "tests"))
    import psycopg

    import services

    pg = services.PostgresServer().start()
    pg.postmaster = lambda: int((pg.data / "postmaster.pid").read_text().split()[0])
    with psycopg.connect(pg.url("postgres"), autocommit=True) as con:
        con.execute(f"ALTER SYSTEM SET max_connections = {int(max_connections)}")
    pg.stop()
    pg.start()
    return pg, pg.create_database("load")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--workers", type=int, default=16, help="worker processes (default 16)")
    ap.add_argument("--runs", type=int, default=200, help="runs queued (default 200)")
    ap.add_argument("--history", type=int, default=0, help="finished trials stored first (default 0)")
    ap.add_argument(
        "--kill", type=int, default=0, metavar="K", help="SIGKILL K workers holding a run (default 0)"
    )
    ap.add_argument(
        "--drain", type=int, default=None, metavar="D", help="stop after about D runs (default: all)"
    )
    ap.add_argument("--seed", type=int, default=0, help="seed of the kill times and victims (default 0)")
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--storage", default=None, metavar="URL", help="an empty PostgreSQL database to use")
    group.add_argument(
        "--postgres", action="store_true", help="start a throw-away PostgreSQL server (Debian's)"
    )
    args = ap.parse_args(argv)
    for name in ("workers", "runs"):
        if getattr(args, name) < 1:
            print(f"queue_load: error: --{name} {getattr(args, name)} must be at least 1", file=sys.stderr)
            return 2
    if args.kill < 0 or args.history < 0:
        print("queue_load: error: --kill and --history must be >= 0", file=sys.stderr)
        return 2
    server = None
    url = args.storage
    if args.postgres:
        server, url = postgres_server(max(100, 3 * args.workers + 20))
    try:
        with tempfile.TemporaryDirectory(prefix="queue-load-") as tmp:
            res = load(
                url,
                Path(tmp),
                workers=args.workers,
                runs=args.runs,
                history=args.history,
                kills=args.kill,
                drain=args.drain,
                seed=args.seed,
                postmaster=server.postmaster() if server is not None else None,
            )
    finally:
        if server is not None:
            server.close()
    print(Result.HEADER)
    print(res.row())
    print(f"reads: {dict(res.reads)} (survivors)")
    return 0 if res.ok else 1


if __name__ == "__main__":
    sys.exit(main())
