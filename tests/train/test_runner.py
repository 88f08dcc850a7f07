"""Training on real text (issue: training): determinism, resume, bits-per-byte, divergence, bad input.

Runs real (tiny) training on the FineWeb-Edu sample in ../shared/data; each run takes a
few seconds on 2 CPU cores. ``python -m pytest -q tests/train/test_runner.py``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path

import duckdb
import pytest
import torch

from harness.cli import main as cli
from harness.common import live
from harness.corpus.key import CorpusKey
from harness.data import prepare_corpus
from harness.data.datamodule import TokenDataModule
from harness.design.config import RunConfig, train_config
from harness.models import available_variants, build_model
from harness.store.store import Store
from harness.train import RunInterrupted, train_run
from harness.train.execution import ExecutionSettings
from harness.train.lit import LitLM
from harness.train.schedule import lr_multiplier

SAMPLE = Path(__file__).resolve().parents[3] / "shared/data/fineweb_edu_sample"
# 6 steps of 1,024 tokens, a 2,048-token validation set, a 512-token BPE vocabulary
TRAIN = {"vocab_size": 512, "batch_tokens": 1024, "eval_tokens": 2048, "lr": 3e-3}
BUDGET = 6 * 1024


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One thread for the module's runs (the corpus cache is the session's: tests/conftest.py)."""
    if not SAMPLE.is_dir():
        pytest.skip(f"sample corpus {SAMPLE} absent")
    torch.set_num_threads(1)  # same reduction order in every run of this module


def cfg(variant="rd_attnres", seed=0, budget=BUDGET, **train):
    return RunConfig.adhoc(variant, "tiny", seed, budget, str(SAMPLE), train={**TRAIN, **train})


def final_rows(results: Path) -> list[tuple]:
    con = duckdb.connect(str(results / "harness.duckdb"), read_only=True)
    try:
        return con.execute("select run_id, val_nll, val_bpb, val_ppl from final order by run_id").fetchall()
    finally:
        con.close()


def val_curve(results: Path) -> list[tuple]:
    con = duckdb.connect(str(results / "harness.duckdb"), read_only=True)
    try:
        return con.execute("select step, name, value from metrics where split='val' order by 1, 2").fetchall()
    finally:
        con.close()


