"""``harness`` commands for the tests, forked from a warm process (docs/running.md: where the time goes).

A process that trains imports torch and Lightning first: 4.6 s of CPU here, most of a tiny run's. ``run``
and ``popen`` are ``subprocess.run`` and ``subprocess.Popen`` for ``[sys.executable, "-m", "harness",
...]`` that start the command in a process forked from a server which imported those libraries once per
test process (``PRELOAD``; not harness itself, whose modules load in the child as in a fresh process).
The child then runs exactly what ``python -m harness`` runs (``runpy._run_module_as_main``) and ends as
that interpreter ends: ``SystemExit``'s code, an uncaught exception's traceback and exit 1, an uncaught
KeyboardInterrupt's SIGINT, non-daemon threads joined, atexit handlers run and buffered output flushed. A
command that returns or exits with a code then leaves by ``os._exit`` without the interpreter's module
teardown: tearing down the inherited torch and Lightning modules wrote to every page of them, copying the
server's heap (0.27 s of CPU and 43,000 page faults a command). What that skips: the ``__del__`` of objects
still alive at exit, which a teardown may run (the whole suite passed both ways). It is a real process with
its own pid (signals reach it), stdin/stdout/stderr (pipes, files or a terminal: line-buffered on a
terminal, as at a fresh start), working folder, environment, session or process group, Python's default
SIGINT handler and freshly seeded ``random``/``numpy.random``; its exit status comes back through a pipe.

It starts cold instead (``subprocess`` itself) where a fork cannot stand for a fresh interpreter: another
executable or interpreter flag, ``preexec_fn``, ``pass_fds``, user or umask changes, or an environment
that differs from the server's in anything but ``HARNESS_*``, ``PYTEST_*``, ``PATH``, ``_RJEM_MALLOC_CONF``
(polars', read when the child imports polars) and a ``PYTHONPATH`` of folders that hold none of the server's
modules and no ``sitecustomize`` (the child puts them on ``sys.path`` where a fresh interpreter would; another
variable may be read by a library at import, as torch's inductor reads ``TORCHINDUCTOR_*``). The server starts
with the session's environment (:data:`SESSION_ENVIRONMENT`), whichever test starts it; a variable its imports
set (Lightning sets ``PYTORCH_NVML_BASED_CUDA_CHECK``, torch ``TORCHINDUCTOR_CACHE_DIR``) may be absent from a
command's environment or hold the value they set, and the child gets it where absent, as a fresh
interpreter's imports would set it. Tests of what a command imports, of its memory or of its start-up time
call ``subprocess`` themselves.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import socket
import struct
import subprocess
import sys
import threading

#: what the server imports before it forks (polars is left out: its thread pool starts at import)
PRELOAD = ("torch", "lightning.pytorch", "duckdb", "optuna", "tokenizers", "scipy.stats")

#: environment variables a child may have other than the server's: read at run time (harness, pytest, PATH)
#: or only by a library the server has not imported (polars' jemalloc settings)
OWN_ENVIRONMENT = ("HARNESS_", "PYTEST_", "PATH", "_RJEM_MALLOC_CONF")

#: the test process's environment as the session started (conftest imports this module): the server's, so
#: that whether a command starts warm does not depend on which test started the server (one that set a
#: variable, or ran Lightning in-process, which sets PL_GLOBAL_SEED) nor on the test order
SESSION_ENVIRONMENT = dict(os.environ)

SERVER = r"""
import json, os, selectors, signal, socket, struct, sys
ctl = socket.socket(fileno=int(sys.argv[1]))
sigint = signal.getsignal(signal.SIGINT)
signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C to the test's process group is not for the server
import importlib
before = dict(os.environ)
for name in sys.argv[2].split(","):
    importlib.import_module(name)
added = {k: v for k, v in os.environ.items() if before.get(k) != v}  # what the imports set
import gc
gc.freeze()  # the preloaded objects out of the collector's reach: a child's collections and exit stay cheap
pythonpath = {os.path.abspath(e) for e in os.environ.get("PYTHONPATH", "").split(os.pathsep) if e}
base_path = [p for p in sys.path[1:] if p not in pythonpath]  # after the folder of `-m` and PYTHONPATH
modules = sorted({name.split(".")[0] for name in sys.modules})
ctl.send(json.dumps({"modules": modules, "added": added}).encode())  # ready: what it holds and set


