"""The float64 numerics golden: a few training steps of tiny models on both routing paths (DESIGN section 13).

What tests/train/test_numerics_golden.py compares with ``tests/fixtures/numerics_golden.json``: for
``rd_attnres`` and ``block_attnres`` on each routing path, :data:`STEPS` optimiser steps of the real
:class:`~harness.train.lit.LitLM` (loss, gradient clipping, AdamW, the LR schedule) under Lightning's
``64-true`` precision on fixed token batches, then a digest of the parameters (:data:`PER_TENSOR` evenly
spaced entries of every tensor) beside the per-step losses. Each run carries the numerics identifier it
belongs to. A run may move only with a new numerics revision of its path (:func:`problems`).

The kernels are pinned (:data:`PINNED`), so another x86-64 CPU with AVX2 runs the same code paths. Measured
on the digest (docs/design.md, "Numerics lineage"): a routing-path switch moves it by 5.3e-14 to 6.5e-14; the
same code with MKL's kernel branch left free by 8.9e-16, with nothing pinned (AVX-512 kernels) by 1.2e-14 to
4.0e-14. So :data:`TOLERANCE` is 1e-14, and 0 (bit for bit) on the CPU model that recorded the golden.

Run in a process of its own, because the pinning must be in the environment before torch loads:

    .venv/bin/python tests/train/numerics_golden.py --write        # record the golden (after a bump)
    .venv/bin/python tests/train/numerics_golden.py --json OUT     # compute into OUT (what the test does)

``--write`` refuses to record a run that moved while its numerics revision stayed (bump it first).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "numerics_golden.json"
#: Kernel choices pinned so an x86-64 CPU computes the same bits as another: ATen's AVX2 kernels (not AVX-512,
#: which another CPU may lack: a wider vector sums in another order), MKL's conditional-numerical-
#: reproducibility AVX2 branch (the same BLAS code path on every AVX2 CPU), one thread (a thread count
#: splits reductions differently under MKL's CNR).
PINNED = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
VARIANTS = ("rd_attnres", "block_attnres")
STEPS = 8
VOCAB, BATCH, CONTEXT = 512, 4, 64
PER_TENSOR = 16  # digest entries per parameter tensor
LR = 1e-2
DATA_SEED = 20261206
#: The largest digest deviation (absolute; the parameters are of magnitude ~1 or below) that is not a code change,
#: off the CPU model that recorded the golden (there: 0). Between the pinned kernels' residual (<= 8.9e-16, MKL's
#: branch) and a routing-path switch (>= 5.3e-14): the module docstring, docs/design.md.
TOLERANCE = 1e-14
WRITE = ".venv/bin/python tests/train/numerics_golden.py --write"


def cpu_model() -> str | None:
    """The first CPU's model name with a digest of its flags, from ``/proc/cpuinfo`` (``None`` off Linux): the
    golden's recording key (a model name alone, ``AMD EPYC`` in a VM, spans CPU generations; the flags do not)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return None
    model = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), "unknown")
    flags = next((ln.split(":", 1)[1].split() for ln in lines if ln.startswith("flags")), [])
    return f"{model}, flags sha256 {hashlib.sha256(' '.join(sorted(flags)).encode()).hexdigest()[:12]}"


def pinned_env() -> dict[str, str]:
    """This process's environment with :data:`PINNED` set (what the golden's process runs under)."""
    return {**os.environ, **PINNED}


def batches():
    """``(train, held)``: :data:`STEPS` batches of ``(x, y)`` token ids ``[BATCH, CONTEXT]`` and one held-out
    batch, from numpy's PCG64 (the same integers on every machine)."""
    import numpy as np  # lazy: this module is imported by the test without torch
    import torch

    rng = np.random.default_rng(DATA_SEED)
    ids = rng.integers(0, VOCAB, size=(STEPS + 1, BATCH, CONTEXT + 1))
    data = [(torch.from_numpy(s[:, :-1]).long(), torch.from_numpy(s[:, 1:]).long()) for s in ids]
    return data[:STEPS], data[STEPS]