@pytest.mark.slow
def test_same_variant_same_seed_is_bit_identical(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    config = cfg(eval_every_tokens=3072)
    outcome = train_run(config, a, ExecutionSettings(progress=False))
    assert outcome == "done"
    assert train_run(cfg(eval_every_tokens=3072), b, ExecutionSettings(progress=False)) == "done"
    # what train_run returns is what its result file says (the worker records it without re-reading)
    assert outcome.as_dict() == Store(a).run_end(config.run_id) and outcome.val_nll is not None
    ra, rb = final_rows(a), final_rows(b)
    assert len(ra) == 1 and ra == rb  # exact float equality
    assert val_curve(a) == val_curve(b) and len(val_curve(a)) == 6  # 2 evals x (nll, bpb, ppl)
    nll, bpb, ppl = ra[0][1:]
    assert 0 < nll < math.log(512) + 0.5 and ppl == pytest.approx(math.exp(nll), rel=1e-12)
    # a different seed gives different numbers
    c = tmp_path / "c"
    train_run(cfg(seed=1), c, ExecutionSettings(progress=False))
    assert final_rows(c)[0][1] != nll


def test_first_20_batches_identical_across_variants_and_differ_across_seeds(tmp_path):
    prepared = prepare_corpus(
        CorpusKey(str(SAMPLE), "bpe", 512, 0.05, None), cache_dir=Path(os.environ["HARNESS_CACHE"])
    )
    seen = {}
    for variant in available_variants():
        for seed in (0, 1):
            # build the model first, exactly as the runner does: construction consumes the
            # global RNG by a different amount in every variant
            build_model(variant, "tiny", seed=seed, vocab_size=prepared.vocab_size)
            torch.rand(len(variant))
            dm = TokenDataModule(prepared, 64, 16, seed, 2048)
            it = iter(dm.train_dataloader())
            seen[variant, seed] = torch.stack([next(it)[0] for _ in range(20)])
    ref0, ref1 = seen["block_attnres", 0], seen["block_attnres", 1]
    for variant in available_variants():
        assert torch.equal(seen[variant, 0], ref0), variant
        assert torch.equal(seen[variant, 1], ref1), variant
    assert not any(torch.equal(ref0[i], ref1[i]) for i in range(20))


def test_resume_after_stop_matches_uninterrupted(tmp_path):
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    config = cfg(variant="dup_route", eval_every_tokens=2048, checkpoint_every_tokens=1024)
    train_run(config, whole, ExecutionSettings(progress=False))
    with pytest.raises(RunInterrupted):
        train_run(config, parts, ExecutionSettings(progress=False, stop_after_tokens=3 * 1024))
    ckpt = next((parts / "checkpoints").iterdir()) / "local" / "last.ckpt"
    assert ckpt.exists() and not (parts / "runs").exists() or not list((parts / "runs").glob("*.json"))
    assert train_run(config, parts, ExecutionSettings(progress=False)) == "done"
    assert final_rows(parts) == final_rows(whole)  # bit-identical on CPU
    assert val_curve(parts) == val_curve(whole)  # metrics before the stop were kept
    train = (
        "select step, name, value from metrics where split='train' and name != 'tokens_per_s' order by 1, 2"
    )
    con_w = duckdb.connect(str(whole / "harness.duckdb"), read_only=True)
    con_p = duckdb.connect(str(parts / "harness.duckdb"), read_only=True)
    rows_w, rows_p = con_w.execute(train).fetchall(), con_p.execute(train).fetchall()
    wall_p = con_p.execute("select wall_s from runs").fetchone()[0]
    con_w.close()
    con_p.close()
    assert rows_p == rows_w and len(rows_w) == 6 * 3  # every step's loss, lr, grad_norm, none lost
    assert wall_p > 0
    assert not ckpt.exists()  # cleaned up once the result is stored


def test_bits_per_byte_of_a_uniform_model_is_log2_v_tokens_over_bytes(tmp_path):
    corpus = tmp_path / "hand.jsonl"
    docs = [
        f"Document {i}: the quick brown fox jumps over the lazy dog {i * 7} times. Ünïcödé ✓."
        for i in range(200)
    ]
    corpus.write_text("\n".join(json.dumps({"text": d}) for d in docs) + "\n", encoding="utf-8")
    prepared = prepare_corpus(CorpusKey(str(corpus), "bpe", 300, 0.2, None), cache_dir=tmp_path / "cache")
    V = prepared.vocab_size
    model = build_model("block_attnres", "tiny", seed=0, vocab_size=V)
    with torch.no_grad():
        model.final_norm.weight.zero_()  # hidden -> 0, logits -> 0: the uniform distribution
    dm = TokenDataModule(prepared, 32, 4, 0, 512)
    lit = LitLM(
        model,
        train_config("tiny"),
        total_steps=1,
        batch_tokens=128,
        token_bytes=torch.from_numpy(prepared.token_bytes()),
    )
    out = lit.evaluate(dm.val_dataloader())
    n_tokens, n_bytes = dm.val_target_tokens, dm.val_target_bytes()
    assert out["tokens"] == n_tokens and out["bytes"] == n_bytes
    assert out["nll"] == pytest.approx(math.log(V), abs=1e-6)
    assert out["bpb"] == pytest.approx(math.log2(V) * n_tokens / n_bytes, rel=1e-6)
    assert out["ppl"] == pytest.approx(V, rel=1e-5)


def test_forced_divergence_is_recorded_and_exits_cleanly(tmp_path, capsys):
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
            str(BUDGET),
            "--corpus",
            str(SAMPLE),
            "--results",
            str(tmp_path),
            "--quiet",
            *[f"--set={k}={v}" for k, v in TRAIN.items() if k != "lr"],
            "--set",
            "lr=1e30",
            "--set",
            "grad_clip=0",
        ]
    )
    assert rc == 0
    assert "diverged" in capsys.readouterr().out
    con = duckdb.connect(str(tmp_path / "harness.duckdb"), read_only=True)
    status, step, error = con.execute("select status, diverged_step, error from runs").fetchone()
    n_final = con.execute("select count(*) from final").fetchone()[0]
    con.close()
    assert status == "diverged" and step is not None and step < 6 and "non-finite" in error
    assert n_final == 0  # a diverged run never enters the final view


