"""A run's numerics (harness/train/environment.py's RunNumerics, harness/models/numerics.py; DESIGN section 13):
decided once, used by the runner, the Lightning module and the environment record, and the routing path a
real choice a run is trained with (``--routing``, ``[train] routing``), recorded per run and outside the
protocol hash. Tiny runs on the FineWeb-Edu sample, a few seconds each:

    python -m pytest -q tests/train/test_run_numerics.py
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from harness.cli import main as cli
from harness.design.config import RunConfig, train_config
from harness.models import build_model
from harness.models.numerics import (
    DEFAULT_ROUTING,
    KNOWN_COMMITS,
    LINEAGE,
    NUMERICS_REVISIONS,
    ROUTING_PATHS,
    implied_numerics,
    numerics_id,
    routing_of,
)
from harness.store.runfile import read_result
from harness.train import environment, runner
from harness.train.execution import ExecutionSettings
from harness.train.lit import LitLM

SAMPLE = Path(__file__).resolve().parents[3] / "shared/data/fineweb_edu_sample"
TRAIN = {"vocab_size": 512, "batch_tokens": 1024, "eval_tokens": 2048, "lr": 3e-3}
BUDGET = 4 * 1024


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One thread for the module's runs (the corpus cache is the session's: tests/conftest.py)."""
    assert SAMPLE.is_dir(), f"sample corpus {SAMPLE} absent"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def config(**train) -> RunConfig:
    return RunConfig.adhoc("rd_attnres", "tiny", 0, BUDGET, str(SAMPLE), train={**TRAIN, **train})


def test_numerics_identifiers_and_what_old_commits_imply():
    assert [numerics_id(p) for p in ROUTING_PATHS] == [f"{p}/{NUMERICS_REVISIONS[p]}" for p in ROUTING_PATHS]
    assert set(NUMERICS_REVISIONS) == set(ROUTING_PATHS) and DEFAULT_ROUTING in ROUTING_PATHS
    assert all(numerics_id(p) in LINEAGE for p in ROUTING_PATHS)  # every current identifier says what it is
    assert set(KNOWN_COMMITS.values()) <= set(LINEAGE)
    with pytest.raises(ValueError, match=r"^routing='fused'; allowed: two_phase, per_site$"):
        numerics_id("fused")
    # this code trains a current identifier again, not a retired revision or an unknown one
    assert routing_of(numerics_id("per_site")) == "per_site"
    assert routing_of("two_phase/1") is None and routing_of("unknown") is None and routing_of("x/1") is None
    study = "0ab9ba51950dd714a847e87c22960e5aebb96136"  # the committed factorial study's training commit
    assert implied_numerics(study) == "per_site/1"
    assert implied_numerics(study + "-dirty") == "unknown" and implied_numerics(None) == "unknown"


def test_the_routing_setting_resolves_from_the_command_line_then_the_grid(tmp_path):
    plain, grid = config(), config(routing="per_site")
    assert ExecutionSettings().for_run(plain).routing == DEFAULT_ROUTING
    assert ExecutionSettings().for_run(grid).routing == "per_site"
    assert ExecutionSettings(routing="two_phase").for_run(grid).routing == "two_phase"  # the command line's
    # outside the protocol: the grid's execution setting is not a training setting
    assert train_config("tiny", **TRAIN) == grid.train_config()


@pytest.mark.slow
def test_a_run_decides_its_numerics_once_and_the_module_and_record_use_them(tmp_path, monkeypatch):
    calls = []
    real = runner.run_numerics
    monkeypatch.setattr(runner, "run_numerics", lambda c, s: calls.append(1) or real(c, s))
    built = runner.build(config(), tmp_path, ExecutionSettings(progress=False, routing="per_site"))
    assert len(calls) == 1
    numerics = built.lit.numerics
    assert numerics == real(config(), ExecutionSettings(routing="per_site"))
    assert built.lit.model.routing == numerics.routing == "per_site"
    assert built.environment["numerics"] == numerics.numerics_id == numerics_id("per_site")
    assert (
        built.environment["hardware"]
        == numerics.hardware
        == environment.run_class(config(), ExecutionSettings(routing="per_site"))
    )
    assert (built.precision, built.environment["run"]["routing"]) == (numerics.precision, "per_site")


