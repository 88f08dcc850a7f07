"""Real services for the tests (DESIGN section 10): a PostgreSQL server and a one-node SLURM cluster.

Both come from Debian's packages (``postgresql``; ``slurm-wlm`` and ``munge``; ``.ci/run``
installs them), run in a fresh folder under the system temp folder on free loopback ports,
and are stopped, their folder removed, by :meth:`close` (or leaving the ``with`` block).
Nothing is mocked: a test that needs one of them and cannot start it fails with the
daemons' logs (:class:`ServiceError`), it is never skipped.

* :class:`PostgresServer`: ``initdb`` and ``pg_ctl`` run as the ``postgres`` user (the
  server refuses to run as root), trust authentication on 127.0.0.1 only.
* :class:`SlurmCluster`: this host as controller and only node, its CPUs and memory as
  ``slurmd -C`` reports them; its own ``munged`` (as the ``munge`` user, own key and
  socket), ``slurmctld`` and ``slurmd`` in the foreground, ``proctrack/linuxproc``,
  ``task/none``, ``select/cons_tres`` (settings measured to work as root, DESIGN
  section 10). Clients reach it through ``SLURM_CONF`` (:attr:`SlurmCluster.env`).

Leftovers: each started service records its folder and daemon pids in
``TMP/rd-harness-services/*.json`` with the pid of the process that started it. Starting
a service first stops the daemons of records whose starter is gone (a test run killed
before its teardown) and removes their folders, so a new run never trips over an old one;
daemons are only signalled when their command line names the recorded folder.

Run one by hand: ``python tests/services.py postgres`` or ``python tests/services.py slurm``
(starts it, prints how to reach it, stops it on Enter).
"""

from __future__ import annotations

import glob
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.common.files import atomic_write
from harness.scheduling.queue.lease import pid_alive as _alive

STATE_DIR = Path(tempfile.gettempdir()) / "rd-harness-services"
START_TIMEOUT_S = 60.0
LOG_LINES = 60  # lines of each daemon's log quoted in a ServiceError


class ServiceError(RuntimeError):
    """A service could not be started or used; the message ends with its daemons' logs."""


# ----------------------------------------------------------------------------- helpers


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tail(path: Path, lines: int = LOG_LINES) -> str:
    """The last ``lines`` lines of a text file ('' if it does not exist)."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _as_root() -> bool:
    return os.geteuid() == 0


def _user_kwargs(user: str | None) -> dict:
    """``subprocess`` arguments that run a command as ``user`` (only when we are root)."""
    if not (_as_root() and user):
        return {}
    pw = pwd.getpwnam(user)
    return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}


def _chown(path: Path, user: str | None) -> None:
    if _as_root() and user:
        pw = pwd.getpwnam(user)
        os.chown(path, pw.pw_uid, pw.pw_gid)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _signal_and_wait(pid: int, sig: int, timeout_s: float) -> bool:
    """Send ``sig`` to ``pid``; True once the process is gone (within ``timeout_s``)."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return not _alive(pid)


def _stop_pid(pid: int, marker: str, first: int = signal.SIGTERM) -> None:
    """Stop ``pid`` (``first``, then SIGKILL) if its command line contains ``marker``."""
    if not _alive(pid) or marker not in _cmdline(pid):
        return
    if not _signal_and_wait(pid, first, 15):
        _signal_and_wait(pid, signal.SIGKILL, 5)


def _find_tool(name: str, globs: tuple[str, ...] = ()) -> str:
    """Path of a command: on PATH, else the newest match of ``globs`` (Debian keeps
    PostgreSQL's server tools in /usr/lib/postgresql/VERSION/bin)."""
    found = shutil.which(name)
    if found:
        return found
    hits = sorted(
        (h for g in globs for h in glob.glob(g)),
        key=lambda p: [int(x) if x.isdigit() else x for x in Path(p).parts],
    )
    if hits:
        return hits[-1]
    raise ServiceError(
        f"{name} not found (on PATH or {', '.join(globs) or 'PATH'}); install Debian's "
        "packages: apt-get install postgresql slurm-wlm munge (.ci/run does)"
    )