def serve():
    # Forks a child per request; returns (request, fds) in the child only.
    sel = selectors.DefaultSelector()
    sel.register(ctl, selectors.EVENT_READ)
    waiting = {}  # pidfd -> (pid, the status pipe's write end)
    while True:
        for key, _ in sel.select():
            if key.fileobj is ctl:
                msg, fds, _, _ = socket.recv_fds(ctl, 1 << 20, 4)
                if not msg:
                    os._exit(0)  # the test process has gone
                pid = os.fork()
                if pid == 0:
                    sel.close()
                    ctl.close()
                    for pidfd, (_, status) in waiting.items():
                        os.close(pidfd)
                        os.close(status)
                    return json.loads(msg), fds
                for fd in fds[:3]:
                    os.close(fd)
                pidfd = os.pidfd_open(pid)
                waiting[pidfd] = (pid, fds[3])
                sel.register(pidfd, selectors.EVENT_READ)
                ctl.send(struct.pack("i", pid))
            else:
                pid, status = waiting.pop(key.fd)
                sel.unregister(key.fd)
                os.close(key.fd)
                _, sts = os.waitpid(pid, 0)
                os.write(status, struct.pack("i", sts))
                os.close(status)


request, fds = serve()
os.close(fds[3])
for fd, std in zip(fds[:3], (0, 1, 2)):
    os.dup2(fd, std)
for fd in set(fds[:3]) - {0, 1, 2}:
    os.close(fd)
signal.signal(signal.SIGINT, sigint)
if request["new_session"]:
    os.setsid()
elif request["process_group"] != -1:
    os.setpgid(0, request["process_group"])
os.chdir(request["cwd"])
os.environ.clear()
os.environ.update(request["env"])
for k, v in added.items():  # as the imports of a fresh interpreter set them where the caller had not
    os.environ.setdefault(k, v)
sys.stdout.reconfigure(line_buffering=os.isatty(1))
sys.stderr.reconfigure(line_buffering=os.isatty(2))
import random
random.seed()
if "numpy" in sys.modules:
    sys.modules["numpy"].random.seed()
sys.argv = ["-m", *request["argv"]]
pythonpath = [os.path.abspath(e) for e in request["env"].get("PYTHONPATH", "").split(os.pathsep) if e]
sys.path[:] = dict.fromkeys([os.getcwd(), *pythonpath, *base_path])  # as `python -m` and site.py order it
del request, fds, ctl, serve, sigint, pythonpath, base_path, modules, before, added
import runpy
try:
    runpy._run_module_as_main("harness")
    code = 0
except SystemExit as exc:  # a message or another object: the interpreter's own exit prints it
    if exc.code is not None and type(exc.code) is not int:
        raise
    code = exc.code or 0
# An interpreter's exit without its module teardown, which would copy the server's heap (module docstring).
import atexit as _atexit, ctypes as _ctypes, os as _os, sys as _sys, threading as _threading
_threading._shutdown()  # non-daemon threads joined, then atexit, then the buffers: Py_FinalizeEx's order
_atexit._run_exitfuncs()
try:
    _sys.stdout.flush()
    _sys.stderr.flush()
except BaseException:
    raise SystemExit(code) from None  # the interpreter's exit reports the failed flush (exit 120)
_ctypes.CDLL(None).fflush(None)  # C stdio too, as exit() would
_os._exit(code)
"""


class _Server:
    """The warm process of this test process: started on first use, gone when this process ends."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(theirs.fileno()), ",".join(PRELOAD)],
            env=SESSION_ENVIRONMENT,
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
        )
        theirs.close()
        self.sock = ours
        self.lock = threading.Lock()
        self.owner = os.getpid()
        ours.settimeout(300)
        ready = ours.recv(1 << 20)
        if not ready:
            raise RuntimeError(
                f"the warm harness server did not start (exit {self.proc.wait()}, its stderr above)"
            )
        ready = json.loads(ready)
        self.modules = set(ready["modules"])  # the top-level modules it has imported
        self.added = ready["added"]  # the variables those imports set (and a child gets where not given)
        ours.settimeout(None)
        atexit.register(self.close)

    def fork(self, request: dict, fds: list[int]) -> int:
        """The pid of a child forked for ``request`` with ``fds`` (stdin, stdout, stderr, status pipe)."""
        with self.lock:
            socket.send_fds(self.sock, [json.dumps(request).encode()], fds)
            return struct.unpack("i", self.sock.recv(4))[0]

    def close(self) -> None:
        self.sock.close()  # the server sees the end of its socket and exits
        self.proc.wait()


_server: _Server | None = None
_server_lock = threading.Lock()


def _warm_server() -> _Server:
    global _server
    with _server_lock:
        if _server is None or _server.owner != os.getpid():
            _server = _Server()
        return _server


