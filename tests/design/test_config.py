"""The shared pieces every stage uses: RunConfig (harness.design.config), the vocabulary and
config_diff (harness.common.terms), atomic file replacement (harness.common.files). CPU, about a second.

Run: python -m pytest -q tests/design/test_config.py
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import stat
from contextlib import contextmanager

import pytest

from harness.common.files import atomic_path, atomic_write
from harness.common.terms import FINISHED, ROLES, STATUSES, config_diff, run_id
from harness.design.config import RunConfig, train_config, train_keys
from harness.design.train_table import TrainTable, check_value, parse_value, split_train, value_problem
from harness.models.sizes import derive

pytestmark = pytest.mark.own_cache  # its commands build their corpus in RESULTS/cache (conftest)

PAYLOAD = {  # a queued payload as harness queue wrote it before RunConfig existed (61e45a1)
    "run_id": "g:tiny:fixed_v:s0:1000",
    "grid": "g",
    "variant": "fixed_v",
    "role": "control",
    "size": "tiny",
    "seed": 0,
    "budget_tokens": 1000,
    "corpus": "/data/corpus.jsonl",
    "train": {"lr": 1e-3},
    "analysis": {
        "alpha": 0.05,
        "reproduce_fraction": 0.5,
        "min_effect_nats": None,
        "power": 0.8,
        "max_seeds": 30,
        "looks": [],
    },
}


# ----------------------------------------------------------------------------- RunConfig


def test_a_stored_payload_reads_back_to_the_same_json():
    config = RunConfig.from_dict(json.loads(json.dumps(PAYLOAD)))
    assert config.to_dict() == PAYLOAD and list(config.to_dict()) == list(PAYLOAD)  # keys and their order
    assert config.train_config().lr == 1e-3 and config.train_config().batch_tokens == 2048  # tiny preset
    adhoc = {k: v for k, v in PAYLOAD.items() if k != "analysis"}  # `harness run` stored no plan
    assert (
        RunConfig.from_dict(adhoc).analysis is None and "analysis" not in RunConfig.from_dict(adhoc).to_dict()
    )


def test_create_is_the_grid_cell_and_adhoc_adds_the_overrides_digest():
    cell = RunConfig.create(
        "fixed_v",
        "tiny",
        0,
        1000,
        "/data/corpus.jsonl",
        grid="g",
        role="control",
        train={"lr": 1e-3},
        analysis=PAYLOAD["analysis"],
    )
    assert cell == RunConfig.from_dict(PAYLOAD) and cell.run_id == run_id("g", "tiny", "fixed_v", 0, 1000)
    plain = RunConfig.adhoc("rd_attnres", "tiny", 0, 6144, "/c")
    assert plain.run_id == "adhoc:tiny:rd_attnres:s0:6144" and plain.role == "treatment"  # the spec's role
    tuned = RunConfig.adhoc("rd_attnres", "tiny", 0, 6144, "/c", train={"lr": 3e-3})
    digest = hashlib.sha256(json.dumps({"lr": 3e-3}, sort_keys=True).encode()).hexdigest()[:8]
    assert tuned.run_id == f"adhoc:tiny:rd_attnres:s0:6144:{digest}"
    # a named grid keeps the plain id, overrides or not
    assert (
        RunConfig.adhoc("rd_attnres", "tiny", 0, 6144, "/c", grid="sweep", train={"lr": 3e-3}).run_id
        == "sweep:tiny:rd_attnres:s0:6144"
    )


def test_the_train_table_is_split_once_into_protocol_and_execution_halves():
    table = {"lr": 1e-3, "micro_batch_size": 4, "compile": "auto", "loggers": ["csv", "csv"], "nosuch": 1}
    assert split_train(table) == TrainTable(
        protocol={"lr": 1e-3, "nosuch": 1},
        execution={"micro_batch_size": 4, "compile": "auto", "loggers": ("csv",)},
    )
    # the two readers take one half each: the protocol's settings and the run's execution settings
    run = RunConfig.create(
        "rd_attnres", "tiny", 0, 6144, "/c", grid="g", train={"lr": 1e-3, "micro_batch_size": 4}
    )
    assert run.train_config() == train_config("tiny", lr=1e-3) and run.train_config().lr == 1e-3
    assert run.execution() == {"micro_batch_size": 4}
    with pytest.raises(ValueError, match="micro_batch_size=0 must be 'auto' or a positive number"):
        split_train({"micro_batch_size": 0})


@pytest.mark.parametrize(
    "key, value",
    [
        ("batch_tokens", 2.5),
        ("batch_tokens", True),
        ("lr", "fast"),
        ("compile", "maybe"),
        ("micro_batch_size", 1.5),
        ("schedule", 3),
    ],
)
def test_a_train_value_is_judged_by_one_rule_in_the_grid_the_config_and_the_command_line(
    tmp_path, key, value
):
    """The grid check, TrainConfig (or an execution setting's check) and --set agree on a [train] value's
    type: each says the one rule's words (harness.design.train_table.value_problem)."""
    from harness.scheduling.grids.checks import check_train

    problem = value_problem(key, value, train_keys()[key])
    assert (
        problem
        == f"{value!r} is not {'an' if train_keys()[key] == 'int' else 'a'} {train_keys()[key]}"
        + (" or 'auto'" if key in ("compile", "micro_batch_size") else "")
    )
    with pytest.raises(ValueError, match=re.escape(f"g.toml: train.{key}: {problem}")):
        check_train({key: value}, ("tiny",), "g.toml")
    with pytest.raises(ValueError, match=re.escape(f"{key}={problem}")):
        train_config("tiny", **{key: value})
    if train_keys()[key] != "str" and not isinstance(value, bool):  # the text of it on a command line
        with pytest.raises(ValueError, match=re.escape(f"{key}={str(value)!r} is not")):
            parse_value(key, str(value), train_keys())
    # `auto` where the setting resolves it per machine, nowhere else
    assert (
        value_problem("compile", "auto", "bool") is None
        and value_problem("micro_batch_size", "auto", "int") is None
    )
    assert value_problem("lr", "auto", "float") == "'auto' is not a float"
    assert check_value("lr", 1, "float") == 1.0 and isinstance(check_value("lr", 1, "float"), float)


def test_a_config_is_a_value():
    train = {"lr": 1e-3}
    config = RunConfig.create("fixed_v", "tiny", 0, 1000, "/c", train=train)
    train["lr"] = 5.0  # the caller's dict changes later: the config does not
    assert config.train == {"lr": 1e-3}
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.seed = 1  # type: ignore[misc]
    looks = RunConfig.create("fixed_v", "tiny", 0, 1000, "/c", analysis={"looks": (3, 5)})
    assert looks.analysis == {"looks": [3, 5]}  # as JSON gives it back: equal after a round trip
    assert RunConfig.from_dict(json.loads(json.dumps(looks.to_dict()))) == looks


@pytest.mark.parametrize(
    "data, message",
    [
        (
            {**PAYLOAD, "colour": "red"},
            "run config: unknown key 'colour'; allowed keys: run_id, grid, variant",
        ),
        ({k: v for k, v in PAYLOAD.items() if k != "corpus"}, "run config: missing key 'corpus'"),
        (
            {**PAYLOAD, "role": "boss"},
            "run config role='boss'; allowed: parent, treatment, control, reference",
        ),
        ({**PAYLOAD, "seed": "0"}, "run config seed='0' must be an integer"),
        ({**PAYLOAD, "train": [1]}, "run config train=[1] must be a table"),
    ],
)
def test_a_bad_payload_is_one_clear_error(data, message):
    with pytest.raises(ValueError) as info:
        RunConfig.from_dict(data)
    assert message in str(info.value)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(variant="nope"), "unknown variant 'nope'; valid variants: prenorm"),
        (dict(size="huge"), "unknown size 'huge'; valid sizes: tiny, mini, small, 120m, 343m"),
        (dict(budget_tokens=0), "budget_tokens=0 must be a positive number of tokens"),
        (dict(seed=-1), "seed=-1 must be >= 0"),
        (dict(grid="a:b"), "grid name 'a:b': use letters, digits"),
        (dict(train={"lr": -1.0}), "lr=-1.0 must be a positive finite number"),
        (dict(model={"vocab_size": 9}), "model override vocab_size: the tokenizer sets the vocabulary"),
        (dict(model={"block_size": 3}), "block_size=3 must be an even number >= 2"),
        (dict(model={"colour": 1}), "unknown model override(s) ['colour']"),
    ],
)
def test_create_checks_every_field(kwargs, message):
    args = dict(variant="rd_attnres", size="tiny", seed=0, budget_tokens=1000, corpus="/c") | kwargs
    with pytest.raises(ValueError) as info:
        RunConfig.create(
            args.pop("variant"),
            args.pop("size"),
            args.pop("seed"),
            args.pop("budget_tokens"),
            args.pop("corpus"),
            **args,
        )
    assert message in str(info.value)


