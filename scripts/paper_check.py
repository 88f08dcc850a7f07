"""Helpers of ``scripts/gpu_check.sh --paper`` (standard library only: the GPU machine lacks
duckdb, polars, optuna and submitit).

    python scripts/paper_check.py corpus DIR WORDS       # a synthetic text corpus of WORDS words
    python scripts/paper_check.py summary RESULTS SUMMARY [--bench JSON] [--ddp RESULTS_DDP] [--min-steps N]

``corpus``: no machine here reaches the internet and the FineWeb-Edu sample (~0.4M tokens) is
smaller than one 524,288-token batch, so the check trains on generated text: words of 1-4
syllables from 600 consonant-vowel(-consonant) syllables with a Zipf frequency, so that a
byte-level BPE finds merges up to a 50,304-token vocabulary (DESIGN section 11: the compute is
that of the gpt2 vocabulary; the numbers are not language-model results).

``summary`` appends one ``PASS``/``FAIL``/``GOAL met``/``GOAL not met`` line per check to
SUMMARY, from the runs' result files (``RESULTS/runs/*.json``) and the bench JSON: each run
done with at least ``--min-steps`` optimiser steps, its micro-batch and world size recorded,
its MFU (6 N + 12 L D T FLOPs/token, the median logged tokens/s after the first log interval,
the device's bf16 peak); the bench's MFU and peak memory per variant and the issue's goals
(120m block_attnres MFU >= 45 %, rd_attnres/block_attnres step time <= 1.02); with ``--ddp``,
the DDP run's last logged training loss against the 1-GPU run's (relative 2e-2: bf16, another
reduction order). Exit status 1 when a PASS/FAIL line failed (goals are reported, not enforced).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import statistics
import sys
from pathlib import Path

SIZES = {
    "tiny": (2, 64, 64),
    "small": (6, 256, 256),
    "120m": (12, 768, 1024),
    "343m": (24, 1024, 1024),
}  # L, D, T


def _load_peaks():
    """harness/bench/peaks.py, by path: the exact-name peak table (no package import, no torch)."""
    path = Path(__file__).resolve().parents[1] / "harness" / "bench" / "peaks.py"
    spec = importlib.util.spec_from_file_location("harness_bench_peaks", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PEAKS = _load_peaks()
DDP_REL = 2e-2


def make_corpus(folder: Path, words: int, seed: int = 0) -> None:
    """``words`` generated words in ``.txt`` documents of 200 words under ``folder``."""
    rng = random.Random(seed)
    cons, vowels = "bcdfghjklmnprstvwz", "aeiou"
    syllables = sorted(
        {c + v + rng.choice(["", "", "n", "r", "s"]) for c in cons for v in vowels} | set(vowels)
    )
    syllables = (syllables * 8)[:600]
    weights = [1.0 / (k + 1) for k in range(len(syllables))]
    folder.mkdir(parents=True, exist_ok=True)
    per_doc, n = 200, 0
    for start in range(0, words, per_doc):
        text = []
        for _ in range(min(per_doc, words - start)):
            word = "".join(rng.choices(syllables, weights, k=rng.choice((1, 2, 2, 3, 3, 4))))
            text.append(word + ("." if rng.random() < 0.08 else ""))
        (folder / f"doc{n:06d}.txt").write_text(" ".join(text) + "\n")
        n += 1


def _runs(results: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((results / "runs").glob("*.json"))]


def _mfu(run: dict, metrics: list[dict], peak: float | None) -> tuple[float | None, float | None]:
    L, D, T = SIZES[run["size"]]
    tps = [m["value"] for m in metrics if m["split"] == "train" and m["name"] == "tokens_per_s"][1:]
    rate = statistics.median(tps) if tps else run.get("tokens_per_s")
    if not rate or not peak:
        return rate, None
    return rate, (6 * run["n_params"] + 12 * L * D * T) * rate / peak


class _Checks:
    """The summary's lines: ``PASS``/``FAIL`` checks (any FAIL fails the script), ``INFO`` and ``GOAL`` lines."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.failed = False

    def check(self, ok: bool, text: str) -> None:
        self.failed |= not ok
        self.lines.append(f"{'PASS' if ok else 'FAIL'} {text}")


