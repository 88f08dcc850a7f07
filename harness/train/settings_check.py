"""Execution settings Lightning or torch would reject at run time, refused before a run is claimed
(a configuration error must not spend a retry: ``harness work --strategy nosuch`` once spent every
retry of a healthy run), and a ``$HARNESS_HARDWARE_CLASS`` that is not a class key (it once failed every
attempt of every run a worker claimed).

:func:`check_settings` asks Lightning itself: it builds (and drops) the run's ``Trainer``
(:func:`harness.train.trainer.make_trainer`) with the settings' accelerator, devices, strategy and number
of nodes, so every value Lightning accepts at run time is accepted here and nothing else.
:func:`check_run` adds what depends on the run: its global batch must split evenly over the ranks
(:mod:`harness.data.datamodule` gives rank ``r`` the rows ``r::world``). A micro-batch size never limits
the device count: it is capped at the rank's rows (:func:`harness.train.microbatch.resolve_micro_batch`).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.strategies import StrategyRegistry

from harness.design.config import RunConfig
from harness.train.execution import ExecutionSettings
from harness.train.hardware_override import class_override
from harness.train.microbatch import divisors
from harness.train.ranks import started_externally
from harness.train.trainer import make_trainer, quiet_lightning, resolve_accelerator

#: What Lightning raises for settings it cannot run with (``ModuleNotFoundError`` for ``tpu``:
#: torch_xla missing; ``ValueError``/``MisconfigurationException`` for the rest).
_REFUSALS = (ValueError, TypeError, ImportError, RuntimeError, MisconfigurationException)


def _start_method(strategy: str) -> str | None:
    """How Lightning's launcher of ``strategy`` starts ranks (``spawn``, ``fork``; ``popen`` or ``None``:
    it does not start them in this process's place)."""
    if strategy not in StrategyRegistry:
        return None
    return StrategyRegistry[strategy]["init_params"].get("start_method")


def strategies() -> list[str]:
    """The strategy names a run accepts: ``auto`` and Lightning's registry's, less those whose launcher
    spawns or forks the Trainer's process (``ddp_spawn``, ``ddp_fork``, ``ddp_notebook``...): the harness
    starts a run's ranks itself (:mod:`harness.train.ranks`), and a spawned rank would need the run's
    callbacks pickled, which hold the lease's fence and local closures."""
    names = StrategyRegistry.available_strategies()
    return ["auto", *sorted(n for n in names if _start_method(n) in (None, "popen"))]


def check_settings(settings: ExecutionSettings) -> None:
    """Refuse execution settings Lightning would reject when the run starts, and a
    ``$HARNESS_HARDWARE_CLASS`` every run would fail on (:func:`harness.train.hardware_override.class_override`).

    Raises:
        ValueError: one line naming the option, its value and (for ``--strategy``) what is allowed;
            ``num_nodes`` > 1 in a process that no multi-node launcher (torchrun, srun) started; a
            ``$HARNESS_HARDWARE_CLASS`` that is not a class key.
    """
    class_override()  # the class every result file records: the environment's error, never a run's
    if settings.num_nodes > 1 and not started_externally():
        # rank 0 alone would wait in the process group's rendezvous for ranks no one starts, silently
        raise ValueError(
            f"--num-nodes {settings.num_nodes}: this process was not started by torchrun or srun (neither "
            "LOCAL_RANK nor SLURM_NTASKS > 1 is set), so no rank on another node can join it; start one "
            "process per GPU on every node with torchrun --nnodes N or srun --nodes N "
            "(docs/paper-scale.md), or drop --num-nodes"
        )
    method = _start_method(settings.strategy)
    if method not in (None, "popen"):
        raise ValueError(
            f"--strategy {settings.strategy}: Lightning would start the ranks by {method}, but the harness "
            "starts a run's ranks itself (one process per device: use ddp, or auto); allowed: "
            + ", ".join(strategies())
        )
    if settings.strategy not in strategies():
        raise ValueError(
            f"--strategy {settings.strategy}: not a Lightning strategy; allowed: {', '.join(strategies())}"
        )
    quiet_lightning()
    try:
        make_trainer(  # the run's own Trainer settings; built and dropped (it writes nothing)
            accelerator=resolve_accelerator(settings.accelerator),
            precision="32-true",  # a run's precision is checked when its grid is queued (TrainConfig)
            max_steps=1,
            callbacks=[],
            root=Path(tempfile.gettempdir()),
            devices=settings.devices,
            strategy=settings.strategy,
            num_nodes=settings.num_nodes,
        )
    except _REFUSALS as exc:
        words = " ".join(str(exc).split())  # Lightning's own reason, on one line
        raise ValueError(
            f"--accelerator {settings.accelerator} --devices {settings.devices} --strategy "
            f"{settings.strategy}"
            + (f" --num-nodes {settings.num_nodes}" if settings.num_nodes != 1 else "")
            + f": Lightning refuses them: {words}"
        ) from None


def check_run(config: RunConfig, settings: ExecutionSettings, option: str = "--devices") -> None:
    """Refuse a run whose global batch (sequences) does not split over the settings' ranks
    (``devices x num_nodes``; ``devices='auto'`` is counted when the run starts, not here).
    ``option``: the command's name for the ranks per node (``harness launch``: ``--gpus-per-worker``).

    Raises:
        ValueError: one line naming the run, its batch and the device counts allowed.
    """
    if not isinstance(settings.devices, int):
        return
    world = settings.devices * settings.num_nodes
    context = config.model_config(1).context
    batch = config.train_config().batch_tokens // context
    if batch % world == 0:
        return
    allowed = [d for d in divisors(batch) if batch % (d * settings.num_nodes) == 0]
    nodes = f" x --num-nodes {settings.num_nodes}" if settings.num_nodes != 1 else ""
    raise ValueError(
        f"{option} {settings.devices}{nodes}: run {config.run_id} has a global batch of {batch} sequences "
        f"(batch_tokens={batch * context}, context {context}), which does not split over {world} ranks; "
        f"allowed {option}: {', '.join(map(str, allowed)) or f'none on {settings.num_nodes} nodes'}"
    )


__all__ = ["strategies", "check_settings", "check_run"]
