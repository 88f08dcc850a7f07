"""Micro-batched steps (DESIGN section 11, issue 24): an accumulated step is the one-pass step.

The gradients are captured where the real optimiser sees them (Lightning's
``on_before_optimizer_step``, after :meth:`LitLM.training_step` ran its micro-batches), with
the real trainer, in float64 (relative difference <= 1e-10) and float32 (<= 1e-5). A short
``harness run`` with micro-batches takes the same steps over the same data as one without, and
records its micro-batch and world size outside the protocol hash. A 120m model does one
micro-batched step on the CPU with its peak memory measured against a bound derived from
its parameter count and its measured saved activations.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader

from harness.design.config import RunConfig, TrainConfig, train_keys
from harness.design.train_table import execution_overrides, parse_value
from harness.models import build_model
from harness.models.sizes import padded_vocab
from harness.train.execution import ExecutionSettings
from harness.train.lit import LitLM
from harness.train.microbatch import divisors, micro_slices, resolve_micro_batch
from harness.train.trainer import make_trainer, quiet_lightning

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT.parent / "shared/data/fineweb_edu_sample"
TOKENIZER_VOCAB = 500  # not a multiple of 64: the model's vocabulary is padded to 512


class GradCapture(L.Callback):
    """The gradients the optimiser is about to apply, by parameter name."""

    def __init__(self) -> None:
        self.grads: dict[str, torch.Tensor | None] = {}

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self.grads = {
            n: None if p.grad is None else p.grad.detach().clone()
            for n, p in pl_module.model.named_parameters()
        }


def one_step(
    micro: int | str,
    precision: str,
    x: torch.Tensor,
    y: torch.Tensor,
    root: Path,
    *,
    variant: str = "rd_attnres",
    size: str = "tiny",
    **model,
) -> tuple[LitLM, GradCapture]:
    """Train one step of the batch ``(x, y)`` with the real trainer; return the module and its gradients."""
    quiet_lightning()
    net = build_model(variant, size, seed=0, vocab_size=padded_vocab(TOKENIZER_VOCAB), **model)
    cfg = TrainConfig(grad_clip=0.0)  # no clip: the raw gradients
    lit = LitLM(
        net,
        cfg,
        total_steps=1,
        batch_tokens=x.numel(),
        token_bytes=torch.ones(TOKENIZER_VOCAB),
        compile=False,
        micro_batch_size=micro,
    )
    capture = GradCapture()
    trainer = make_trainer(
        accelerator="cpu", precision=precision, max_steps=1, callbacks=[capture], root=root
    )
    trainer.fit(lit, train_dataloaders=DataLoader([(x, y)], batch_size=None))
    assert int(trainer.global_step) == 1  # one optimiser step per global batch, whatever the micro-batches
    return lit, capture


def relative_difference(a: dict, b: dict) -> float:
    """``||a - b|| / ||b||`` over all gradients (both None for a parameter without one)."""
    assert a.keys() == b.keys()
    num = den = 0.0
    for name in b:
        assert (a[name] is None) == (b[name] is None), name
        if b[name] is not None:
            num += float((a[name].double() - b[name].double()).square().sum())
            den += float(b[name].double().square().sum())
    return math.sqrt(num / den)


def batch(rows: int = 6, context: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, TOKENIZER_VOCAB, (rows, context + 1), generator=g)
    return tokens[:, :-1], tokens[:, 1:]


@pytest.mark.parametrize("precision, bound", [("64-true", 1e-10), ("32-true", 1e-5)])
def test_accumulated_gradients_equal_the_one_pass_gradients(tmp_path, precision, bound):
    x, y = batch()
    # block_size 4: an attention site routes over an in-progress partial block (DESIGN section 3)
    one, g_one = one_step(6, precision, x, y, tmp_path / "one", block_size=4)
    assert one.micro_batch_size == 6
    for micro in (1, 4):  # 4: micro-batches of 4 and 2 rows, weighted by their share
        acc, g_acc = one_step(micro, precision, x, y, tmp_path / f"m{micro}", block_size=4)
        assert acc.micro_batch_size == micro
        rel = relative_difference(g_acc.grads, g_one.grads)
        print(f"{precision} micro {micro}: relative gradient difference {rel:.3g}")
        assert rel <= bound
        # the step's loss is the token mean over the global batch
        assert abs(float(acc._last_loss) - float(one._last_loss)) <= bound * abs(float(one._last_loss))
    if precision == "64-true":
        assert next(iter(g_one.grads.values())).dtype == torch.float64
    # padding rows (ids 500..511) are never targeted: their logits are outside the loss
    emb = g_one.grads["tok_emb.weight"]
    assert emb.shape[0] == 512 and torch.count_nonzero(emb[TOKENIZER_VOCAB:]) == 0


def test_micro_slices_cover_the_rows_with_weights_adding_to_one():
    parts = micro_slices(10, 4)
    assert [(s.start, s.stop) for s, _ in parts] == [(0, 4), (4, 8), (8, 10)]
    assert [w for _, w in parts] == [0.4, 0.4, 0.2]
    assert micro_slices(8, 8) == [(slice(0, 8), 1.0)] and micro_slices(8, 99) == [(slice(0, 8), 1.0)]
    assert divisors(12) == [1, 2, 3, 4, 6, 12]
    with pytest.raises(ValueError, match="micro=0"):
        micro_slices(4, 0)


def test_auto_is_the_whole_rank_batch_on_a_cpu_and_a_number_is_capped_by_it():
    cpu = torch.device("cpu")

    def never():
        raise AssertionError("a CPU is not probed")

    assert resolve_micro_batch("auto", local_batch=16, device=cpu, probe=never) == (16, None)
    assert resolve_micro_batch(4, local_batch=16, device=cpu, probe=never) == (4, None)
    assert resolve_micro_batch(64, local_batch=16, device=cpu, probe=never) == (16, None)


def test_micro_batch_size_is_auto_or_a_positive_int():
    assert (
        ExecutionSettings().for_run(RunConfig.create("prenorm", "tiny", 0, 2048, "/c")).micro_batch_size
        == "auto"
    )
    assert parse_value("micro_batch_size", "auto", train_keys()) == "auto"
    assert parse_value("micro_batch_size", "16", train_keys()) == 16
    assert execution_overrides({"micro_batch_size": 16, "lr": 1.0}) == {"micro_batch_size": 16}
    for bad in (0, -2, 1.5, True, "many"):
        with pytest.raises(ValueError, match="micro_batch_size"):
            execution_overrides({"micro_batch_size": bad})
        with pytest.raises(
            ValueError, match="micro_batch_size"
        ):  # a grid's [train] value: refused at queue time
            RunConfig.create("prenorm", "tiny", 0, 2048, "/c", train={"micro_batch_size": bad})
    with pytest.raises(ValueError, match="micro_batch_size='x' is not an int or 'auto'"):
        parse_value("micro_batch_size", "x", train_keys())


def _cli_run(results: Path, *extra: str) -> dict:
    from harness.cli import main as cli
    from harness.store.store import Store

    rc = cli(
        [
            "run",
            "--variant",
            "rd_attnres",
            "--size",
            "tiny",
            "--seed",
            "0",
            "--budget-tokens",
            str(4 * 2048),
            "--corpus",
            str(SAMPLE),
            "--results",
            str(results),
            "--quiet",
            "--set=vocab_size=512",
            "--set=eval_tokens=2048",
            *extra,
        ]
    )
    assert rc == 0
    (path,) = Store(results).runs_dir.glob("*.json")
    return Store(results).read_result(path)


@pytest.mark.slow
def test_a_micro_batched_run_takes_the_same_steps_over_the_same_data(tmp_path, capsys):
    whole = _cli_run(tmp_path / "whole")
    micro = _cli_run(tmp_path / "micro", "--micro-batch-size", "8")
    a, b = whole["run"], micro["run"]
    # tiny: 2048-token global batches of 64-token sequences = 32 rows; micro-batches of 8
    assert (a["micro_batch_size"], b["micro_batch_size"], a["world_size"], b["world_size"]) == (32, 8, 1, 1)
    # an execution setting: same run id, same protocol, same step count and schedule
    for key in ("run_id", "protocol_hash", "steps", "tokens_seen", "config"):
        assert a[key] == b[key], key
    loss = {(r["step"], r["name"]): r["value"] for r in whole["metrics"] if r["split"] == "train"}
    loss_m = {(r["step"], r["name"]): r["value"] for r in micro["metrics"] if r["split"] == "train"}
    assert loss.keys() == loss_m.keys()
    for key, value in loss.items():
        if key[1] != "tokens_per_s":
            assert loss_m[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key
    val = [
        (r["value"], s["value"])
        for r, s in zip(whole["metrics"], micro["metrics"])
        if r["split"] == "val" and r["name"] == "nll"
    ]
    assert val and all(abs(u - v) <= 1e-4 * abs(u) for u, v in val)


def test_the_micro_batch_flag_refuses_a_bad_value_in_one_line(tmp_path, capsys):
    from harness.cli import main as cli

    rc = cli(
        [
            "run",
            "--variant",
            "rd_attnres",
            "--size",
            "tiny",
            "--seed",
            "0",
            "--budget-tokens",
            "4096",
            "--corpus",
            str(SAMPLE),
            "--results",
            str(tmp_path),
            "--micro-batch-size",
            "0",
        ]
    )
    err = capsys.readouterr().err
    assert rc != 0 and "micro_batch_size=0" in err and "Traceback" not in err


# One micro-batched step of a 120m model on the CPU, in a fresh process so that its peak
# resident memory (ru_maxrss) is this step's. The saved activations of one micro-batch are
# measured afterwards with saved_tensors_hooks (unique storages).
MEMORY_SCRIPT = r"""
import json, os, resource, sys
import lightning as L
import torch
from torch.utils.data import DataLoader
from harness.design.config import TrainConfig
from harness.models import build_model, count_params
from harness.train.execution import ExecutionSettings
from harness.train.lit import LitLM
from harness.train.trainer import make_trainer, quiet_lightning

