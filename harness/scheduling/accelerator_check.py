"""Refuse a GPU request on a machine without one, in the harness's own line (issue 40).

Without it, ``harness work --gpus 0`` on a CPU-only machine trained on the CPU and said
"worker trains on GPU(s) 0", ``--accelerator gpu`` spoke of "0 of none" free GPUs, and
``harness run --accelerator gpu`` printed Lightning's "No supported gpu backend found!".
The GPUs are those the worker would choose from (:func:`harness.scheduling.devices.visible_devices`:
``CUDA_VISIBLE_DEVICES`` when set, else what ``nvidia-smi`` lists), not ``torch.cuda``'s: a CUDA
driver started in the command's process would ignore the ``CUDA_VISIBLE_DEVICES`` a worker sets later.
"""

from __future__ import annotations

from harness.scheduling.devices import visible_devices

#: ``--accelerator`` values that ask for an NVIDIA GPU.
GPU_ACCELERATORS = ("gpu", "cuda")


def check_accelerator(accelerator: str, gpus: str | None = None, *, gpu_count: int | None = None) -> None:
    """Refuse ``--accelerator gpu|cuda`` or ``--gpus LIST`` where the machine has no CUDA device.

    Args:
        accelerator: the ``--accelerator`` value (``auto``, ``cpu``, ``gpu``, ``cuda``, ...).
        gpus: the ``--gpus`` value, or ``None``.
        gpu_count: the GPUs this process may use (default: how many
            :func:`~harness.scheduling.devices.visible_devices` lists; counted only when a GPU is asked for).

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


__all__ = ["GPU_ACCELERATORS", "check_accelerator"]
