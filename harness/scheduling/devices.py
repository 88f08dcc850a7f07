"""One GPU per worker: which devices a ``harness work`` process trains on (DESIGN section 11).

Workers on one node never share a device unless asked:

* ``harness work --gpus 0,1`` takes exactly those devices (asked for: no lock is taken);
* otherwise a worker on a GPU machine takes ``--devices`` free devices from the ones it can
  see (``CUDA_VISIBLE_DEVICES``, else every device of the node), each behind a lock file
  of this host (``$HARNESS_DEVICE_LOCKS``, default ``<tmp>/harness-devices``) held for the
  worker's life; a device whose lock another worker holds is skipped. The lock is a
  ``flock`` (:mod:`filelock`): a killed worker's lock goes with its process.

Either way the worker then sets ``CUDA_VISIBLE_DEVICES`` to its devices before CUDA starts,
so its ranks are ``cuda:0 .. cuda:N-1`` (:mod:`harness.train.ranks`) and every child process
inherits the same view. ``harness launch --executor local`` gives each worker its own range
of devices already (submitit's ``visible_gpus``); the locks also cover workers started by
hand or by other launches on the same node.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from contextlib import ExitStack
from pathlib import Path

from filelock import FileLock, Timeout

LOCK_DIR_ENV = "HARNESS_DEVICE_LOCKS"


class NoFreeDevice(ValueError):
    """Fewer free devices on this host than a worker asks for (a ``ValueError``: ``harness
    work`` says it in one line and exits 2)."""


def parse_gpus(text: str) -> list[str]:
    """``--gpus 0,1`` (device indices or ``GPU-...`` UUIDs, as ``CUDA_VISIBLE_DEVICES`` takes them).

    Raises:
        ValueError: an empty list, an empty or malformed entry, or a device named twice.
    """
    items = [t.strip() for t in str(text).split(",")]
    for t in items:
        if not re.fullmatch(r"\d+|(GPU|MIG)-[0-9A-Za-z/-]+", t):
            raise ValueError(
                f"--gpus {text!r}: {t!r} is not a device index or a GPU-/MIG- UUID (expected e.g. --gpus 0,1)"
            )
    if len(set(items)) != len(items):
        raise ValueError(f"--gpus {text!r}: a device is named twice")
    return items


def node_gpu_count() -> int:
    """The node's NVIDIA GPUs as ``nvidia-smi -L`` lists them (0 without ``nvidia-smi``).

    Not ``torch.cuda``: a CUDA driver started in this process would ignore the
    ``CUDA_VISIBLE_DEVICES`` the worker sets afterwards.
    """
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU ")) if out.returncode == 0 else 0


def visible_devices(environ: dict | None = None, count: int | None = None) -> list[str]:
    """The devices this process may use: the entries of ``CUDA_VISIBLE_DEVICES`` when set,
    else ``0 .. count-1`` (``count``: the node's devices, default :func:`node_gpu_count`)."""
    environ = os.environ if environ is None else environ
    value = environ.get("CUDA_VISIBLE_DEVICES")
    if value is not None:
        return [t.strip() for t in value.split(",") if t.strip()]
    return [str(i) for i in range(node_gpu_count() if count is None else count)]


def lock_dir() -> Path:
    """Where this host's device locks live: ``$HARNESS_DEVICE_LOCKS`` or ``<tmp>/harness-devices``."""
    return Path(os.environ.get(LOCK_DIR_ENV) or Path(tempfile.gettempdir()) / "harness-devices")


class DeviceClaim:
    """``n`` free devices out of ``visible``, each locked until :meth:`release` (or the
    block of ``with``) ends; :attr:`devices` are the ones taken, in ``visible``'s order.

    Raises (on construction):
        NoFreeDevice: fewer than ``n`` of ``visible`` are free (the message names the
            devices and the lock folder, and how to share a device on purpose).
        ValueError: ``n`` below 1.
    """

    def __init__(self, visible: list[str], n: int, folder: Path | None = None) -> None:
        if n < 1:
            raise ValueError(f"a worker needs at least 1 device, got {n}")
        folder = lock_dir() if folder is None else Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self._stack = ExitStack()
        self.devices: list[str] = []
        for device in visible:
            if len(self.devices) == n:
                break
            lock = FileLock(folder / f"gpu-{device.replace('/', '_')}.lock", timeout=0)
            try:
                lock.acquire()
            except Timeout:
                continue  # another worker of this host trains on it
            self._stack.callback(lock.release)
            self.devices.append(device)
        if len(self.devices) < n:
            free = len(self.devices)
            self.release()
            raise NoFreeDevice(
                f"{n} free GPU(s) needed, but only {free} of {', '.join(visible) or 'none'} are free "
                f"(the others are taken by workers on this host; locks in {folder}); stop a worker, or name "
                "devices to share on purpose with --gpus"
            )

    def release(self) -> None:
        self._stack.close()
        self.devices = []

    def __enter__(self) -> DeviceClaim:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def assign(
    gpus: str | None,
    devices: int,
    *,
    environ: dict | None = None,
    count: int | None = None,
    folder: Path | None = None,
) -> tuple[list[str], DeviceClaim | None]:
    """The devices of one worker and the claim that holds them (``None`` with ``--gpus``).

    Args:
        gpus: ``--gpus`` (``None``: take free devices).
        devices: ranks per run (``--devices``); with ``--gpus`` it must equal their number.
        environ, count, folder: as :func:`visible_devices` and :class:`DeviceClaim` (tests).

    Raises:
        ValueError: ``--gpus`` and ``--devices`` disagree.
        NoFreeDevice: not enough free devices (:class:`DeviceClaim`).
    """
    if gpus is not None:
        chosen = parse_gpus(gpus)
        if devices != len(chosen):
            raise ValueError(
                f"--gpus {gpus} names {len(chosen)} device(s) but --devices is {devices}: "
                "each run trains on all of the worker's devices"
            )
        return chosen, None
    claim = DeviceClaim(visible_devices(environ, count), devices, folder)
    return claim.devices, claim


__all__ = [
    "LOCK_DIR_ENV",
    "NoFreeDevice",
    "parse_gpus",
    "node_gpu_count",
    "visible_devices",
    "lock_dir",
    "DeviceClaim",
    "assign",
]