def _single(results: Path, out: _Checks, min_steps: int, device: str) -> dict:
    """Check each 1-GPU run (done, enough steps, micro-batch and world size recorded); name -> result."""
    peak, why = PEAKS.peak_flops(device) if device else (None, "no device name given")
    single = {}
    for result in _runs(results):
        run = result["run"]
        name = f"{run['size']} {run['variant']}"
        single[name] = result
        steps, micro, world = run.get("steps") or 0, run.get("micro_batch_size"), run.get("world_size")
        out.check(
            run["status"] == "done" and steps >= min_steps and micro is not None and world is not None,
            f"run {name}: {run['status']}, {steps} steps of "
            f"{run['config']['protocol']['train']['batch_tokens']:,} tokens, micro-batch {micro}, world size {world}",
        )
        rate, mfu = _mfu(run, result["metrics"], peak)
        if rate:
            out.lines.append(
                f"INFO run {name}: {rate:,.0f} tokens/s"
                + (f", MFU {100 * mfu:.1f} %" if mfu else f" (MFU: {why})")
            )
    if not single:
        out.check(False, f"no result files in {results / 'runs'}")
    return single


def _bench(bench: Path, out: _Checks) -> None:
    """The bench's tokens/s, MFU and memory per variant, and its two goals."""
    if not bench.exists():
        out.check(False, f"bench: {bench} missing")
        return
    b = json.loads(bench.read_text())
    for v in b["step_ms"]:
        mfu = f", MFU {100 * b['mfu'][v]:.1f} %" if b.get("mfu") else ""
        out.lines.append(
            f"INFO bench {b['size']} {v}: {b['tokens_per_s'][v]:,.0f} tokens/s{mfu}, "
            f"peak memory {b['peak_mem_mb'][v] / 1024:.1f} GiB, batch {b['batch_size']} sequences"
        )
    if b.get("micro_batch_note"):
        out.lines.append(f"INFO bench: {b['micro_batch_note']}")
    if b.get("mfu") and "block_attnres" in b["mfu"]:
        v = b["mfu"]["block_attnres"]
        out.lines.append(
            f"GOAL {'met' if v >= 0.45 else 'not met'}: {b['size']} block_attnres MFU {100 * v:.1f} % >= 45 %"
        )
    r = b["ratios"].get("rd_attnres/block_attnres")
    if r is not None:
        out.lines.append(
            f"GOAL {'met' if r <= 1.02 else 'not met'}: rd_attnres/block_attnres step time {r:.3f} <= 1.02"
        )


def _ddp(ddp: Path, single: dict, out: _Checks) -> None:
    """Each several-rank run's last shared training loss against its 1-GPU run's (relative <= DDP_REL)."""

    def train_losses(result) -> dict:
        return {
            m["step"]: m["value"]
            for m in (result or {}).get("metrics", [])
            if m["split"] == "train" and m["name"] == "loss"
        }

    for result in _runs(ddp):
        run = result["run"]
        name = f"{run['size']} {run['variant']}"
        losses, ref_losses = train_losses(result), train_losses(single.get(name))
        common = sorted(set(losses) & set(ref_losses))
        if not common:
            out.check(False, f"ddp {name}: no training loss step shared with a 1-GPU run")
            continue
        k = common[-1]
        rel = abs(losses[k] - ref_losses[k]) / abs(ref_losses[k])
        out.check(
            run["status"] == "done" and rel <= DDP_REL,
            f"ddp {name} on {run.get('world_size')} ranks: step-{k} loss {losses[k]:.4f} vs 1 GPU "
            f"{ref_losses[k]:.4f} (relative {rel:.2e} <= {DDP_REL})",
        )


def summarise(
    results: Path, out: Path, bench: Path | None, ddp: Path | None, min_steps: int, device: str
) -> int:
    """Append the check's lines to ``out`` (and stderr); exit status 1 if any check failed."""
    checks = _Checks()
    single = _single(results, checks, min_steps, device)
    if bench is not None:
        _bench(bench, checks)
    if ddp is not None:
        _ddp(ddp, single, checks)
    with out.open("a") as f:
        f.write("".join(line + "\n" for line in checks.lines))
    print("\n".join(checks.lines), file=sys.stderr)
    return 1 if checks.failed else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("corpus")
    c.add_argument("folder", type=Path)
    c.add_argument("words", type=int)
    s = sub.add_parser("summary")
    s.add_argument("results", type=Path)
    s.add_argument("summary", type=Path)
    s.add_argument("--bench", type=Path)
    s.add_argument("--ddp", type=Path)
    s.add_argument("--min-steps", type=int, default=20)
    s.add_argument("--device", default="", help="the GPU's name (nvidia-smi), for its bf16 peak")
    args = p.parse_args(argv)
    if args.command == "corpus":
        if args.words <= 0:
            p.error(f"WORDS={args.words} must be positive")
        make_corpus(args.folder, args.words)
        return 0
    return summarise(args.results, args.summary, args.bench, args.ddp, args.min_steps, args.device)


if __name__ == "__main__":
    sys.exit(main())