def test_a_budget_between_whole_global_batches_names_the_two_nearest():
    """A step is one global batch, so a budget that is not a whole number of them would train
    fewer tokens than its run id says: refused, naming the two whole budgets (issue 31)."""
    config = RunConfig.create("rd_attnres", "tiny", 0, 10_000, "/c")  # tiny: batch_tokens 2048
    with pytest.raises(ValueError) as info:
        config.check_trainable()
    assert str(info.value) == (
        "run adhoc:tiny:rd_attnres:s0:10000: budget_tokens=10_000 is not a whole number of global batches "
        "(batch_tokens=2_048); the nearest budgets that are: 8_192 (4 steps) or 10_240 (5 steps)"
    )
    for budget in (8_192, 10_240, 2_048):
        RunConfig.create("rd_attnres", "tiny", 0, budget, "/c").check_trainable()
    odd = RunConfig.create("rd_attnres", "small", 0, 100_000, "/c", train={"batch_tokens": 2048})
    with pytest.raises(
        ValueError, match=r"the nearest budgets that are: 98_304 \(48 steps\) or 100_352 \(49"
    ):
        odd.check_trainable()


def test_a_user_spec_is_stored_in_the_config_a_shipped_one_is_not(thirds_spec):
    """A variant from $HARNESS_SPEC_PATH travels in the run's config, so a worker without the
    folder builds the same model; shipped variants stay names (their payloads unchanged)."""
    from harness.models import get_spec

    user = RunConfig.create(thirds_spec, "120m", 0, 524_288, "/c")  # its 3 head groups split 12 heads
    assert user.spec == get_spec(thirds_spec).text and 'name = "thirds"' in user.spec
    assert RunConfig.from_dict(json.loads(json.dumps(user.to_dict()))) == user
    assert dataclasses.replace(user.variant_spec(), source="") == dataclasses.replace(
        get_spec(thirds_spec), source=""
    )
    shipped = RunConfig.create("dup_route", "small", 0, 4096, "/c")
    assert shipped.spec is None and "spec" not in shipped.to_dict()
    with pytest.raises(ValueError, match="spec name='thirds' must be the variant 'dup_route'"):
        RunConfig.from_dict({**shipped.to_dict(), "spec": user.spec})
    with pytest.raises(ValueError, match="run config spec=.* must be a spec's TOML text"):
        RunConfig.from_dict({**user.to_dict(), "spec": {"name": "thirds"}})