def test_the_module_takes_cuda_defaults_and_compile_from_the_numerics_not_its_device(monkeypatch):
    """On a CPU without $HARNESS_CUDA_DEFAULTS the module would take the CPU's defaults; given numerics that say
    CUDA's, it takes CUDA's (fused AdamW, the deferred divergence check): it does not decide again."""
    monkeypatch.delenv("HARNESS_CUDA_DEFAULTS", raising=False)
    model = build_model("rd_attnres", "tiny", seed=0, vocab_size=512)
    cpu = environment.run_numerics(config(), ExecutionSettings(accelerator="cpu"))
    twin = dataclasses.replace(cpu, cuda_defaults=True)
    kw = dict(total_steps=4, batch_tokens=1024, token_bytes=torch.ones(512))
    lit = LitLM(model, train_config("tiny"), numerics=twin, **kw)
    assert lit.configure_optimizers()["optimizer"].defaults["fused"] is True and not lit.sync_every_step
    assert lit.compile_setting is False  # the numerics' decision, as a bool
    lit = LitLM(model, train_config("tiny"), numerics=cpu, **kw)
    assert lit.configure_optimizers()["optimizer"].defaults["foreach"] is False and lit.sync_every_step
    with pytest.raises(ValueError, match=r"^compile=True with numerics: the run's numerics decide compile$"):
        LitLM(model, train_config("tiny"), numerics=cpu, compile=True, **kw)
    with pytest.raises(ValueError, match=r"^the model routes two_phase, the run's numerics per_site$"):
        LitLM(model, train_config("tiny"), numerics=dataclasses.replace(cpu, routing="per_site"), **kw)


def _train(tmp_path: Path, name: str, *extra: str) -> dict:
    results = tmp_path / name
    argv = ["run", "--variant", "rd_attnres", "--size", "tiny", "--seed", "0", "--budget-tokens", str(BUDGET)]
    argv += ["--corpus", str(SAMPLE), "--results", str(results), "--threads", "1", "--quiet"]
    argv += [f"--set={k}={v}" for k, v in TRAIN.items()]
    assert cli([*argv, *extra]) == 0
    (path,) = (results / "runs").glob("*.json")
    return read_result(path)


@pytest.mark.slow
def test_both_paths_train_record_their_numerics_and_share_the_protocol(tmp_path):
    """``--routing per_site`` (or ``--set routing=per_site``) trains per-site: the same protocol hash, the
    same function to float32 rounding, the numerics recorded. Whether four float32 steps differ in their last
    bits depends on the CPU (they did on an Intel Xeon and an earlier AMD EPYC, not on another AMD EPYC):
    that the two paths round differently is pinned by the float64 golden (tests/train/test_numerics_golden.py)."""
    two = _train(tmp_path, "two")
    per = _train(tmp_path, "per", "--routing", "per_site")
    again = _train(tmp_path, "set", "--set", "routing=per_site")
    assert two["run"]["protocol_hash"] == per["run"]["protocol_hash"] == again["run"]["protocol_hash"]
    assert (two["run"]["numerics"], per["run"]["numerics"]) == (
        numerics_id("two_phase"),
        numerics_id("per_site"),
    )
    assert per["run"]["environment"]["numerics"] == again["run"]["numerics"] == numerics_id("per_site")

    def losses(result):
        return [m["value"] for m in result["metrics"] if (m["split"], m["name"]) == ("train", "loss")]

    assert losses(per) == losses(again)  # one path, one machine: bit-identical
    assert max(abs(a - b) / a for a, b in zip(losses(two), losses(per), strict=True)) < 1e-5


def test_a_bad_routing_is_refused_in_one_line(tmp_path, capsys):
    argv = ["run", "--variant", "rd_attnres", "--size", "tiny", "--seed", "0", "--budget-tokens", str(BUDGET)]
    argv += ["--corpus", str(SAMPLE), "--results", str(tmp_path / "r"), "--quiet"]
    assert cli([*argv, "--set", "routing=fused"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "routing='fused' is not a routing path; allowed: two_phase, per_site" in err, (
        err
    )
    assert not (tmp_path / "r").exists()
    grid = tmp_path / "g.toml"
    grid.write_text(
        f'name = "g"\ncorpus = "{SAMPLE}"\nsizes = ["tiny"]\nseeds = [0]\nbudgets_tokens = [2048]\n'
        '[variants]\nblock_attnres = "parent"\nrd_attnres = "treatment"\n[train]\nrouting = "fused"\n'
    )
    assert cli(["queue", str(grid), "--results", str(tmp_path / "q")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "routing='fused' is not a routing path; allowed: two_phase, per_site" in err, (
        err
    )
    assert not (tmp_path / "q").exists()