def train(variant: str, routing: str) -> dict:
    """One float64 run of ``variant`` on ``routing``: ``{"numerics", "losses", "held_nll", "digest"}``."""
    import lightning as L  # lazy: as above
    import numpy as np
    import torch

    from harness.design.config import TrainConfig
    from harness.models import build_model
    from harness.models.numerics import numerics_id
    from harness.train.lit import LitLM
    from harness.train.trainer import quiet_lightning

    quiet_lightning()
    model = build_model(variant, "tiny", seed=0, routing=routing, vocab_size=VOCAB)
    cfg = TrainConfig(lr=LR, batch_tokens=BATCH * CONTEXT)
    lit = LitLM(
        model,
        cfg,
        total_steps=STEPS,
        batch_tokens=BATCH * CONTEXT,
        token_bytes=torch.ones(VOCAB),
        compile=False,
    )
    losses: list[float] = []

    class Losses(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            losses.append(float(pl_module._last_loss))

    data, held = batches()
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        precision="64-true",
        max_steps=STEPS,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[Losses()],
        limit_val_batches=0,
    )
    trainer.fit(lit, train_dataloaders=torch.utils.data.DataLoader(data, batch_size=None))
    with torch.no_grad():
        held_nll = torch.nn.functional.cross_entropy(
            lit.model(held[0]).reshape(-1, VOCAB), held[1].reshape(-1)
        )
    digest = []
    for p in lit.model.parameters():
        flat = p.detach().reshape(-1).numpy()
        digest += flat[np.linspace(0, flat.size - 1, min(PER_TENSOR, flat.size)).astype(int)].tolist()
    return {"numerics": numerics_id(routing), "losses": losses, "held_nll": float(held_nll), "digest": digest}


def compute() -> dict:
    """Every run of the golden with what decides its bits: ``{"torch", "capability", "cpu_model", "runs":
    {VARIANT/ROUTING: run}}`` (``capability``: the kernels torch dispatched to, ``AVX2`` when pinned)."""
    import torch

    from harness.models.numerics import ROUTING_PATHS

    torch.set_num_threads(1)
    runs = {f"{v}/{r}": train(v, r) for v in VARIANTS for r in ROUTING_PATHS}
    return {
        "torch": torch.__version__,
        "capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_model": cpu_model(),
        "runs": runs,
    }


def deviation(a: dict, b: dict) -> float:
    """The largest absolute difference between two runs' digests (parameters, each of magnitude ~1 or below)."""
    return max(abs(x - y) for x, y in zip(a["digest"], b["digest"], strict=True))


def tolerance(golden: dict, now: dict) -> float:
    """0 where ``now`` was computed on the golden's CPU model and flags with its torch (bit for bit), else
    :data:`TOLERANCE`."""
    same = golden.get("cpu_model") == now.get("cpu_model") and golden.get("torch") == now.get("torch")
    return 0.0 if same else TOLERANCE


def problems(golden: dict, now: dict, tol: float) -> list[str]:
    """Why ``now`` (:func:`compute`) may not stand beside ``golden``, one line per run: a run that moved by more
    than ``tol`` while its numerics identifier stayed (bump the path's revision), or a run whose identifier
    changed (regenerate the golden). Empty: consistent."""
    out = []
    for key, run in now["runs"].items():
        old, routing = golden["runs"].get(key), key.split("/")[1]
        if old is None:
            out.append(f"{key}: not in the golden; regenerate it: {WRITE}")
        elif old["numerics"] != run["numerics"]:
            out.append(
                f"{key}: this code's numerics are {run['numerics']}, the golden's {old['numerics']}: "
                f"regenerate the golden: {WRITE}"
            )
        elif (moved := deviation(old, run)) > tol:
            out.append(
                f"{key}: the float64 golden moved by {moved:.2g} (tolerance {tol:g}) while its numerics revision "
                f"stayed {run['numerics']}: a change re-rounds training on the {routing} path. Bump "
                f"NUMERICS_REVISIONS[{routing!r}] in harness/models/numerics.py (the old identifier's line into "
                f"LINEAGE), then regenerate the golden: {WRITE}"
            )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--write", action="store_true", help=f"record the golden in {GOLDEN}")
    where.add_argument("--json", type=Path, help="write what this code computes to this file")
    args = parser.parse_args(argv)
    if any(os.environ.get(k) != v for k, v in PINNED.items()):  # pin, then run again before torch loads
        os.execve(sys.executable, [sys.executable, __file__, *sys.argv[1:]], pinned_env())
    data = compute()
    if args.write and GOLDEN.exists():  # a run may move only with a new revision
        golden = json.loads(GOLDEN.read_text())
        refused = problems(golden, data, tolerance(golden, data))
        refused = [p for p in refused if "Bump NUMERICS_REVISIONS" in p]
        if refused:
            print("\n".join(["not written:", *refused]), file=sys.stderr)
            return 1
    out = GOLDEN if args.write else args.json
    out.write_text(json.dumps({**data, "pinned": PINNED}, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout's harness, run as a script
    raise SystemExit(main())