def test_model_overrides_reach_the_model_config_and_the_json_only_when_set():
    config = RunConfig.create("rd_attnres", "small", 0, 1000, "/c", model={"block_size": 4})
    # the tokenizer's 300 ids padded to a multiple of 64 (GPT-2's 50257 -> 50304)
    assert config.model_config(vocab_size=300) == derive("small", block_size=4, vocab_size=320)
    assert config.model_config(50257).vocab_size == 50304 and config.model_config(512).vocab_size == 512
    assert config.model_config(vocab_size=300).block_size == 4 != derive("small").block_size
    assert config.to_dict()["model"] == {"block_size": 4}
    assert "model" not in RunConfig.create("rd_attnres", "small", 0, 1000, "/c").to_dict()


# ----------------------------------------------------------------------------- vocabulary


def test_vocabulary_is_design_section_5():
    assert ROLES == ("parent", "treatment", "control", "reference")
    assert STATUSES == (
        "queued",
        "running",
        "done",
        "failed",
        "diverged",
        "pruned",
    )  # pruned: tuning (DESIGN 9)
    assert set(FINISHED) < set(STATUSES) and FINISHED == ("done", "diverged", "pruned")


def test_config_diff_serves_both_callers():
    old = {"run_id": "a", "variant": "x", "train": {"lr": 0.003, "wd": 0.1}, "corpus": "/c"}
    new = {"run_id": "b", "variant": "y", "train": {"lr": 0.001, "wd": 0.1}, "extra": 1, "corpus": "/c"}
    # the queue and the checkpoint check: keys, or keys with values
    assert config_diff(old, new) == ["extra", "run_id", "train.lr", "variant"]
    assert config_diff(old, new, values=True)[2] == "train.lr: 0.003 != 0.001"
    # the report: JSON text, the variant keys skipped, absent keys named
    assert config_diff(json.dumps(old), json.dumps(new), values=True, ignore=("variant", "run_id")) == [
        "extra: '<absent>' != 1",
        "train.lr: 0.003 != 0.001",
    ]
    assert (
        config_diff(None, "{}")
        == config_diff("not json", "{}")
        == ["config JSON missing or unreadable, fields cannot be compared"]
    )
    assert config_diff(old, json.loads(json.dumps(old))) == []


