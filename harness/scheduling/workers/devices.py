"""One GPU per worker: which devices a ``harness work`` process trains on (DESIGN section 11).

Workers on one node never share a device unless asked:

* ``harness work --gpus 0,1`` takes exactly those devices, under a shared lock: other workers
  naming them too share them on purpose, a worker choosing free devices skips them, and a
  device another worker chose for itself is refused (one line naming it);
* otherwise a worker on a GPU machine takes ``--devices`` free devices from the ones it can
  see (``CUDA_VISIBLE_DEVICES``, else every device of the node), each behind an exclusive lock
  held for the worker's life; a device whose lock another worker holds is skipped.

A lock is a ``flock`` on ``gpu-<UUID>.lock`` in a folder of this host (``$HARNESS_DEVICE_LOCKS``,
default ``<tmp>/harness-devices``; a killed worker's lock goes with its process), keyed by the
GPU's UUID as ``nvidia-smi --query-gpu=index,uuid`` gives it in the worker's own view, not by the
index: two SLURM jobs on one node that each see their own GPU as device ``0`` lock two different
files (:func:`gpu_uuids`, :func:`lock_key`). A device ``nvidia-smi`` does not list (a MIG
instance's UUID, a machine without it) is keyed by its name.
The folder is world-writable and sticky (mode 1777, as ``/tmp``) and each lock file readable and
writable by all (0666), whatever the umask: a second Unix user's workers on a shared node take and
respect the same locks (the sticky bit keeps anyone from deleting another user's lock file). Only the
owner can set the modes; a folder or file another user made is used as it is.

Either way the worker then sets ``CUDA_VISIBLE_DEVICES`` to its devices before CUDA starts,
so its ranks are ``cuda:0 .. cuda:N-1`` (:mod:`harness.train.ranks`) and every child process
inherits the same view. ``harness launch --executor local`` gives each worker its own range
of devices already (submitit's ``visible_gpus``); the locks also cover workers started by
hand or by other launches on the same node.

Nothing here imports ``torch.cuda``: a CUDA driver started in the worker's process would ignore the
``CUDA_VISIBLE_DEVICES`` set after it.
"""

from __future__ import annotations

import fcntl
import os
import re
import stat
import subprocess
import tempfile
from collections.abc import Mapping
from contextlib import ExitStack
from pathlib import Path

LOCK_DIR_ENV = "HARNESS_DEVICE_LOCKS"
LOCK_DIR_MODE = 0o1777  # every user of the host adds locks; none deletes another's (sticky, as /tmp)
LOCK_FILE_MODE = 0o666  # every user of the host can open (and so flock) every lock


def _share(fd_or_path: int | Path, mode: int) -> None:
    """Give a lock folder or file ``mode`` (which the umask narrowed at creation) when this user owns it;
    one another user made keeps its mode (only its owner may change it)."""
    st = os.stat(fd_or_path)
    if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) != mode:
        os.chmod(fd_or_path, mode)


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


def gpu_uuids(listing: str | None = None) -> dict[str, str]:
    """``{index: UUID}`` of the GPUs in this process's view, from ``nvidia-smi --query-gpu=index,uuid
    --format=csv,noheader`` (``listing``: its output, for tests; ``{}`` without ``nvidia-smi``).

    Not ``torch.cuda``: a CUDA driver started in this process would ignore the ``CUDA_VISIBLE_DEVICES``
    the worker sets afterwards. Under SLURM's device cgroup each job lists only its own GPUs, from 0.
    """
    if listing is None:
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=60,
            )
        except (OSError, subprocess.TimeoutExpired):
            return {}
        listing = out.stdout if out.returncode == 0 else ""
    uuids = {}
    for line in listing.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit() and parts[1].startswith("GPU-"):
            uuids[parts[0]] = parts[1]
    return uuids


def lock_key(device: str, uuids: Mapping[str, str]) -> str:
    """The name a device is locked under: its UUID (an index through ``uuids``, :func:`gpu_uuids`; a
    ``GPU-``/``MIG-`` UUID as it is), else the device's own name (no ``nvidia-smi``)."""
    return uuids.get(device, device).replace("/", "_")


def lock_dir() -> Path:
    """Where this host's device locks live: ``$HARNESS_DEVICE_LOCKS`` or ``<tmp>/harness-devices``."""
    return Path(os.environ.get(LOCK_DIR_ENV) or Path(tempfile.gettempdir()) / "harness-devices")