rows, micro, T, V = 4, 1, 128, 50257
torch.manual_seed(0)
tokens = torch.randint(0, V, (rows, T + 1))
x, y = tokens[:, :-1], tokens[:, 1:]
quiet_lightning()

class PeakBeforeAdam(L.Callback):
    # the peak through the forward+backward of all micro-batches, before AdamW creates its moments
    peak = None
    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self.peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

def fit(net, rows, x, y, callbacks=()):
    # batch_tokens counts the preset's context: it sizes the rank's rows; the step's sequences
    # may be shorter (128 tokens here, to keep the CPU's work small)
    lit = LitLM(net, TrainConfig(), total_steps=1, batch_tokens=rows * net.cfg.context, token_bytes=torch.ones(V),
                compile=False, micro_batch_size=micro)
    trainer = make_trainer(accelerator="cpu", precision="32-true", max_steps=1, callbacks=list(callbacks),
                           root=sys.argv[1])
    trainer.fit(lit, train_dataloaders=DataLoader([(x, y)], batch_size=None))
    return lit, trainer

# a tiny model's step first: the code a fit imports lazily is resident before the measurement
fit(build_model("block_attnres", "tiny", seed=0, vocab_size=V + 47), 2, x[:2, :16] % 1024, y[:2, :16] % 1024)
net = build_model("block_attnres", "120m", seed=0)  # the preset's padded 50304
P = count_params(net)["total"]
P_max = max(p.numel() for p in net.parameters())
n_tensors = len(list(net.parameters()))

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