class _WarmPopen(subprocess.Popen):
    """``subprocess.Popen`` whose child is forked by the warm server; its status is read off a pipe."""

    def _execute_child(
        self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo, creationflags,
        shell, p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite, restore_signals, gid, gids, uid,
        umask, start_new_session, process_group,
    ):  # fmt: skip
        status_r, status_w = os.pipe()
        try:
            request = {
                "argv": [str(a) for a in args[3:]],
                "env": dict(os.environ if env is None else env),
                "cwd": os.path.abspath(os.fspath(cwd)) if cwd is not None else os.getcwd(),
                "new_session": bool(start_new_session),
                "process_group": -1 if process_group is None else process_group,
            }
            std = [fd if fd != -1 else i for i, fd in enumerate((p2cread, c2pwrite, errwrite))]
            self.pid = _warm_server().fork(request, [*std, status_w])
            self._status = status_r
            self._child_created = True
        except BaseException:
            os.close(status_r)
            raise
        finally:
            os.close(status_w)
            self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)

    def _try_wait(self, wait_flags):
        if wait_flags & os.WNOHANG and not select.select([self._status], [], [], 0)[0]:
            return (0, 0)
        data = b""
        while len(data) < 4:
            chunk = os.read(self._status, 4 - len(data))
            if not chunk:
                raise RuntimeError(f"the warm harness server went away before pid {self.pid} ended")
            data += chunk
        os.close(self._status)
        return (self.pid, struct.unpack("i", data)[0])

    def _internal_poll(self, _deadstate=None, **_):
        if self.returncode is None and self._waitpid_lock.acquire(False):
            try:
                if self.returncode is None:
                    pid, sts = self._try_wait(os.WNOHANG)
                    if pid == self.pid:
                        self._handle_exitstatus(sts)
            except (OSError, RuntimeError):
                if _deadstate is None:
                    raise
                self.returncode = _deadstate
            finally:
                self._waitpid_lock.release()
        return self.returncode


def _warm(args, kwargs: dict) -> bool:
    """Whether ``args`` with Popen's ``kwargs`` can start from the warm server (module docstring)."""
    if not isinstance(args, (list, tuple)) or list(args[:3]) != [sys.executable, "-m", "harness"]:
        return False
    cold = ("preexec_fn", "pass_fds", "executable", "shell", "user", "group", "extra_groups", "umask")
    if any(kwargs.get(k) not in (None, False, (), -1) for k in cold):
        return False
    env = kwargs.get("env")
    env = os.environ if env is None else env

    server = _warm_server()

    def imported(e) -> dict:
        return {
            k: v
            for k, v in e.items()
            if not k.startswith(OWN_ENVIRONMENT) and k != "PYTHONPATH" and k not in server.added
        }

    if imported(env) != imported(SESSION_ENVIRONMENT) or any(
        env.get(k, v) != v for k, v in server.added.items()
    ):
        return False
    ours, theirs = env.get("PYTHONPATH", ""), SESSION_ENVIRONMENT.get("PYTHONPATH", "")
    return ours == theirs or not any(_shadows(path, server.modules) for path in (ours, theirs))


def _shadows(pythonpath: str, modules: set[str]) -> bool:
    """Whether a folder of ``pythonpath`` (the child's or the server's) holds one of the server's ``modules``
    or a sitecustomize (which only a fresh interpreter runs); an entry that is not a folder counts as one
    that does."""
    names = modules | {"sitecustomize", "usercustomize"}
    for entry in filter(None, pythonpath.split(os.pathsep)):
        if not os.path.isdir(entry) or any(n.split(".")[0] in names for n in os.listdir(entry)):
            return True
    return False


def popen(args, **kwargs) -> subprocess.Popen:
    """``subprocess.Popen(args, **kwargs)``, forked warm where it can be (module docstring)."""
    return (_WarmPopen if _warm(args, kwargs) else subprocess.Popen)(args, **kwargs)


def run(args, *, input=None, capture_output=False, timeout=None, check=False, **kwargs):
    """``subprocess.run(args, ...)`` through :func:`popen`: the same arguments, result and errors."""
    if capture_output:
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    with popen(args, **kwargs) as process:
        try:
            stdout, stderr = process.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            process.kill()
            exc.stdout, exc.stderr = process.communicate()
            raise
        except BaseException:
            process.kill()
            raise
    code = process.poll()
    if check and code:
        raise subprocess.CalledProcessError(code, process.args, output=stdout, stderr=stderr)
    return subprocess.CompletedProcess(process.args, code, stdout, stderr)
