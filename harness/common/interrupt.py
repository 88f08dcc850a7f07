"""Ctrl-C that always ends a command promptly, whatever the main thread is inside.

Python's own SIGINT handler only raises ``KeyboardInterrupt`` at the next bytecode of the
main thread, and a library may catch it there: DuckDB turns it into
``RuntimeError("Query interrupted")`` (measured with duckdb 2.0: a SIGINT during a query
never reaches the caller as a ``KeyboardInterrupt``), a retry loop that catches
``Exception`` then goes on waiting, and Lightning's ``fit`` ignores SIGINT from its first
one on. Nor does the handler run at all while the main thread is inside a long native call
(the BPE trainer of HF ``tokenizers``: seconds to minutes).

:func:`prompt_exit` records the Ctrl-C (:attr:`Interrupt.seen`, so the command can tell
"interrupted" from a real error) and still raises ``KeyboardInterrupt``; and it sees the
signal where no Python code of the main thread has to run: the interpreter's C-level
handler writes the signal number to a pipe (:func:`signal.set_wakeup_fd`), and a watcher
thread reading it starts a watchdog. If the process is still alive ``grace_s`` seconds
later (a call that swallowed the interrupt, a blocking native call, a hanging interpreter
shutdown), it ends with ``os._exit(code)``. A second Ctrl-C ends it at once. An exit at any
point leaves what a SIGKILL leaves, which the harness is built to survive: every file
write is atomic (``harness.common.files``), the queue journal mends a torn line, and a run's
lease covers a claim not given back.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

GRACE_S = 10.0  # seconds from Ctrl-C to the forced exit: room for a clean return (a run released) on a loaded machine


@dataclass
class Interrupt:
    """What :func:`prompt_exit` saw: ``seen`` is true once SIGINT arrived. ``held``: how many
    :func:`complete_before_interrupt` blocks are open (a Ctrl-C then waits for their end)."""

    seen: bool = False
    held: int = 0


#: A Ctrl-C that comes this soon after the first is the same keypress: a terminal sends SIGINT to every
#: process of its group at once, and a forked child (a tokenizer pool, a data loader) shares the pipe.
SAME_KEYPRESS_S = 0.5


def _watch(read_fd: int, code: int, grace_s: float, state: Interrupt) -> None:
    """The watcher thread: on the first SIGINT byte from the wakeup pipe, start the watchdog;
    on a later one, exit at once. Ends when every write end of the pipe is closed."""
    first = None
    with open(read_fd, "rb", buffering=0, closefd=False) as pipe:
        while data := pipe.read(64):
            if signal.SIGINT not in data:
                continue  # another signal with a Python handler (SIGTERM in `harness work`)
            now = time.monotonic()
            if first is None:
                first, state.seen = now, True
                # no flush on the way out: the main thread may hold stdout's lock (a write to a full pipe)
                watchdog = threading.Timer(grace_s, os._exit, (code,))
                watchdog.daemon = True  # a clean exit before it fires does not wait for it
                watchdog.start()
            elif now - first >= SAME_KEYPRESS_S:
                os._exit(code)  # the second Ctrl-C: at once
    _PIPES.discard(read_fd)
    os.close(read_fd)


_PIPES: set[int] = set()  # the wakeup pipes' ends open in this process
_ACTIVE: list[Interrupt] = []  # the states of the prompt_exit blocks the main thread is in (innermost last)


def raise_if_interrupted() -> None:
    """Raise ``KeyboardInterrupt`` if a Ctrl-C arrived inside the current :func:`prompt_exit` block, even
    one a library swallowed (a ``KeyboardInterrupt`` raised inside a ``__del__`` or a callback is lost,
    and ``except BaseException`` in a dependency's import eats it): the watcher thread marks it seen from
    the signal itself. A command calls it just before a write it cannot take back (the queue's enqueue),
    so a lost interrupt never lets the write through. Outside a block: nothing to check.
    """
    if interrupted():
        raise KeyboardInterrupt


def interrupted() -> bool:
    """Whether a Ctrl-C arrived inside the current :func:`prompt_exit` block (``False`` outside one), even
    one a library turned into its own error."""
    return bool(_ACTIVE and _ACTIVE[-1].seen)


class InterruptedAfterWrite(KeyboardInterrupt):
    """A Ctrl-C that :func:`complete_before_interrupt` held until its write was complete; its text says so."""


class InterruptedIncomplete(KeyboardInterrupt):
    """A Ctrl-C that left a command's writes part-way (``harness import``'s files and queue); its text says
    what is incomplete and the command that finishes it."""


class InterruptedBeforeWrite(KeyboardInterrupt):
    """A Ctrl-C that a command undid whole, before its first lasting write (``harness import``'s staged
    files removed, its new folder too); its text says that nothing changed."""


@contextmanager
def complete_before_interrupt(what: str) -> Iterator[None]:
    """A write that must land whole or not at all (the queue's trials: the journal takes them one
    append at a time). Refuses to start after a Ctrl-C (:func:`raise_if_interrupted`); a Ctrl-C that
    arrives inside waits for the block's end, then raises ``KeyboardInterrupt("... WHAT ...")`` saying
    the write was completed. The block must be short against :data:`GRACE_S` (2,000 trials enqueue in
    about 2 s on a journal). Outside a :func:`prompt_exit` block: no change.
    """
    raise_if_interrupted()
    if not _ACTIVE:
        yield
        return
    state = _ACTIVE[-1]
    state.held += 1
    try:
        yield
    finally:
        state.held -= 1
    if state.seen and not state.held:
        raise InterruptedAfterWrite(f"Ctrl-C arrived while it {what}: that was completed first")


def _forget_pipe_in_child() -> None:
    """In a forked child (a process pool's worker): no wakeup pipe (its handlers are its own),
    and the parent's pipe ends closed (the parent's watcher ends when its own are closed)."""
    try:
        signal.set_wakeup_fd(-1)
    except ValueError:  # forked from another thread than the main one: nothing was inherited there
        pass
    for fd in list(_PIPES):
        _PIPES.discard(fd)
        try:
            os.close(fd)
        except OSError:
            pass


os.register_at_fork(after_in_child=_forget_pipe_in_child)


@contextmanager
def prompt_exit(code: int, *, grace_s: float = GRACE_S) -> Iterator[Interrupt]:
    """Within the block, SIGINT raises ``KeyboardInterrupt`` and guarantees an exit with
    ``code`` within ``grace_s`` seconds (see the module docstring). The previous handler and
    wakeup fd are restored on leaving (a watchdog already started keeps running: the process
    is on its way out); outside the main thread (where handlers cannot be set) a no-op.

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
        state.seen = True
        if not state.held:  # else complete_before_interrupt raises at its end
            raise KeyboardInterrupt

    read_fd, write_fd = os.pipe()
    _PIPES.update((read_fd, write_fd))
    os.set_blocking(write_fd, False)  # the C handler must never block on a full pipe
    previous = signal.signal(signal.SIGINT, handler)
    previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    threading.Thread(
        target=_watch, args=(read_fd, code, grace_s, state), name="ctrl-c-watcher", daemon=True
    ).start()
    _ACTIVE.append(state)
    try:
        yield state
    finally:
        _ACTIVE.remove(state)
        signal.set_wakeup_fd(previous_fd)
        signal.signal(signal.SIGINT, previous)
        _PIPES.discard(write_fd)
        os.close(write_fd)  # the watcher reads the end of the pipe and returns


__all__ = [
    "GRACE_S",
    "Interrupt",
    "InterruptedAfterWrite",
    "InterruptedIncomplete",
    "InterruptedBeforeWrite",
    "complete_before_interrupt",
    "interrupted",
    "prompt_exit",
    "raise_if_interrupted",
]