class _Recorded:
    """A service with a folder under the temp dir and a leftover record (see module docstring)."""

    kind = "service"

    def __init__(self) -> None:
        self.root: Path | None = None
        self._record: Path | None = None

    def _make_root(self) -> Path:
        clear_leftovers()
        self.root = Path(tempfile.mkdtemp(prefix=f"rd-harness-{self.kind}-"))
        os.chmod(self.root, 0o755)  # the daemons' users must reach their files in it
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        os.chmod(STATE_DIR, 0o1777)
        self._record = STATE_DIR / f"{self.kind}-{os.getpid()}-{self.root.name}.json"
        self._save_record([])
        return self.root

    def _save_record(self, daemons: list[tuple[int, int]]) -> None:
        """Record ``(pid, stop signal)`` of each daemon started (see :func:`clear_leftovers`)."""
        assert self._record is not None and self.root is not None
        atomic_write(
            self._record,
            json.dumps({"kind": self.kind, "owner": os.getpid(), "root": str(self.root), "daemons": daemons}),
        )

    def _remove_root(self) -> None:
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
        if self._record is not None:
            self._record.unlink(missing_ok=True)
        self.root = self._record = None

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc) -> None:
        self.close()


def clear_leftovers() -> list[str]:
    """Stop the daemons of every record whose starting process is gone; remove their folders.

    Returns the folders cleared."""
    cleared = []
    for rec in sorted(STATE_DIR.glob("*.json")) if STATE_DIR.is_dir() else []:
        try:
            info = json.loads(rec.read_text())
        except (OSError, ValueError):
            rec.unlink(missing_ok=True)
            continue
        if _alive(int(info.get("owner", 0))):
            continue
        root = str(info.get("root", ""))
        if root:
            for pid, sig in info.get("daemons", []):
                _stop_pid(int(pid), root, int(sig))
            if Path(root).parent == Path(tempfile.gettempdir()):
                shutil.rmtree(root, ignore_errors=True)
        rec.unlink(missing_ok=True)
        cleared.append(root)
    return cleared


# ----------------------------------------------------------------------------- PostgreSQL


class PostgresServer(_Recorded):
    """A throw-away PostgreSQL server on 127.0.0.1 (trust authentication, user ``postgres``).

    ``start()`` runs ``initdb`` (first time only) and ``pg_ctl start``; ``stop()`` stops
    the server keeping its data (``start()`` again brings it back); ``close()`` stops it
    and removes its folder.

    Raises:
        ServiceError: a tool is missing or the server does not start (with its log).
    """

    kind = "postgres"
    USER = "postgres"

    def __init__(self) -> None:
        super().__init__()
        self.port: int | None = None
        self._initdb = _find_tool("initdb", ("/usr/lib/postgresql/*/bin/initdb",))
        self._pg_ctl = _find_tool("pg_ctl", ("/usr/lib/postgresql/*/bin/pg_ctl",))

    @property
    def data(self) -> Path:
        assert self.root is not None
        return self.root / "data"

    @property
    def logfile(self) -> Path:
        assert self.root is not None
        return self.root / "server.log"

    def _run(self, argv: list[str], what: str) -> None:
        assert self.root is not None
        env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
        proc = subprocess.run(
            argv,
            cwd=self.root,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            **_user_kwargs(self.USER),
        )
        if proc.returncode != 0:
            raise ServiceError(
                f"PostgreSQL: {what} failed (exit {proc.returncode}): {' '.join(argv)}\n"
                f"{proc.stdout}{proc.stderr}\n--- server log ---\n{tail(self.logfile)}"
            )

    def start(self) -> PostgresServer:
        if self.root is None:
            root = self._make_root()
            _chown(root, self.USER)
            self.port = free_port()
            self._run(
                [
                    self._initdb,
                    "-D",
                    str(self.data),
                    "-U",
                    "postgres",
                    "-A",
                    "trust",
                    "-E",
                    "UTF8",
                    "--locale=C",
                    "--no-sync",
                ],
                "initdb",
            )
        opts = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1"
        self._run(
            [
                self._pg_ctl,
                "-D",
                str(self.data),
                "-l",
                str(self.logfile),
                "-o",
                opts,
                "-w",
                "-t",
                str(int(START_TIMEOUT_S)),
                "start",
            ],
            "pg_ctl start",
        )
        postmaster = int((self.data / "postmaster.pid").read_text().split()[0])
        self._save_record([(postmaster, int(signal.SIGQUIT))])  # SIGQUIT: immediate shutdown
        return self

    def stop(self, mode: str = "fast") -> None:
        """Stop the server, keeping its data (``mode``: fast, smart or immediate)."""
        if self.root is not None and (self.data / "postmaster.pid").exists():
            self._run([self._pg_ctl, "-D", str(self.data), "-m", mode, "-w", "stop"], "pg_ctl stop")

    def close(self) -> None:
        """Stop the server and remove its folder."""
        try:
            self.stop("immediate")
        except ServiceError:
            pass
        self._remove_root()

    def url(self, database: str = "postgres", driver: str = "") -> str:
        """SQLAlchemy URL of ``database``; ``driver`` e.g. ``psycopg2`` gives ``postgresql+psycopg2://``."""
        scheme = f"postgresql+{driver}" if driver else "postgresql"
        return f"{scheme}://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """Create an empty database; returns its URL (plain ``postgresql://``, psycopg 3)."""
        import psycopg

        with psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname="postgres", autocommit=True
        ) as con:
            con.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def log(self) -> str:
        return tail(self.logfile)