def test_cli_run_writes_final_and_routing(tmp_path, capsys):
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
            str(BUDGET),
            "--corpus",
            str(SAMPLE),
            "--results",
            str(tmp_path),
            "--quiet",
            *[f"--set={k}={v}" for k, v in TRAIN.items()],
        ]
    )
    assert rc == 0
    con = duckdb.connect(str(tmp_path / "harness.duckdb"), read_only=True)
    ((variant, nll, bpb),) = con.execute("select variant, val_nll, val_bpb from final").fetchall()
    routes = con.execute("select distinct site, route from routing order by 1, 2").fetchall()
    js = con.execute("select max(js_qk_v) from routing where site='attn' and layer=1").fetchone()[0]
    proto, code = con.execute("select protocol_hash, code_version from runs").fetchone()
    (run_id,) = con.execute("select run_id from runs").fetchone()
    con.close()
    # what a queue worker's heartbeat would send last: the run's tokens, of its total, and its rate
    progress = live.current(run_id)
    assert progress is not None and (progress.tokens, progress.total_tokens) == (BUDGET, BUDGET)
    assert progress.tokens_per_s > 0 and progress.eta_s(progress.at) == 0
    assert variant == "rd_attnres" and nll > 0 and bpb > 0
    assert routes == [("attn", "qk"), ("attn", "v"), ("mlp", "mlp"), ("out", "out")]
    assert js > 0  # the value route has moved away from the QK route
    assert len(proto) == 64 and code


