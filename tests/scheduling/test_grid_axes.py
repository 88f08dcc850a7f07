"""A grid's ``[axes]`` (DESIGN section 1.2): any protocol setting that may vary per cell as a grid axis. CPU, seconds.

Run: python -m pytest -q tests/scheduling/test_grid_axes.py
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.common.terms import parse_run_id, run_id
from harness.design.settings import SETTINGS
from harness.scheduling.grids.checks import AXIS_KEYS
from harness.scheduling.grids.grid import load_grid

BASE = """\
name = "ax"
corpus = "data/corpus.jsonl"
sizes = ["tiny"]
seeds = [0, 1, 2]
budgets_tokens = [2048]

[variants]
block_attnres = "parent"
rd_attnres = "treatment"
"""


def grid(tmp_path: Path, extra: str):
    p = tmp_path / "ax.toml"
    p.write_text(BASE + extra)
    return load_grid(p)


def test_an_axis_multiplies_the_cells_and_names_its_value_in_each_run_id(tmp_path):
    runs = grid(tmp_path, "[axes]\nlr = [0.001, 0.004]\n").expand(cwd="/c")
    assert len(runs) == 12  # 2 values x 3 seeds x 2 variants
    assert [r.run_id for r in runs[:7]] == [
        "ax:tiny:block_attnres:s0:2048:lr=0.001",
        "ax:tiny:rd_attnres:s0:2048:lr=0.001",
        "ax:tiny:block_attnres:s1:2048:lr=0.001",
        "ax:tiny:rd_attnres:s1:2048:lr=0.001",
        "ax:tiny:block_attnres:s2:2048:lr=0.001",
        "ax:tiny:rd_attnres:s2:2048:lr=0.001",
        "ax:tiny:block_attnres:s0:2048:lr=0.004",
    ]
    for r in runs:
        lr = 0.001 if r.run_id.endswith("0.001") else 0.004
        assert r.axes == {"lr": lr} and r.train == {"lr": lr} and r.train_config().lr == lr
        assert parse_run_id(r.run_id).axes == (("lr", repr(lr)),)
        assert r.to_dict()["axes"] == {"lr": lr}


def test_without_axes_the_ids_and_payloads_are_as_before(tmp_path):
    runs = grid(tmp_path, "").expand(cwd="/c")
    assert [r.run_id for r in runs] == [
        run_id("ax", "tiny", v, s, 2048) for s in (0, 1, 2) for v in ("block_attnres", "rd_attnres")
    ]
    assert all(r.axes is None and "axes" not in r.to_dict() for r in runs)
    assert parse_run_id(runs[0].run_id) == ("ax", "tiny", "block_attnres", 0, 2048, False, ())


def test_two_axes_give_every_combination_first_axis_slowest(tmp_path):
    g = grid(tmp_path, '[axes]\nschedule = ["cosine", "wsd"]\nwarmup_tokens = [0, 256]\n')
    points = g.axis_points()
    assert points == [
        (("schedule", "cosine"), ("warmup_tokens", 0)),
        (("schedule", "cosine"), ("warmup_tokens", 256)),
        (("schedule", "wsd"), ("warmup_tokens", 0)),
        (("schedule", "wsd"), ("warmup_tokens", 256)),
    ]
    runs = g.expand(cwd="/c")
    assert len(runs) == 24 and len({r.run_id for r in runs}) == 24
    rid = "ax:tiny:rd_attnres:s2:2048:schedule=wsd:warmup_tokens=256"
    assert rid in {r.run_id for r in runs}
    parsed = parse_run_id(rid + ":tuned")
    assert (
        parsed.axes == (("schedule", "wsd"), ("warmup_tokens", "256")) and parsed.tuned and parsed.seed == 2
    )
    assert parsed.cell_seed() == "tiny:2048:2:schedule=wsd:warmup_tokens=256"


def test_the_sweepable_keys_are_the_declared_per_cell_protocol_settings():
    assert {"lr", "warmup_tokens", "weight_decay", "batch_tokens", "schedule", "decay_frac"} <= set(AXIS_KEYS)
    # execution settings (micro_batch_size, routing, compile) and protocol=False intervals are not axes
    for key in ("micro_batch_size", "routing", "compile", "eval_every_tokens", "checkpoint_every_tokens"):
        assert key not in AXIS_KEYS
    assert all(s.protocol and s.per_cell for s in SETTINGS if s.name in AXIS_KEYS)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            "[axes]\nmicro_batch_size = [1, 2]\n",
            "axes.micro_batch_size: not a sweepable setting; allowed: lr,",
        ),
        ("[axes]\nlr = []\n", "axes.lr: must be a non-empty list of values"),
        ("[axes]\nlr = 0.001\n", "axes.lr: must be a non-empty list of values, got 0.001"),
        ("[axes]\nlr = [0.001, 0.001]\n", "axes.lr: duplicate entries"),
        ("[axes]\nlr = [0.001, -1.0]\n", "axes.lr (size tiny): lr=-1.0 must be a positive finite number"),
        ('[axes]\nlr = [0.001, "x"]\n', "axes.lr: "),
        (
            '[axes]\nschedule = ["cosine", "linear"]\n',
            "axes.schedule (size tiny): schedule='linear'; allowed",
        ),
        ("[axes]\nlr = [0.001]\n[train]\nlr = 0.002\n", "axes.lr: also set in [train]"),
        ("[axes]\nlr = [0.001]\n[train.rd_attnres]\nlr = 0.002\n", "axes.lr: also set in [train.rd_attnres]"),
        (
            "[axes]\nlr = [0.001, 0.004]\n[tuned]\nrd_attnres = { lr = 3e-3 }\n",
            "axes.lr: a [tuned] grid and an axis on 'lr' (a tuned setting) cannot be combined",
        ),
    ],
)
def test_a_bad_axis_is_refused_in_one_line_naming_it(tmp_path, extra, message):
    with pytest.raises(ValueError) as info:
        grid(tmp_path, extra)
    text = str(info.value)
    assert "\n" not in text and message in text, text
