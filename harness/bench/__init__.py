"""Benchmark: routing overhead and harness overhead, measured interleaved (``harness bench``, DESIGN 7).

Two measurements, each interleaved in one process (A B A B ...) so that machine drift
(other jobs on a shared machine, clock changes) falls on every arm alike:

1. **Training-step time per variant.** One step (:func:`train_step`) = forward,
   cross-entropy, backward, gradient clipping, AdamW step with the parameter groups of
   :class:`harness.train.lit.LitLM`, in the order of Lightning's automatic optimisation, on one
   fixed batch. After ``warmup`` steps per variant (the first one compiles under
   ``--compile``), each of ``steps`` rounds runs one step of every variant, in an order
   rotated by one each round (round ``r`` starts with variant ``r mod n``). Reported:
   the median over rounds, in milliseconds, and ``batch_tokens / step_s`` in tokens/s.
2. **Harness overhead.** The Lightning training loop (a ``Trainer`` configured like
   :func:`harness.train.trainer.make_trainer`, :class:`~harness.train.lit.LitLM`,
   :class:`~harness.data.datamodule.TokenDataModule`) against a bare PyTorch loop over the same
   batches: same initial weights, same :func:`train_step` (AdamW groups, LR schedule,
   clipping), same ``DataLoader`` of :class:`~harness.data.datamodule.TrainBatches`.
   ``loop_rounds`` rounds alternate which loop goes first; each round runs ``warmup``
   steps, then times each of ``loop_steps`` iterations from the end of one step to the end
   of the next (data loading and every hook included). Reported: ``B * T`` tokens over
   the median iteration time, in tokens/s.

**Peak memory** of a variant's training step, in MiB (2^20 bytes): the bytes its
persistent state holds (parameters, buffers, optimiser state) plus the largest number of
bytes allocated above the step's start at any moment during one step, which starts with
the gradients freed (so they count once, in the step). On CUDA the latter is ``torch.cuda.max_memory_allocated()`` minus
``torch.cuda.memory_allocated()`` at the step's start; on CPU it is the running sum, in
time order, of the allocator events that ``torch.profiler`` records with
``profile_memory=True``. Both count tensor memory only (not the allocator's cache, code
or the Python heap), so variants compare on the same footing.

**Ratios** (DESIGN section 7): ``block_attnres/prenorm``, ``rd_attnres/block_attnres`` and
``<control>/block_attnres`` are ratios of median step times (lower is better);
``lightning/bare`` is the ratio of median tokens/s (higher is better). Peak-memory
ratios against the parent are reported separately (``peak_mem_ratios``).

**MFU** (model FLOPs utilisation) = ``flops_per_token * tokens_per_s / peak_flops`` with
``flops_per_token = 6 N + 12 L D T`` (:mod:`~harness.bench.flops`): ``6 N`` for the parameters'
multiply-adds, forward and backward (Kaplan et al. 2020, arXiv 2001.08361, section 2.1), plus
``12 L D T`` for attention's score and value matmuls over the whole ``T x T`` matrix (PaLM,
Chowdhery et al. 2022, arXiv 2204.02311, appendix B; nanoGPT's ``estimate_mfu``); depth routing's
own arithmetic is left out. ``peak_flops`` is the device's dense bf16 peak, matched by its exact
name in :data:`~harness.bench.peaks.PEAK_FLOPS` (a MIG slice scaled by its SMs) or given as
``peak_tflops``; without one, MFU is omitted with the reason (``mfu_note``), never guessed.

On CUDA, steps run under bf16 autocast (the Lightning loop under ``bf16-mixed``), float32
matmuls (the ``32-true`` arm of ``--precision-ratio``) use TF32 as a run's do (the one switch
:func:`harness.train.trainer.enable_tf32`), and timings synchronise the device before reading
the clock. Every arm first runs one step; the other-precision arm that runs out of memory at the
others' micro-batch retries at smaller ones (same tokens per step), and an arm that still runs
out of memory, then or later, is left out with one line: its figures are missing
(``missing_arms`` says why; a ratio it belongs to is ``None``), the other arms' are reported.

Modules:

* :mod:`~harness.bench.settings` -- settings, the goals (``TARGETS``), the device helpers;
* :mod:`~harness.bench.steps` -- one variant's step, interleaved timing, peak memory;
* :mod:`~harness.bench.loop` -- Lightning against a bare loop;
* :mod:`~harness.bench.ratios` -- which arms are compared, each ratio's paired summary and goal;
* :mod:`~harness.bench.intervals` -- paired ratios and their 95 % intervals, goals judged against them;
* :mod:`~harness.bench.flops` -- model FLOPs per trained token; :mod:`~harness.bench.peaks` -- a GPU's
  dense bf16 peak by its exact name (both for MFU);
* :mod:`~harness.bench.routing_cost` -- routing's bytes moved and FLOPs per token, a roofline estimate;
* :mod:`~harness.bench.profile` -- ``--profile``: where each ratio's time goes, by category;
* :mod:`~harness.bench.result` -- medians, ratios and MFU assembled into the JSON;
* :mod:`~harness.bench.rows` -- the DuckDB rows; :mod:`~harness.bench.table` -- the printed table;
* :mod:`~harness.bench.measure` -- :func:`~harness.bench.measure.run_bench`: the whole benchmark.
"""

from harness.bench.loop import loop_throughput
from harness.bench.measure import run_bench, synthetic_corpus
from harness.bench.peaks import PEAK_FLOPS, peak_flops
from harness.bench.result import assemble, write_json
from harness.bench.rows import bench_rows
from harness.bench.settings import TARGETS, BenchConfig, default_variants, device_peak_flops
from harness.bench.steps import StepArm, peak_step_bytes, time_steps, train_step
from harness.bench.table import format_report

__all__ = [
    "BenchConfig",
    "run_bench",
    "default_variants",
    "bench_rows",
    "write_json",
    "format_report",
    "assemble",
    "time_steps",
    "peak_step_bytes",
    "loop_throughput",
    "StepArm",
    "train_step",
    "synthetic_corpus",
    "device_peak_flops",
    "PEAK_FLOPS",
    "peak_flops",
    "TARGETS",
]