class DeviceClaim:
    """``n`` free devices out of ``visible``, each locked until :meth:`release` (or the
    block of ``with``) ends; :attr:`devices` are the ones taken, in ``visible``'s order.

    Args:
        visible: the devices to choose from (``CUDA_VISIBLE_DEVICES`` entries).
        n: how many to take.
        folder: the lock folder (default :func:`lock_dir`).
        uuids: ``{index: UUID}`` (default :func:`gpu_uuids`): locks are keyed by :func:`lock_key`.
        named: take exactly ``visible`` under shared locks (``--gpus``), else refuse.

    Raises (on construction):
        NoFreeDevice: fewer than ``n`` of ``visible`` are free, or (``named``) one of them is another
            worker's own (the message names the devices and the lock folder).
        ValueError: ``n`` below 1.
    """

    def __init__(
        self,
        visible: list[str],
        n: int,
        folder: Path | None = None,
        *,
        uuids: Mapping[str, str] | None = None,
        named: bool = False,
    ) -> None:
        if n < 1:
            raise ValueError(f"a worker needs at least 1 device, got {n}")
        folder = lock_dir() if folder is None else Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        _share(folder, LOCK_DIR_MODE)
        uuids = gpu_uuids() if uuids is None else uuids
        self._stack = ExitStack()
        self.devices: list[str] = []
        for device in visible:
            if len(self.devices) == n:
                break
            key = lock_key(device, uuids)
            if self._lock(folder / f"gpu-{key}.lock", shared=named):
                self.devices.append(device)
            elif named:
                self.release()
                raise NoFreeDevice(
                    f"--gpus: GPU {device}{'' if key == device else f' ({key})'} is taken by a worker of this "
                    f"host that chose it for itself (lock {folder / f'gpu-{key}.lock'}); name other devices, "
                    "or stop that worker"
                )
        if len(self.devices) < n:
            free = len(self.devices)
            self.release()
            raise NoFreeDevice(
                f"{n} free GPU(s) needed, but only {free} of {', '.join(visible) or 'none'} are free "
                f"(the others are taken by workers on this host; locks in {folder}); stop a worker, or name "
                "devices to share on purpose with --gpus"
            )

    def _lock(self, path: Path, shared: bool) -> bool:
        """Take ``path``'s ``flock`` (shared or exclusive) without waiting, held until :meth:`release`;
        whether it was free."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT, LOCK_FILE_MODE)
        _share(fd, LOCK_FILE_MODE)
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._stack.callback(os.close, fd)  # closing the file lets go of the lock
        return True

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
    uuids: Mapping[str, str] | None = None,
) -> tuple[list[str], DeviceClaim]:
    """The devices of one worker and the claim that holds their locks.

    Args:
        gpus: ``--gpus`` (``None``: take free devices), locked shared (:class:`DeviceClaim` ``named``).
        devices: ranks per run (``--devices``); with ``--gpus`` it must equal their number.
        environ, count, folder, uuids: as :func:`visible_devices` and :class:`DeviceClaim` (tests).

    Raises:
        ValueError: ``--gpus`` and ``--devices`` disagree.
        NoFreeDevice: not enough free devices, or a ``--gpus`` device another worker chose for itself.
    """
    if gpus is not None:
        chosen = parse_gpus(gpus)
        if devices != len(chosen):
            raise ValueError(
                f"--gpus {gpus} names {len(chosen)} device(s) but --devices is {devices}: "
                "each run trains on all of the worker's devices"
            )
        claim = DeviceClaim(chosen, len(chosen), folder, uuids=uuids, named=True)
        return claim.devices, claim
    claim = DeviceClaim(visible_devices(environ, count), devices, folder, uuids=uuids)
    return claim.devices, claim


# --- Refuse a GPU request on a machine without one, in the harness's own line (not Lightning's, not a CPU run that says it trains on a GPU).
#
# Without it, ``harness work --gpus 0`` on a CPU-only machine trained on the CPU and said
# "worker trains on GPU(s) 0", ``--accelerator gpu`` spoke of "0 of none" free GPUs, and
# ``harness run --accelerator gpu`` printed Lightning's "No supported gpu backend found!".
# The GPUs are those the worker would choose from (:func:`harness.scheduling.workers.devices.visible_devices`:
# ``CUDA_VISIBLE_DEVICES`` when set, else what ``nvidia-smi`` lists), not ``torch.cuda``'s: a CUDA
# driver started in the command's process would ignore the ``CUDA_VISIBLE_DEVICES`` a worker sets later.

#: ``--accelerator`` values that ask for an NVIDIA GPU.
GPU_ACCELERATORS = ("gpu", "cuda")


def check_accelerator(accelerator: str, gpus: str | None = None, *, gpu_count: int | None = None) -> None:
    """Refuse ``--accelerator gpu|cuda`` or ``--gpus LIST`` where the machine has no CUDA device.

    Args:
        accelerator: the ``--accelerator`` value (``auto``, ``cpu``, ``gpu``, ``cuda``, ...).
        gpus: the ``--gpus`` value, or ``None``.
        gpu_count: the GPUs this process may use (default: how many
            :func:`~harness.scheduling.workers.devices.visible_devices` lists; counted only when a GPU is asked for).

    Raises:
        ValueError: naming the option, the missing device and what to use instead.
    """
    if gpus is None and accelerator not in GPU_ACCELERATORS:
        return
    if (len(visible_devices()) if gpu_count is None else gpu_count) > 0:
        return
    if gpus is not None:
        raise ValueError(
            f"--gpus {gpus}: this machine has no CUDA device (nvidia-smi lists none, "
            "CUDA_VISIBLE_DEVICES names none); "
            "drop --gpus to train on the CPU"
        )
    raise ValueError(f"--accelerator {accelerator}: this machine has no GPU; use --accelerator cpu or auto")


__all__ = [
    "LOCK_DIR_ENV",
    "NoFreeDevice",
    "parse_gpus",
    "node_gpu_count",
    "visible_devices",
    "gpu_uuids",
    "lock_key",
    "lock_dir",
    "DeviceClaim",
    "assign",
    "GPU_ACCELERATORS",
    "check_accelerator",
]