@pytest.mark.parametrize("case", ["missing", "empty", "short", "utf8", "hub"])
def test_bad_corpus_gives_clear_error_and_writes_nothing(tmp_path, capsys, monkeypatch, case):
    if case == "missing":
        corpus, expect = str(tmp_path / "nope.jsonl"), "not found (from --corpus)"
    elif case == "empty":
        (tmp_path / "empty.jsonl").write_text("")
        corpus, expect = str(tmp_path / "empty.jsonl"), "is empty"
    elif case == "short":
        (tmp_path / "short.jsonl").write_text(
            "\n".join(json.dumps({"text": f"tiny doc {i}"}) for i in range(40))
        )
        corpus, expect = str(tmp_path / "short.jsonl"), "fewer than one batch"
    elif case == "utf8":
        (tmp_path / "bad.txt").write_bytes(b"hello \xff\xfe world")
        corpus, expect = str(tmp_path / "bad.txt"), "UTF-8"
    else:
        import sys
        import types

        def offline(*a, **k):
            raise ConnectionError("network is unreachable")

        monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=offline))
        (
            corpus,
            expect,
        ) = (  # the worker's build resolves the hub revision first (no network here, or no such dataset)
            "hf:nobody/no-such-dataset:none",
            "cannot resolve the revision of 'hf:nobody/no-such-dataset:none' on the hugging face hub",
        )
    rc = cli(
        [
            "run",
            "--variant",
            "block_attnres",
            "--size",
            "tiny",
            "--seed",
            "0",
            "--budget-tokens",
            "4096",
            "--corpus",
            corpus,
            "--results",
            str(tmp_path / "results"),
            "--quiet",
            "--set",
            "vocab_size=300",
            "--set",
            "val_fraction=0.5",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and expect.lower() in err.lower() and "Traceback" not in err, err
    assert not (tmp_path / "results" / "harness.duckdb").exists()
    assert not list((tmp_path / "results").glob("runs/*.json"))


def test_lr_schedule_warmup_then_cosine_to_min():
    c = train_config("tiny", lr=1.0, min_lr_ratio=0.1)
    assert lr_multiplier(0, 100, 10, c) == pytest.approx(0.1)
    assert lr_multiplier(9, 100, 10, c) == pytest.approx(1.0)
    assert lr_multiplier(55, 100, 10, c) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert lr_multiplier(100, 100, 10, c) == pytest.approx(0.1)
    w = train_config("tiny", schedule="wsd", decay_frac=0.2)
    assert lr_multiplier(50, 100, 10, w) == 1.0 and lr_multiplier(99, 100, 10, w) == pytest.approx(0.1)


def test_resume_with_a_different_config_is_refused(tmp_path):
    config = cfg(checkpoint_every_tokens=1024)
    with pytest.raises(RunInterrupted):
        train_run(config, tmp_path, ExecutionSettings(progress=False, stop_after_tokens=2048))
    changed = dataclasses.replace(config, train={**config.train, "lr": 1e-3})
    with pytest.raises(ValueError, match=r"different config \(train.lr: 0.003 != 0.001\)"):
        train_run(changed, tmp_path, ExecutionSettings(progress=False))
    assert train_run(config, tmp_path, ExecutionSettings(progress=False)) == "done"  # the same config resumes


@pytest.mark.parametrize(
    "setting, message",
    [
        ("lr=abc", "lr='abc' is not a float"),
        ("lr=nan", "lr=nan must be a positive finite number"),
        ("batch_tokens=2.5", "batch_tokens='2.5' is not an int"),
        ("batch_tokens=100", "batch_tokens=100 must be a multiple of the tiny context (64 tokens)"),
        ("min_lr_ratio=5", "min_lr_ratio=5.0 must be in [0, 1]"),
        ("weight_decay=-1", "weight_decay=-1.0 must be a finite number >= 0"),
        ("compile=maybe", "compile='maybe' is not a bool"),
        ("colour=red", "unknown training setting 'colour'"),
    ],
)
def test_bad_settings_are_one_clear_line(tmp_path, capsys, setting, message):
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
            "--quiet",
            "--set",
            setting,
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err, err


def test_budget_below_one_batch_and_bad_options(tmp_path, capsys):
    base = [
        "run",
        "--variant",
        "rd_attnres",
        "--size",
        "tiny",
        "--seed",
        "0",
        "--corpus",
        str(SAMPLE),
        "--results",
        str(tmp_path),
        "--quiet",
    ]
    assert cli(base + ["--budget-tokens", "1000"]) == 2
    assert "budget_tokens=1000 is less than one batch (batch_tokens=2048)" in capsys.readouterr().err
    assert cli(base + ["--budget-tokens", "4096", "--threads", "-3"]) == 2
    assert "--threads -3" in capsys.readouterr().err
    assert cli(base + ["--budget-tokens", "4096", "--devices", "0"]) == 2
    assert "--devices '0'" in capsys.readouterr().err
    assert cli(base + ["--budget-tokens", "4096", "--grid", "bad grid:x"]) == 2
    assert "grid name 'bad grid:x'" in capsys.readouterr().err


def test_adhoc_settings_get_their_own_run_and_done_runs_are_not_retrained(tmp_path, capsys):
    base = [
        "run",
        "--variant",
        "block_attnres",
        "--size",
        "tiny",
        "--seed",
        "0",
        "--budget-tokens",
        str(BUDGET),
        "--corpus",
        str(SAMPLE),
        "--results",
        str(tmp_path),
        "--quiet",
        *[f"--set={k}={v}" for k, v in TRAIN.items() if k != "lr"],
    ]
    assert cli(base + ["--set", "lr=1e-3"]) == 0
    assert cli(base + ["--set", "lr=3e-3"]) == 0
    ids = [l.split(": ")[0] for l in capsys.readouterr().out.splitlines()]
    assert len(set(ids)) == 2 and all(i.startswith("adhoc:tiny:block_attnres:s0:6144:") for i in ids)
    assert cli(base + ["--set", "lr=1e-3"]) == 0
    assert "already done" in capsys.readouterr().out
    con = duckdb.connect(str(tmp_path / "harness.duckdb"), read_only=True)
    assert con.execute("select count(*) from final").fetchone()[0] == 2
    con.close()


def test_compiled_forward_is_used_when_asked(monkeypatch):
    """`compile=true` wraps the model once with torch.compile and calls the wrapper
    (a regression: `compiled or model` called len() on the compiled module)."""
    calls = []

    class Wrapper(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            calls.append(x.shape)
            return self.m(x)

    monkeypatch.setattr(torch, "compile", lambda m, **options: Wrapper(m))  # the run passes its backend
    model = build_model("rd_attnres", "tiny", seed=0)
    lit = LitLM(
        model,
        train_config("tiny"),
        total_steps=1,
        batch_tokens=128,
        token_bytes=torch.ones(model.cfg.vocab_size, dtype=torch.long),
        compile=True,
    )
    x = torch.zeros(2, 8, dtype=torch.long)
    assert torch.equal(lit._forward(x), model(x)) and lit._forward(x).shape == (2, 8, model.cfg.vocab_size)
    assert len(calls) == 2


@pytest.mark.slow  # 6 s on 2 cores: out of the developer's loop (`pytest -m "not slow"`)
def test_sigterm_stops_harness_run_with_a_checkpoint_and_it_resumes(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    cmd = [
        sys.executable,
        "-m",
        "harness",
        "run",
        "--variant",
        "rd_attnres",
        "--size",
        "tiny",
        "--seed",
        "0",
        "--budget-tokens",
        str(200 * 1024),
        "--corpus",
        str(SAMPLE),
        "--results",
        str(tmp_path),
        "--quiet",
        "--threads",
        "1",
        *[f"--set={k}={v}" for k, v in TRAIN.items()],
        "--set",
        "checkpoint_every_tokens=1024",
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy()
    )
    deadline = time.time() + 120
    while time.time() < deadline and not list(tmp_path.glob("checkpoints/*/*/last.ckpt")):
        time.sleep(0.05)
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "terminated (SIGTERM) after step" in out and "run the same command again to resume" in out
    step = int(out.split("after step ")[1].split(";")[0])
    ckpt = next(tmp_path.glob("checkpoints/*/*/last.ckpt"))
    assert torch.load(ckpt, map_location="cpu", weights_only=False)["global_step"] == step


def test_model_overrides_reach_the_model_and_the_final_metrics_are_what_evaluate_returned(tmp_path):
    from harness.train.runner import build, fit, record

    config = RunConfig.create(
        "rd_attnres", "tiny", 0, BUDGET, str(SAMPLE), train=TRAIN, model={"block_size": 4}
    )
    run = build(config, tmp_path, ExecutionSettings(progress=False))
    assert run.lit.model.cfg.block_size == 4 and run.protocol["model"]["block_size"] == 4  # default: 2
    fitted = fit(run)
    rows = {r["name"]: r["value"] for r in run.lit.records if r["split"] == "val" and r["step"] == 6}
    assert (
        fitted.final["step"] == 6
        and {k: fitted.final[k] for k in rows} == rows
        and set(rows) == {"nll", "bpb", "ppl"}
    )
    assert record(run, fitted) == "done"
    stored = json.loads(next((tmp_path / "runs").glob("*.json")).read_text())["run"]["config"]
    assert stored["model"] == {"block_size": 4} and stored["protocol"]["model"]["block_size"] == 4


def test_a_run_pruned_by_its_evaluation_hook_is_recorded_as_pruned(tmp_path):
    seen = []

    def on_eval(step, tokens, val_nll):
        seen.append((step, tokens, val_nll))
        return step >= 4  # prune at the second evaluation (steps 2, 4, 6)

    assert (
        train_run(cfg(eval_every_tokens=2048), tmp_path, ExecutionSettings(progress=False), on_eval=on_eval)
        == "pruned"
    )
    assert [s[:2] for s in seen] == [(2, 2048), (4, 4096)]  # never called at the last step
    con = duckdb.connect(str(tmp_path / "harness.duckdb"), read_only=True)
    try:
        status, steps, error = con.execute("select status, steps, error from runs").fetchone()
        vals = con.execute(
            "select step, value from metrics where split = 'val' and name = 'nll' order by step"
        ).fetchall()
        n_final = con.execute("select count(*) from final").fetchone()[0]
    finally:
        con.close()
    assert (status, steps, n_final) == ("pruned", 4, 0)  # stopped at step 4 of 6; not a done run
    assert vals == [(2, seen[0][2]), (4, seen[1][2])]
    assert error == f"pruned by the tuning study's pruner at step 4 (4,096 tokens): val_nll {seen[1][2]:.4f}"
    assert not (tmp_path / "checkpoints").exists() or not any((tmp_path / "checkpoints").iterdir())


def test_a_signal_stops_the_run_after_its_step_with_a_checkpoint_and_it_resumes_bit_identically(tmp_path):
    """The stop hook of `harness launch`'s workers (harness.train.stop.StopRequest): a real
    SIGUSR1 during step 2 stops the run after step 2 with a checkpoint of step 2 (no periodic one
    is due), and the resumed run ends with the uninterrupted run's numbers."""
    import signal

    from harness.train.checkpoint import checkpoint_dir, owner_dir, resume_step
    from harness.train.stop import StopRequest

    config = cfg(checkpoint_every_tokens=BUDGET)  # no checkpoint before the end but the stop's
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    train_run(config, whole, ExecutionSettings(progress=False))
    stop, asked = StopRequest(), []

    def stop_requested():  # asked after every step; the signal comes once step 1's answer is given
        asked.append(1)
        reason = stop()
        if len(asked) == 1:
            os.kill(os.getpid(), signal.SIGUSR1)  # its handler runs at once: a stop request, nothing else
        return reason

    with stop.catching(signal.SIGUSR1):
        with pytest.raises(
            RunInterrupted, match=r"stopped after 2,048 tokens \(step 2\) on request \(SIGUSR1\)"
        ):
            train_run(config, parts, ExecutionSettings(progress=False), stop_requested=stop_requested)
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL  # put back
    assert len(asked) == 2 and resume_step(owner_dir(checkpoint_dir(parts, config.run_id), None)) == 2
    assert train_run(config, parts, ExecutionSettings(progress=False)) == "done"
    assert final_rows(parts) == final_rows(whole)


def test_no_srun_warning_from_lightning_and_other_warnings_still_show(tmp_path, monkeypatch):
    """Lightning warns in every run on a machine with SLURM installed that `srun` is not used;
    the harness picks the cluster environment itself (harness.train.trainer.cluster_environment)
    and silences only that message."""
    import shutil
    import warnings

    from lightning.fabric.plugins.environments import LightningEnvironment, SLURMEnvironment
    from lightning.fabric.utilities.rank_zero import rank_zero_warn
    from lightning.fabric.utilities.warnings import PossibleUserWarning

    from harness.train.runner import build

    assert shutil.which("srun"), "slurm-wlm is not installed (tests/services.py needs it too)"
    for k in [k for k in os.environ if k.startswith(("SLURM_", "TORCHELASTIC_"))]:
        monkeypatch.delenv(k)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert train_run(cfg(), tmp_path, ExecutionSettings(progress=False)) == "done"
        rank_zero_warn("another warning", category=PossibleUserWarning)
    messages = [str(w.message) for w in caught]
    assert not [m for m in messages if "srun" in m], messages
    assert "another warning" in messages
    from harness.train.trainer import cluster_environment

    assert isinstance(
        build(
            cfg(seed=1), tmp_path, ExecutionSettings(progress=False)
        ).trainer._accelerator_connector.cluster_environment,
        LightningEnvironment,
    )
    # a single-task SLURM step (a `harness launch` worker): Lightning's own, no SLURM rank logic
    monkeypatch.setenv("SLURM_NTASKS", "1")
    monkeypatch.setenv("SLURM_JOB_NAME", "harness-work")
    assert isinstance(cluster_environment(), LightningEnvironment)
    # `srun --ntasks-per-node=4 harness run ... --devices 4 --strategy ddp`: each task a rank, no auto-requeue
    monkeypatch.setenv("SLURM_NTASKS", "4")
    monkeypatch.setenv("SLURM_NTASKS_PER_NODE", "4")
    env = cluster_environment()
    assert isinstance(env, SLURMEnvironment) and env.auto_requeue is False
    monkeypatch.setenv("SLURM_JOB_NAME", "interactive")
    assert isinstance(cluster_environment(), LightningEnvironment)