before = rss()
grads_done = PeakBeforeAdam()
lit, trainer = fit(net, rows, x, y, [grads_done])
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
after = rss()  # parameters' gradients and AdamW moments are still held: the rest is non-tensor residue

def saved_bytes(n):
    seen = {}
    def pack(t):
        s = t.untyped_storage()
        seen[s.data_ptr()] = s.nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = lit.loss(net(x[:n]), y[:n])
    del loss
    params = {p.untyped_storage().data_ptr() for p in net.parameters()}
    return sum(b for ptr, b in seen.items() if ptr not in params)

print(json.dumps({"P": P, "P_max": P_max, "n_tensors": n_tensors, "before": before, "peak": peak, "after": after, "peak_grads": grads_done.peak, "steps": int(trainer.global_step),
                  "micro": lit.micro_batch_size, "saved_micro": saved_bytes(micro), "saved_batch": saved_bytes(rows)}))
"""


@pytest.mark.slow  # 14 s on 2 cores: out of the developer's loop (`pytest -m "not slow"`)
def test_a_120m_model_does_a_micro_batched_step_on_the_cpu_within_its_memory_bound(tmp_path):
    # glibc's dynamic mmap threshold (up to 32 MiB) would keep freed tensors resident; a fixed
    # 128 KiB threshold maps every larger block on its own and unmaps it when freed, so the
    # resident size follows the live tensors
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}
    out = subprocess.run(
        [sys.executable, "-c", MEMORY_SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=1200,
        env=env,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    m = json.loads(out.stdout.strip().splitlines()[-1])
    assert m["steps"] == 1 and m["micro"] == 1
    gib = 2**30
    # Derived bound on the memory the step adds (float32, 4 bytes a number), the larger of its two phases:
    # * forward+backward of the micro-batches: the gradients (4 P), one micro-batch's saved
    #   activations and as much again for backward's transient gradients (each the shape of a
    #   tensor the forward saved), and the tied embedding's two gradient contributions (the LM head's
    #   and the lookup's, each a dense [V, D] before they are added into .grad): 4 P + 2 S_micro + 8 P_max;
    # * the AdamW step (the first: its two moments are created now): gradients and moments (12 P)
    #   plus the single-tensor step's two temporaries of the largest parameter (denom = sqrt(v) / c + eps);
    # both plus the non-tensor residue the fit leaves resident (Lightning's and autograd's small
    # objects, measured after the step as RSS - 12 P), and a page (4 KiB) of rounding for each
    # mapped block of the four per parameter tensor (gradient, two moments, a temporary).
    residue = max(0, m["after"] - m["before"] - 12 * m["P"]) + 4 * 4096 * m["n_tensors"]
    grads_phase = 4 * m["P"] + 2 * m["saved_micro"] + 8 * m["P_max"] + residue
    adam_phase = 12 * m["P"] + 2 * 4 * m["P_max"] + residue
    bound = max(grads_phase, adam_phase)
    added, added_grads = m["peak"] - m["before"], m["peak_grads"] - m["before"]
    print(
        f"120m micro-batched step ({m['micro']} of 4 sequences x 128 tokens): peak RSS added {added / gib:.3f} GiB "
        f"({added_grads / gib:.3f} GiB before the AdamW step), "
        f"bound {bound / gib:.3f} GiB = max(fwd+bwd {grads_phase / gib:.3f}, AdamW {adam_phase / gib:.3f}) "
        f"incl. residue {residue / gib:.3f} GiB; "
        f"saved activations: one micro-batch {m['saved_micro'] / gib:.3f} GiB, one pass {m['saved_batch'] / gib:.3f} GiB"
    )
    assert 0 < added_grads <= grads_phase and added <= bound
    # one pass would keep the whole batch's activations alongside the gradients: micro-batching bounds it
    assert grads_phase < 4 * m["P"] + m["saved_batch"] + 8 * m["P_max"] + residue
