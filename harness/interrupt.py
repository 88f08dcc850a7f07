"""Ctrl-C that always ends a command promptly, whatever the main thread is inside.

Python's own SIGINT handler only raises ``KeyboardInterrupt`` at the next bytecode, and a
library may catch it there: DuckDB turns it into ``RuntimeError("Query interrupted")``
(measured with duckdb 2.0: a SIGINT during a query never reaches the caller as a
``KeyboardInterrupt``), and a retry loop that catches ``Exception`` then goes on waiting.
:func:`prompt_exit` records the Ctrl-C (:attr:`Interrupt.seen`, so the command can tell
"interrupted" from a real error), still raises ``KeyboardInterrupt``, and starts a watchdog:
if the process is still alive ``grace_s`` seconds later (a call that swallowed the
interrupt, a blocking native call, a hanging interpreter shutdown), it ends with
``os._exit(code)``. A second Ctrl-C ends it at once. Only for commands whose every write is
atomic (``harness.files``), so an exit at any point leaves no half-written file.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

GRACE_S = 5.0  # seconds from Ctrl-C to the forced exit: room for a clean return on a loaded machine


@dataclass
class Interrupt:
    """What :func:`prompt_exit` saw: ``seen`` is true once SIGINT arrived."""

    seen: bool = False


@contextmanager
def prompt_exit(code: int, *, grace_s: float = GRACE_S) -> Iterator[Interrupt]:
    """Within the block, SIGINT raises ``KeyboardInterrupt`` and guarantees an exit with
    ``code`` within ``grace_s`` seconds (see the module docstring). The previous handler is
    restored on leaving; outside the main thread (where handlers cannot be set) a no-op.

    Raises:
        ValueError: ``grace_s`` not positive.
    """
    if not grace_s > 0:
        raise ValueError(f"grace_s={grace_s}: must be a positive number of seconds")
    state = Interrupt()
    if threading.current_thread() is not threading.main_thread():
        yield state
        return

    def handler(signum, frame) -> None:
        if state.seen:  # the second Ctrl-C: at once
            os._exit(code)
        state.seen = True
        # no flush on the way out: the main thread may hold stdout's lock (a write to a full pipe)
        watchdog = threading.Timer(grace_s, os._exit, (code,))
        watchdog.daemon = True  # a clean exit before it fires does not wait for it
        watchdog.start()
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield state
    finally:
        signal.signal(signal.SIGINT, previous)


__all__ = ["GRACE_S", "Interrupt", "prompt_exit"]