# ----------------------------------------------------------------------------- SLURM


SLURM_CONF = """\
# One-node cluster for the tests (tests/services.py); DESIGN section 10.
ClusterName=rdharness
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser={user}
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={root}/munge/munge.socket
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
# the main and backfill loops every second (defaults 60 s and 30 s): a requeued job whose begin time has
# come starts at once, not at the next loop
SchedulerParameters=sched_interval=1,bf_interval=1
MpiDefault=none
ReturnToService=2
MinJobAge=600
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
{node} NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def slurm_node_line() -> str:
    """This host as a SLURM node (``NodeName=... CPUs=... RealMemory=...``) from ``slurmd -C``."""
    out = subprocess.run(
        [_find_tool("slurmd", ("/usr/sbin/slurmd",)), "-C"], capture_output=True, text=True, timeout=60
    )
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("NodeName=")), None)
    if out.returncode != 0 or line is None:
        raise ServiceError(f"slurmd -C failed (exit {out.returncode}): {out.stdout}{out.stderr}")
    return line


class SlurmCluster(_Recorded):
    """A one-node SLURM cluster on this host (see the module docstring).

    ``start()`` brings up munged, slurmctld and slurmd and waits until ``sinfo`` shows the
    node idle; ``close()`` stops the daemons (and any job left) and removes the folder.
    Use :attr:`env` for every SLURM client command, or :meth:`run`.

    Raises:
        ServiceError: a tool is missing, a daemon exits or the node does not come up in
            time (the message ends with the three daemons' logs).
    """

    kind = "slurm"
    MUNGE_USER = "munge"

    def __init__(self) -> None:
        super().__init__()
        self._procs: dict[str, subprocess.Popen] = {}
        self._tools = {n: _find_tool(n, (f"/usr/sbin/{n}",)) for n in ("munged", "slurmctld", "slurmd")}
        self.node = slurm_node_line()
        self.node_name = self.node.split()[0].split("=", 1)[1]
        self.cpus = int(next(f.split("=", 1)[1] for f in self.node.split() if f.startswith("CPUs=")))

    @property
    def conf(self) -> Path:
        assert self.root is not None
        return self.root / "slurm.conf"

    @property
    def env(self) -> dict:
        """``os.environ`` plus ``SLURM_CONF`` naming this cluster's configuration."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def _logs(self) -> str:
        assert self.root is not None
        parts = []
        for name in ("munged", "slurmctld", "slurmd"):
            parts.append(f"--- {name} (stderr) ---\n{tail(self.root / 'log' / f'{name}.out')}")
        for name in ("slurmctld", "slurmd"):
            parts.append(f"--- {name}.log ---\n{tail(self.root / 'log' / f'{name}.log')}")
        return "\n".join(parts)

    def fail(self, what: str) -> ServiceError:
        """A :class:`ServiceError` for ``what`` with the daemons' logs."""
        return ServiceError(f"SLURM: {what}\n{self._logs()}")

    def _spawn(self, name: str, argv: list[str], user: str | None = None) -> None:
        assert self.root is not None
        out = open(self.root / "log" / f"{name}.out", "wb")
        try:
            self._procs[name] = subprocess.Popen(
                argv,
                cwd=self.root,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                **_user_kwargs(user),
            )
        finally:
            out.close()
        self._save_record([(p.pid, int(signal.SIGTERM)) for p in self._procs.values()])

    def start(self) -> SlurmCluster:
        root = self._make_root()
        for sub in ("state", "spool", "log"):
            (root / sub).mkdir()
        munge = root / "munge"  # owned by munge; 0755 as munged wants for its socket folder
        munge.mkdir(mode=0o755)
        _chown(munge, self.MUNGE_USER)
        key = munge / "munge.key"
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(128))
        _chown(key, self.MUNGE_USER)
        self._spawn(
            "munged",
            [
                self._tools["munged"],
                "--foreground",
                f"--key-file={key}",
                f"--socket={munge / 'munge.socket'}",
                f"--pid-file={munge / 'munged.pid'}",
                f"--seed-file={munge / 'munged.seed'}",
                f"--log-file={munge / 'munged.log'}",
            ],
            user=self.MUNGE_USER,
        )
        self._wait(lambda: (munge / "munge.socket").exists(), "munged did not create its socket")
        user = pwd.getpwuid(os.geteuid()).pw_name
        self.conf.write_text(
            SLURM_CONF.format(
                host=self.node_name,
                ctld_port=free_port(),
                slurmd_port=free_port(),
                user=user,
                root=root,
                node=self.node,
            )
        )
        self._spawn("slurmctld", [self._tools["slurmctld"], "-D", "-f", str(self.conf)])
        self._spawn("slurmd", [self._tools["slurmd"], "-D", "-f", str(self.conf)])
        self._wait(lambda: self.node_state() == "idle", "the node did not come up idle (sinfo)")
        return self

    def _wait(self, ready, what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ready():
            dead = [f"{n} exited with {p.returncode}" for n, p in self._procs.items() if p.poll() is not None]
            if dead:
                raise self.fail(f"{what}: {'; '.join(dead)}")
            if time.monotonic() > deadline:
                raise self.fail(f"{what} within {START_TIMEOUT_S:g} s")
            time.sleep(0.2)

    def run(self, *argv: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        """Run a SLURM client command (``sinfo``, ``sbatch``, ``scontrol`` ...) against this cluster.

        Raises:
            ServiceError: ``check`` and the command failed (with the daemons' logs).
        """
        proc = subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise self.fail(f"{' '.join(argv)} failed (exit {proc.returncode}): {proc.stdout}{proc.stderr}")
        return proc

    def node_state(self) -> str:
        """The node's state as ``sinfo`` shows it (``idle``, ``alloc``, ``down*`` ...; '' if unknown)."""
        proc = self.run("sinfo", "-h", "-o", "%T", check=False, timeout=30)
        return proc.stdout.strip() if proc.returncode == 0 else ""

    def submit(self, *sbatch_args: str) -> int:
        """``sbatch --parsable ARGS``; returns the job id."""
        out = self.run("sbatch", "--parsable", *sbatch_args).stdout.strip()
        return int(out.split(";")[0])

    def job(self, job_id: int) -> list[dict]:
        """``scontrol show job`` of ``job_id`` as dicts (``JobState``, ``ExitCode``, ...), one per
        task of a job array (one for a plain job)."""
        out = self.run("scontrol", "show", "job", "-o", str(job_id)).stdout
        return [
            dict(f.split("=", 1) for f in line.split() if "=" in f)
            for line in out.splitlines()
            if line.strip()
        ]

    def wait_job(self, job_id: int, timeout_s: float = 120) -> list[dict]:
        """Wait until every task of ``job_id`` has ended; returns their ``scontrol`` records.

        Raises:
            ServiceError: not all ended after ``timeout_s`` seconds.
        """
        deadline = time.monotonic() + timeout_s
        active = ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED")
        while True:
            records = self.job(job_id)
            if records and not any(r.get("JobState") in active for r in records):
                return records
            if time.monotonic() > deadline:
                raise self.fail(f"job {job_id} not ended after {timeout_s:g} s: {records}")
            time.sleep(0.2)

    def close(self) -> None:
        """Cancel jobs left, stop slurmd, slurmctld and munged, remove the folder."""
        if self.root is not None and "slurmctld" in self._procs and self._procs["slurmctld"].poll() is None:
            self.run("scancel", "--full", "--partition=debug", check=False, timeout=30)
        for name in ("slurmd", "slurmctld", "munged"):
            p = self._procs.pop(name, None)
            if p is not None and p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=5)
        self._remove_root()


def main(argv: list[str]) -> int:
    kinds = {"postgres": PostgresServer, "slurm": SlurmCluster}
    if len(argv) != 1 or argv[0] not in kinds:
        print(f"usage: python tests/services.py {{{','.join(kinds)}}}", file=sys.stderr)
        return 2
    try:
        with kinds[argv[0]]() as service:
            if isinstance(service, PostgresServer):
                print(f"PostgreSQL up: {service.url('postgres')}")
            else:
                print(f"SLURM up: SLURM_CONF={service.conf} ({service.node})")
            input("Enter stops it> ")
    except ServiceError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
