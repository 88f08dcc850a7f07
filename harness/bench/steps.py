"""One variant's training step, timed interleaved with the others, and its peak memory."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from harness.bench.settings import BenchConfig, autocast, default_precision, sync
from harness.design.config import train_config
from harness.models import build_model, count_params
from harness.train.lit import LitLM

# -- one variant's training step --------------------------------------------------------


def train_step(
    forward,
    model,
    opt,
    sched,
    x,
    y,
    max_norm: float,
    device: torch.device,
    precision: str | None = None,
    *,
    micro_batches: int = 1,
    loss_fn: Callable | None = None,
) -> None:
    """One optimiser step of ``micro_batches`` micro-batches ``(x, y)`` (``[m, T]`` each), in
    the order of :meth:`harness.train.lit.LitLM.training_step`: forward and loss, then
    ``zero_grad(set_to_none=True)`` before the first backward, a backward per micro-batch (its
    loss weighted ``1 / micro_batches``, the gradients accumulating), then one gradient clip,
    one AdamW step and one LR-schedule step. ``precision``: a Lightning precision (``32-true``
    or ``bf16-mixed``; default: the device's, as a run's ``auto``). ``loss_fn(logits, y)``:
    the training loss (default: token-mean cross-entropy of the float32 logits).

    The order matters on CPU: it decides which buffers the allocator can reuse (the last
    step's gradients live through the forward), which moves step times by ~10 %.
    """
    for k in range(micro_batches):
        with autocast(device, precision):
            logits = forward(x)
        if loss_fn is None:
            loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
        else:
            loss = loss_fn(logits, y)
        if micro_batches > 1:
            loss = loss / micro_batches
        if k == 0:
            opt.zero_grad(set_to_none=True)
        logits = None  # the logits' memory is free before the backward, as in training
        loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()


class StepArm:
    """One variant's model, optimiser and :func:`train_step` on a fixed micro-batch.

    A step is the one training runs (DESIGN section 11): ``micro_batches`` forward+backward
    passes of the micro-batch ``batch`` (``[m, T]``), one clip, one AdamW step. The model is
    wrapped in a :class:`~harness.train.lit.LitLM` moved to ``device`` before its
    ``configure_optimizers`` builds the optimiser, so the optimiser is the one a run on that
    device builds (fused AdamW on CUDA, same parameter groups), and the loss is its loss.
    ``precision`` (``32-true`` / ``bf16-mixed``; default the device's) is the step's numeric
    precision; :attr:`name` is the variant, or ``variant@precision`` for an arm whose
    precision is not the device's default (the bf16/fp32 comparison), plus ``@per_site`` for an arm
    on the per-site ``routing`` path (``--per-site``: two-phase against per-site routing).
    """

    def __init__(
        self,
        variant: str,
        cfg: BenchConfig,
        device: torch.device,
        batch: tuple[torch.Tensor, torch.Tensor],
        vocab_size: int,
        total_steps: int,
        precision: str | None = None,
        micro_batches: int = 1,
        routing: str = "two_phase",
    ) -> None:
        self.variant = variant
        self.precision = precision or default_precision(device)
        self.name = variant if self.precision == default_precision(device) else f"{variant}@{self.precision}"
        self.routing = routing
        if routing != "two_phase":
            self.name += f"@{routing}"
        self.device = device
        self.micro_batches = micro_batches
        self.model = build_model(variant, cfg.size, seed=cfg.seed, routing=routing, vocab_size=vocab_size)
        self.n_params = count_params(self.model)["total"]
        self.train = train_config(cfg.size)
        x, y = batch
        self.x, self.y = x.to(device), y.to(device)
        self.lit = LitLM(
            self.model,
            self.train,
            total_steps=total_steps,
            batch_tokens=x.numel() * micro_batches,
            token_bytes=torch.ones(vocab_size, dtype=torch.int64),
        ).to(device)  # before configure_optimizers: it builds the device's optimiser (fused on CUDA)
        opt = self.lit.configure_optimizers()
        self.opt, self.sched = opt["optimizer"], opt["lr_scheduler"]["scheduler"]
        self.forward = torch.compile(self.model) if cfg.compile else self.model
        self.max_norm = self.train.grad_clip if self.train.grad_clip > 0 else float("inf")
        #: why the arm is left out (an out-of-memory), or None while it runs
        self.failed: str | None = None

    def step(self) -> None:
        train_step(
            self.forward,
            self.model,
            self.opt,
            self.sched,
            self.x,
            self.y,
            self.max_norm,
            self.device,
            self.precision,
            micro_batches=self.micro_batches,
            loss_fn=self.lit.loss,
        )

    def shrink(self) -> bool:
        """Take the micro-batch's largest divisor at most half its rows as the new micro-batch,
        with proportionally more micro-batches (the step's tokens, ``rows x micro_batches``, stay);
        False at one row. For an arm that does not fit at the other arms' micro-batch."""
        rows = self.x.shape[0]
        if rows == 1:
            return False
        new = max(d for d in range(1, rows // 2 + 1) if rows % d == 0)
        self.micro_batches *= rows // new
        self.x, self.y = self.x[:new].contiguous(), self.y[:new].contiguous()
        return True

    def recover(self) -> None:
        """After an out-of-memory: drop the gradients and return the allocator's cached blocks."""
        self.free_grads()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def free_grads(self) -> None:
        """Drop the gradients (``set_to_none``), leaving only persistent state."""
        self.opt.zero_grad(set_to_none=True)

    def persistent_bytes(self) -> int:
        """Bytes of parameters, buffers and optimiser state (each storage counted once;
        gradients are counted in the step's transient part, see :func:`peak_step_bytes`)."""
        tensors = [*self.model.parameters(), *self.model.buffers()]
        for state in self.opt.state.values():
            tensors.extend(t for t in state.values() if torch.is_tensor(t))
        seen: dict[tuple, int] = {}
        for t in tensors:
            storage = t.untyped_storage()
            seen[(t.device.type, storage.data_ptr())] = storage.nbytes()
        return sum(seen.values())


def out_of_memory(arm: StepArm, exc: BaseException, say: Callable[[str], None]) -> None:
    """Leave ``arm`` out after ``exc`` (an out-of-memory): its reason in :attr:`StepArm.failed`,
    one line to ``say``, its memory freed. The other arms go on (an arm that does not fit is a finding, never a failed bench)."""
    arm.recover()
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    arm.failed = (
        f"out of memory at {arm.micro_batches} micro-batch(es) of {arm.x.shape[0]} sequences: {first}"
    )
    say(f"{arm.name}: n/a, left out ({arm.failed})")


def fit_arms(arms: list[StepArm], shrinkable: set[str], say: Callable[[str], None]) -> list[StepArm]:
    """One untimed step of every arm (the first warmup step; the compile under ``--compile``).

    An arm named in ``shrinkable`` that runs out of memory retries at a smaller micro-batch
    (:meth:`StepArm.shrink`, the step's tokens unchanged) until it fits or is at one sequence;
    any other arm, or one at one sequence, is left out (:func:`out_of_memory`). Returns the arms
    that ran a step.
    """
    for arm in arms:
        while True:
            try:
                arm.step()
                break
            except torch.OutOfMemoryError as exc:
                rows = arm.x.shape[0]
                if arm.name in shrinkable and arm.shrink():
                    arm.recover()
                    say(f"{arm.name}: out of memory at a micro-batch of {rows}; trying {arm.x.shape[0]}")
                    continue
                out_of_memory(arm, exc, say)
                break
    return [arm for arm in arms if not arm.failed]


#: rounds between the progress lines of :func:`time_steps`
PROGRESS_EVERY = 10


def round_order(n: int, r: int) -> list[int]:
    """The arms' order in round ``r`` of ``n`` arms: rotated by one each round, round ``r``
    starting with arm ``r mod n`` (so no arm always follows the same one)."""
    return [(r + k) % n for k in range(n)]


def time_steps(
    arms: list[StepArm],
    steps: int,
    warmup: int,
    *,
    max_steps: int | None = None,
    enough: Callable[[dict[str, list[float]]], bool] | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, list[float]]:
    """Interleaved per-step times in ms: ``{arm name: [one value per round]}``.

    After ``warmup`` steps per arm, each round runs one step of every arm, round ``r``
    starting with arm ``r mod n`` (see :mod:`harness.bench`). ``steps`` rounds at least;
    then, while ``enough(times)`` is false, more rounds up to ``max_steps`` in all (the
    intervals of :mod:`harness.bench.intervals` narrow with every round). ``progress``
    gets a line every :data:`PROGRESS_EVERY` rounds (a long benchmark is not silent). An arm
    that runs out of memory is left out (:func:`out_of_memory`): no entry in the result.
    """
    device = arms[0].device
    say = progress or (lambda msg: None)
    for arm in arms:
        try:
            for _ in range(warmup):
                arm.step()
        except torch.OutOfMemoryError as exc:
            out_of_memory(arm, exc, say)
    sync(device)
    times: dict[str, list[float]] = {arm.name: [] for arm in arms}

    def live() -> dict[str, list[float]]:
        return {arm.name: times[arm.name] for arm in arms if not arm.failed}

    n, limit = len(arms), max(steps, max_steps or steps)
    t_start = time.perf_counter()
    for r in range(limit):
        if r >= steps and (enough is None or enough(live())):
            break
        if progress is not None and r and r % PROGRESS_EVERY == 0:
            progress(
                f"{r} rounds timed ({time.perf_counter() - t_start:.0f} s; at least {steps}, at most {limit})"
            )
        for i in round_order(n, r):
            arm = arms[i]
            if arm.failed:
                continue
            sync(device)
            t0 = time.perf_counter()
            try:
                arm.step()
            except torch.OutOfMemoryError as exc:
                out_of_memory(arm, exc, say)
                continue
            sync(device)
            times[arm.name].append((time.perf_counter() - t0) * 1e3)
    return live()


@contextmanager
def quiet_stderr():
    """Silence file descriptor 2 (Kineto prints two log lines at every profiler start/stop)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _guarded_step(arm: StepArm, say: Callable[[str], None]) -> bool:
    """One step of ``arm``; False (the arm left out, :func:`out_of_memory`) when it ran out of memory."""
    try:
        arm.step()
    except torch.OutOfMemoryError as exc:
        out_of_memory(arm, exc, say)
        return False
    return True


def peak_step_bytes(arms: list[StepArm], say: Callable[[str], None] = print) -> dict[str, int]:
    """Peak tensor bytes of one training step of each arm (module docstring, "Peak memory").

    On CPU all arms run in one profiler session; each step is marked with
    ``record_function`` and its allocator events are summed within its own window. An arm
    that runs out of memory is left out (no entry; ``say`` gets its line).
    """
    device = arms[0].device
    out: dict[str, int] = {}
    if device.type == "cuda":
        for arm in arms:
            arm.free_grads()
            sync(device)
            start = torch.cuda.memory_allocated(device)
            torch.cuda.reset_peak_memory_stats(device)
            if not _guarded_step(arm, say):
                continue
            sync(device)
            out[arm.name] = arm.persistent_bytes() + torch.cuda.max_memory_allocated(device) - start
        return out
    from torch.profiler import ProfilerActivity, profile, record_function  # lazy: only while profiling

    for arm in arms:  # the last step's gradients: freed before profiling, so every free is seen
        arm.free_grads()
    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    with quiet_stderr():
        prof.start()
    try:
        for i, arm in enumerate(arms):
            with record_function(f"harness-bench-step/{i}"):
                _guarded_step(arm, say)
    finally:
        with quiet_stderr():
            prof.stop()
    events = list(prof.profiler.kineto_results.events())
    windows = {
        e.name(): (e.start_ns(), e.end_ns()) for e in events if e.name().startswith("harness-bench-step/")
    }
    memory = sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]")
    for i, arm in enumerate(arms):
        if arm.failed:
            continue
        lo, hi = windows[f"harness-bench-step/{i}"]
        running = transient = 0
        for t, nbytes in memory:  # +bytes for an allocation, -bytes for a free, in time order
            if lo <= t <= hi:
                running += nbytes
                transient = max(transient, running)
        out[arm.name] = arm.persistent_bytes() + transient
    return out