# ----------------------------------------------------------------------------- files


def test_atomic_write_replaces_whole_files_with_open_modes(tmp_path):
    target = tmp_path / "sub" / "result.json"
    assert atomic_write(target, "first") == target and target.read_text() == "first"
    inode = target.stat().st_ino
    atomic_write(target, b"second")
    assert target.read_bytes() == b"second" and target.stat().st_ino != inode  # a new file, renamed in
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask  # as open() makes it, not mkstemp's 0o600
    assert sorted(p.name for p in target.parent.iterdir()) == ["result.json"]  # no temporary left


def test_a_write_refused_at_its_commit_removes_the_folders_it_created_and_only_those(tmp_path):
    """The fence refuses a checkpoint's rename once its results folder is gone (harness.scheduling.
    harness.scheduling.workers.fence.WatchedFence): the folders the write re-created where the results folder was are
    removed again, folders that were there before stay."""
    import shutil

    from harness.train.fencing import FolderWatch

    results = tmp_path / "results"
    target = results / "checkpoints" / "g_tiny" / "e0" / "last.ckpt"

    def holding(watch):  # what WatchedFence.holding does first: refuse once the folder is lost
        @contextmanager
        def commit():
            why = watch.look()
            if why is not None:
                raise RuntimeError(f"results folder {why}")
            yield

        return commit

    (results / "checkpoints").mkdir(parents=True)
    watch = FolderWatch(results)
    atomic_write(target, b"x", commit=holding(watch))  # the folder is there: written
    assert target.read_bytes() == b"x"
    shutil.rmtree(results)  # gone between the fence's check and the write (the race the commit closes)
    with pytest.raises(
        RuntimeError, match="results folder (deleted|replaced by another folder)"
    ):  # mkdir made it
        atomic_write(target, b"x", commit=holding(watch))
    assert not tmp_path.joinpath("results").exists()  # re-created by the write's mkdir, removed again
    with pytest.raises(FileNotFoundError, match="the results folder is missing"):  # a worker's writes name it
        atomic_write(target, b"x", commit=holding(watch), root=results)
    assert not tmp_path.joinpath("results").exists()  # not even made

    results.mkdir()
    watch = FolderWatch(results)
    shutil.rmtree(results)
    (results / "checkpoints").mkdir(parents=True)  # another folder in its place, with a checkpoints folder
    with pytest.raises(
        RuntimeError, match="results folder (deleted|replaced by another folder)"
    ):  # a freed inode
        atomic_write(target, b"x", commit=holding(watch))
    assert [p.relative_to(results).as_posix() for p in results.rglob("*")] == ["checkpoints"]  # kept

    watch = FolderWatch(results)  # a folder being emptied (rm -r): its id file gone, the folder not yet
    (results / ".harness-id").unlink()
    assert watch.look() == "deleted"


def test_atomic_path_leaves_the_target_alone_when_the_writer_fails(tmp_path):
    target = tmp_path / "last.ckpt"
    target.write_text("old checkpoint")
    with pytest.raises(RuntimeError, match="killed mid-write"):
        with atomic_path(target) as tmp:
            assert tmp.parent == target.parent and tmp.name.startswith(".last.ckpt.") and tmp.suffix == ".tmp"
            tmp.write_text("half")
            raise RuntimeError("killed mid-write")
    assert target.read_text() == "old checkpoint"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]


def test_a_ctrl_c_just_after_the_temporary_file_is_made_leaves_none(tmp_path, monkeypatch):
    """A Ctrl-C between os.open making the temporary file and the block that removes it on an error (under
    load, `harness import`'s Ctrl-C test left an empty `.rd_factorial_study.toml.<pid>.<hex>.tmp`)."""
    import harness.common.files as files

    real_close = os.close

    def interrupted(fd):
        real_close(fd)
        raise KeyboardInterrupt

    monkeypatch.setattr(files.os, "close", interrupted)
    with pytest.raises(KeyboardInterrupt):
        with atomic_path(tmp_path / "grid.toml") as tmp:
            tmp.write_text("never reached")
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []
    with atomic_path(tmp_path / "grid.toml") as tmp:  # and the next write goes through
        tmp.write_text("x")
    assert [p.name for p in tmp_path.iterdir()] == ["grid.toml"]
