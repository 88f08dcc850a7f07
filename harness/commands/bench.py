"""Benchmark routing overhead (step time, peak memory per variant), bf16/fp32, Lightning overhead.

Times one training step (forward + backward + clipping + AdamW) of prenorm, block_attnres,
rd_attnres and every control, and of block_attnres in the other precision (bf16-mixed on a
CPU), interleaved in one process (one step of each per round, rotated order), measures each
step's peak tensor memory, and compares the tokens/s of the Lightning training loop with a
bare PyTorch loop on the same model and batches (alternating rounds). Every ratio
(block_attnres/prenorm, rd_attnres/block_attnres, <control>/block_attnres, bf16/fp32,
lightning/bare) is the median of one paired ratio per round, with a distribution-free 95 %
interval; rounds continue past --steps (up to --max-steps) until every interval is narrower
than --interval-width, and each goal is judged against the interval (met / not met /
undecided). Writes the JSON of DESIGN section 7 (default RESULTS/bench/<bench_id>.json) and
appends one row per variant and per loop to the DuckDB table `bench` (default
RESULTS/harness.duckdb). The machine may be shared: no single number is trusted, only
medians of interleaved rounds; on a busy CPU, --threads 1 avoids the stalls that
OpenMP threads suffer when another process takes their core. On CUDA: bf16 autocast,
float32 matmuls in TF32 (as training), synchronised timings, torch.cuda.max_memory_allocated
for memory, and MFU = (6 N + 12 L D T) tokens/s / peak FLOP/s. An arm that runs out of memory
is one line and its figures are n/a (the float32 arm first retries at smaller micro-batches).

example:
  harness bench --size small                        # eager, CPU
  harness bench --size small --compile --json results/bench_small_compiled.json
  harness bench --size tiny --steps 6 --max-steps 0 --loop-rounds 1 --variant block_attnres --variant rd_attnres
  harness bench --size 120m --compile               # on a GPU (H100/H200/A100 peak known)
  harness bench --size 120m --compile --variant prenorm --variant block_attnres --variant rd_attnres
  harness bench --size small --threads 1 --loop-rounds 0   # step times only, one thread
  harness bench --size small --compile --threads 1 --profile 10   # and where each ratio's time goes
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from harness.commands.options import add_setting_argument
from harness.common.files import check_output_file

#: BenchConfig's fields by the option that sets them: its errors name the option a user typed
FLAGS = {
    "steps": "--steps",
    "max_steps": "--max-steps",
    "interval_width": "--interval-width",
    "warmup": "--warmup",
    "batch_size": "--batch-size",
    "loop_steps": "--loop-steps",
    "loop_rounds": "--loop-rounds",
    "threads": "--threads",
    "seed": "--seed",
    "peak_tflops": "--peak-tflops",
    "profile_rounds": "--profile",
}
#: --max-steps when not given: rounds go on to this many while an interval is too wide
DEFAULT_MAX_STEPS = 120


def add_arguments(p: argparse.ArgumentParser) -> None:
    _add_timing(p)
    _add_what(p)
    _add_outputs(p)


def _add_timing(p: argparse.ArgumentParser) -> None:
    """How the steps are timed: the size, eager or compiled, the rounds until the ratios are narrow enough."""
    p.add_argument(
        "--size", default="small", help="size preset: tiny, mini, small, 120m, 343m (default: small)"
    )
    p.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="torch.compile every model (default: eager)",
    )
    p.add_argument(
        "--steps",
        type=int,
        default=20,
        help="timed interleaved rounds at least, one step per variant each (default: 20)",
    )
    p.add_argument(
        "--max-steps",
        type=int,
        default=None,
        help="then more rounds, up to this many in all, until every ratio's 95%% interval is narrower "
        f"than --interval-width (0 = exactly --steps, else at least --steps; default: {DEFAULT_MAX_STEPS}, "
        "or exactly --steps when --steps is larger)",
    )
    p.add_argument(
        "--interval-width",
        type=float,
        default=0.01,
        help="relative width of a ratio's 95%% interval that is narrow enough (default: 0.01 = 1%%)",
    )
    p.add_argument(
        "--precision-ratio",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time the parent in the other precision (bf16-mixed on a CPU, float32 on CUDA) in "
        "the same rounds: precision_ratios bf16/fp32 (default: on)",
    )
    p.add_argument(
        "--per-site",
        action="store_true",
        help="also time every routed variant on the per-site routing path (each site reads all its "
        "sources) in the same rounds, as <variant>@per_site: routing_paths two_phase/per_site "
        "(default: off; two-phase is what runs train)",
    )
    p.add_argument(
        "--warmup",
        type=int,
        default=3,
        help="untimed steps per variant and per loop round, at least 1 (default: 3)",
    )


def _add_what(p: argparse.ArgumentParser) -> None:
    """What is timed: the variants, the batch, the two loops, the device."""
    p.add_argument(
        "--variant",
        action="append",
        metavar="V",
        help="variant to time (repeatable; default: prenorm, block_attnres, rd_attnres and every control)",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=0,
        help="sequences per step (default or 0: the preset's training batch, at most 32)",
    )
    p.add_argument(
        "--loop-variant",
        default="block_attnres",
        help="variant trained by the two loops (default: block_attnres)",
    )
    p.add_argument("--loop-steps", type=int, default=10, help="timed steps per loop round (default: 10)")
    p.add_argument(
        "--loop-rounds",
        type=int,
        default=3,
        help="rounds of (Lightning, bare) loops; 0 skips them (default: 3)",
    )
    p.add_argument(
        "--corpus", default=None, help="corpus for the loops' batches (default: synthetic uniform tokens)"
    )
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="device (default: auto)")
    add_setting_argument(p, "threads")
    p.add_argument("--seed", type=int, default=0, help="initialisation and data seed (default: 0)")


def _add_outputs(p: argparse.ArgumentParser) -> None:
    """What the result holds beyond the timings (MFU, a profile) and where it is written."""
    p.add_argument(
        "--peak-tflops",
        type=float,
        default=0.0,
        help="device peak TFLOP/s for MFU (default or 0: by the exact CUDA device name: H100/H200 SXM 989, "
        "H100 PCIe 756, H100/H200 NVL 835, A100 312; a MIG slice by its SMs; else no MFU)",
    )
    p.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="after timing, profile ROUNDS more interleaved rounds and split each ratio's difference "
        "by category: matmul, attention, routing, norm, ... (JSON key profile; with --compile on a "
        "CPU every model is compiled with the profiler's kernel marks; default: 0 = off)",
    )
    p.add_argument(
        "--json",
        type=Path,
        default=None,
        metavar="PATH",
        help="write the result JSON here (default: RESULTS/bench/<bench_id>.json)",
    )
    p.add_argument(
        "--db",
        type=Path,
        default=None,
        metavar="PATH",
        help="DuckDB file for the `bench` rows (default: RESULTS/harness.duckdb)",
    )


def main(args: argparse.Namespace) -> int:
    from harness.bench import bench_rows, format_report, run_bench, write_json

    if args.max_steps is None:  # the default cap, or exactly --steps when --steps is already past it
        args.max_steps = DEFAULT_MAX_STEPS if DEFAULT_MAX_STEPS > args.steps else 0
    try:
        cfg = _config(args)
    except ValueError as exc:  # BenchConfig names its fields: name the options instead
        raise ValueError(
            re.sub(r"\b(\w+)=", lambda m: f"{FLAGS[m[1]]} " if m[1] in FLAGS else m[0], str(exc))
        ) from None
    json_path = args.json or Path(args.results) / "bench" / "<bench_id>.json"  # named after the run
    db = Path(args.db) if args.db else Path(args.results) / "harness.duckdb"
    check_output_file(json_path, "--json")  # before the rounds: a bad path would lose a long run's result
    check_output_file(db, "--db")
    result = run_bench(cfg, progress=lambda msg: print(f"[bench] {msg}", file=sys.stderr, flush=True))
    print(format_report(result))
    path = write_json(result, args.json or json_path.with_name(f"{result['bench_id']}.json"))
    print(f"\nwrote {path}")
    try:  # the results store (DuckDB, polars) loads only now, to write: the bench itself runs without it
        from harness.store.connection import StoreLockedError
        from harness.store.store import Store
    except ImportError as exc:  # a bare GPU node: the JSON holds every number
        print(f"harness bench: rows not stored in {db} ({exc}); the result is in {path}", file=sys.stderr)
        return 0
    store = Store(db.parent)
    store.db_path = db  # --db may name any file; Store keeps the rest of the results folder
    rows = bench_rows(result)
    try:
        store.add_bench_rows(rows)
    except StoreLockedError as exc:
        print(f"harness bench: rows not stored ({exc}); the result is in {path}", file=sys.stderr)
        return 1
    except Exception:
        print(f"harness bench: storing rows in {db} failed; the result is in {path}", file=sys.stderr)
        raise
    print(f"stored {len(rows)} rows in {db} (table bench, bench_id {result['bench_id']})")
    return 0


def _config(args: argparse.Namespace):
    """The :class:`~harness.bench.BenchConfig` of the parsed options (ValueError for a bad one)."""
    from harness.bench import BenchConfig  # deferred, as in main: torch loads only when a command runs
    from harness.data import cache_dir

    return BenchConfig(
        size=args.size,
        variants=tuple(args.variant or ()),
        compile=args.compile,
        steps=args.steps,
        max_steps=args.max_steps,
        interval_width=args.interval_width,
        precision_ratio=args.precision_ratio,
        warmup=args.warmup,
        batch_size=args.batch_size,
        loop_variant=args.loop_variant,
        loop_steps=args.loop_steps,
        loop_rounds=args.loop_rounds,
        corpus=args.corpus,
        cache_dir=cache_dir(args.results) if args.corpus else None,
        device=args.device,
        threads=args.threads,
        seed=args.seed,
        peak_tflops=args.peak_tflops,
        profile_rounds=args.profile,
        per_site=args.per_site,
    )
