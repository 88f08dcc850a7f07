"""A pseudo-terminal for tests of what a person at a terminal sees (a bar, lines, the long steps' lines):
:class:`Terminal` starts processes with it as their stderr, :func:`read_until` reads what it showed.
Used by tests/train/test_progress_display.py and tests/commands/test_long_steps_say.py."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time

import warm


def read_until(fd: int, proc: subprocess.Popen, done, timeout_s: float = 300) -> str:
    """Read a pty master until ``done(text)`` or the process ends; returns the text."""
    out = b""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: every writer closed the terminal
                break
            if not chunk:
                break
            out += chunk
            if done(out.decode(errors="replace")):
                break
        elif proc.poll() is not None:
            break
    return out.decode(errors="replace")


class Terminal:
    """A pseudo-terminal; processes started on it have it as stdout and stderr."""

    def __init__(self):
        self.master, self.slave = pty.openpty()
        # 30 rows x 120 columns, as a terminal window has (a new pty is 0 x 0)
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 120, 0, 0))
        self.procs: list[subprocess.Popen] = []

    def start(self, cmd, env, **kw) -> subprocess.Popen:
        kw.setdefault("stdout", self.slave)
        p = warm.popen(cmd, stdin=subprocess.DEVNULL, stderr=self.slave, env=env, **kw)
        self.procs.append(p)
        return p

    def other_worker(self, env) -> subprocess.Popen:
        """A process registered as training on this terminal (as a second worker would be)."""
        code = (
            "import sys, time\nfrom harness.common.console import SharedTerminal\n"
            "t = SharedTerminal(sys.stderr).__enter__()\nprint('ready', flush=True)\ntime.sleep(600)\n"
        )
        p = self.start([sys.executable, "-c", code], env, stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "ready"
        return p

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        os.close(self.master)
        os.close(self.slave)
