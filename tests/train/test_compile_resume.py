"""Resume under ``torch.compile`` (issue 37 part 1, DESIGN section 11: compile never changes what is saved).

A checkpoint holds the weights once, under the names an uncompiled module has: a compiled run's
checkpoint loads strictly into an uncompiled module and back. On the CPU with compile forced on
(inductor's C++ backend; gcc), a tiny run stopped by a real SIGTERM after its first checkpoint
and resumed ends with the uninterrupted compiled run's val NLL, bit for bit.
``python -m pytest -q tests/train/test_compile_resume.py``.
"""

from __future__ import annotations

import functools
import os
import signal
from pathlib import Path

import duckdb
import pytest
import torch

from harness.design.config import RunConfig, train_config
from harness.models import build_model
from harness.train import RunInterrupted, train_run
from harness.train import compiled as compiled_forward
from harness.train.execution import ExecutionSettings
from harness.train.lit import LitLM

SAMPLE = Path(__file__).resolve().parents[3] / "shared/data/fineweb_edu_sample"
# 4 steps of 1,024 tokens, a checkpoint after every step, compile forced on (auto is CUDA only)
TRAIN = {
    "vocab_size": 512,
    "batch_tokens": 1024,
    "eval_tokens": 2048,
    "lr": 3e-3,
    "compile": True,
    "checkpoint_every_tokens": 1024,
}
BUDGET = 4 * 1024


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One thread (the corpus cache is the session's: tests/conftest.py)."""
    if not SAMPLE.is_dir():
        pytest.fail(f"sample corpus {SAMPLE} absent")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the same reduction order in every run of this module
    yield
    torch.set_num_threads(threads)


def lit_of(compile_: bool) -> LitLM:
    model = build_model("rd_attnres", "tiny", seed=0, vocab_size=512)
    return LitLM(
        model,
        train_config("tiny"),
        total_steps=1,
        batch_tokens=128,
        token_bytes=torch.ones(512, dtype=torch.long),
        compile=compile_,
    )


def orig_mod_keys(tree, path: str = "") -> list[str]:
    """Every key (at any depth of nested dicts and lists) that holds ``_orig_mod``, with its path."""
    found = []
    if isinstance(tree, dict):
        for k, v in tree.items():
            here = f"{path}/{k}"
            if "_orig_mod" in str(k):
                found.append(here)
            found += orig_mod_keys(v, here)
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            found += orig_mod_keys(v, f"{path}[{i}]")
    return found


def test_orig_mod_keys_finds_a_compiled_submodule_anywhere():
    """The detector itself: a compiled wrapper registered as a submodule (what lit.py did before)
    puts ``_compiled._orig_mod.*`` keys in the state dict; nested keys are found too."""
    lit = lit_of(True)
    torch.nn.Module.__setattr__(lit, "_compiled", torch.compile(lit.model))  # lazy: nothing compiles
    keys = orig_mod_keys({"state_dict": lit.state_dict()})
    assert len(keys) == len(lit.model.state_dict()) and keys[0].startswith("/state_dict/_compiled._orig_mod.")
    assert orig_mod_keys({"a": [{"b": {"x._orig_mod.w": 1}}]}) == ["/a[0]/b/x._orig_mod.w"]


def test_a_compiled_module_saves_the_uncompiled_names_and_loads_an_old_double_checkpoint(monkeypatch):
    """After its compiled forward ran (dynamo traced with the eager backend: a real
    ``OptimizedModule``, no inductor), the module's state dict has exactly the uncompiled keys; a
    state dict from before the fix (the weights twice, ``_compiled._orig_mod.*``) loads strictly."""
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="eager"))
    monkeypatch.setattr(
        compiled_forward, "INNER_BACKEND", "eager"
    )  # the run's counting backend hands on to eager
    compiled, plain = lit_of(True), lit_of(False)
    x = torch.randint(0, 512, (2, 16))
    assert torch.equal(compiled._forward(x), plain._forward(x))  # same seed, same weights
    assert compiled._compiled is not None and plain._compiled is None
    assert list(compiled.state_dict()) == list(plain.state_dict()) and not orig_mod_keys(
        compiled.state_dict()
    )
    old = lit_of(True)
    torch.nn.Module.__setattr__(old, "_compiled", torch.compile(old.model))
    checkpoint = {"state_dict": old.state_dict()}
    assert len(checkpoint["state_dict"]) == 2 * len(plain.state_dict())
    plain.on_load_checkpoint(checkpoint)
    plain.load_state_dict(checkpoint["state_dict"], strict=True)
    assert not orig_mod_keys(checkpoint)


def final_nll(results: Path) -> list[tuple]:
    con = duckdb.connect(str(results / "harness.duckdb"), read_only=True)
    try:
        return con.execute("select run_id, val_nll, val_bpb from final").fetchall()
    finally:
        con.close()


@pytest.mark.slow  # 110 s on 2 cores: four inductor compiles of the tiny model (warm FX cache)
def test_a_compiled_run_stopped_by_sigterm_resumes_to_the_uninterrupted_numbers(tmp_path):
    config = RunConfig.adhoc("rd_attnres", "tiny", 0, BUDGET, str(SAMPLE), train=TRAIN)
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    assert train_run(config, whole, ExecutionSettings(progress=False, accelerator="cpu")) == "done"
    sent, checkpoints = [], []

    def sigterm_after_first_checkpoint():  # asked after every step, before the last
        found = sorted(parts.glob("checkpoints/*/*/last.ckpt"))
        if found and not sent:
            checkpoints.append(torch.load(found[0], map_location="cpu", weights_only=False))
            sent.append(checkpoints[0]["global_step"])
            os.kill(os.getpid(), signal.SIGTERM)  # Lightning's handler: stop at the batch boundary
        return None

    with pytest.raises(RunInterrupted, match=r"terminated \(SIGTERM\) after step 2; checkpoint saved"):
        train_run(
            config,
            parts,
            ExecutionSettings(ExecutionSettings(progress=False, accelerator="cpu")),
            stop_requested=sigterm_after_first_checkpoint,
        )
    assert sent == [1]  # the periodic checkpoint of step 1 was on disk; the stop's is step 2's
    (ckpt,) = parts.glob("checkpoints/*/*/last.ckpt")
    stopped = torch.load(ckpt, map_location="cpu", weights_only=False)
    assert stopped["global_step"] == 2
    back = lit_of(True)
    back._forward(torch.zeros(16, 64, dtype=torch.long))  # compiled (inductor) as in the run
    assert back._compiled is not None
    for saved in (checkpoints[0], stopped):  # written by a compiled run: one copy, uncompiled names
        assert not orig_mod_keys(saved), orig_mod_keys(saved)[:3]
        plain = lit_of(False)
        assert list(saved["state_dict"]) == list(plain.state_dict())
        plain.load_state_dict(saved["state_dict"], strict=True)  # into an uncompiled module ...
        back.load_state_dict(plain.state_dict(), strict=True)  # ... and back into a compiled one
        assert all(
            torch.equal(a, b) for a, b in zip(back.state_dict().values(), saved["state_dict"].values())
        )

    assert train_run(config, parts, ExecutionSettings(progress=False, accelerator="cpu")) == "done"
    assert final_nll(parts) == final_nll(whole)  # bit-identical on one machine
