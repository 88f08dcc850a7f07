"""Grid specs (harness.scheduling.grids.grid, DESIGN section 1.2): loading, checking, expansion. CPU, a few seconds.

Run: python -m pytest -q tests/scheduling/test_grid.py
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from harness.common.terms import ROLES, run_id
from harness.models import available_variants
from harness.models.sizes import SIZES
from harness.scheduling.grids.grid import load_grid

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted((ROOT / "ablations").glob("*.toml"))

GOOD = """\
name = "g"
corpus = "data/corpus.jsonl"
sizes = ["tiny"]
seeds = [0, 1]
budgets_tokens = [1000]

[variants]
block_attnres = "parent"
rd_attnres = "treatment"
fixed_v = "control"
"""


def write(tmp_path: Path, text: str, name: str = "grid.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# ----------------------------------------------------------------------------- shipped grids


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_shipped_grid_loads_and_expands(path: Path):
    text = path.read_text()
    assert text.startswith("#"), "each grid starts with a comment: purpose, wall time, question"
    grid = load_grid(path)
    runs = grid.expand(cwd="/somewhere")
    # Count computed independently from the spec: roles times their sizes, budgets, all seeds.
    expected = sum(
        len(grid.sizes_by_role[r]) * len(grid.budgets_by_role[r]) * len(grid.seeds)
        for r in grid.variants.values()
    )
    assert len(runs) == expected
    assert len({r.run_id for r in runs}) == len(runs)
    for r in runs:
        assert r.run_id == f"{grid.name}:{r.size}:{r.variant}:s{r.seed}:{r.budget_tokens}"
        assert r.corpus.startswith("hf:") or r.corpus.startswith("/")
        assert r.role == grid.variants[r.variant]
    # Every treatment/control run has its parent at the same size, budget and seed.
    keys = {(r.size, r.budget_tokens, r.seed) for r in runs if r.role == "parent"}
    for r in runs:
        if r.role in ("treatment", "control"):
            assert (r.size, r.budget_tokens, r.seed) in keys


def test_rd_controls_small_is_the_cpu_grid():
    grid = load_grid(ROOT / "ablations/rd_controls_small.toml")
    runs = grid.expand()
    assert len(runs) == 18  # 6 variants x 3 seeds
    assert {r.size for r in runs} == {"small"}
    assert sorted({r.variant for r in runs}) == sorted(
        ["block_attnres", "rd_attnres", "param_matched", "dup_route", "fixed_v", "dup_route_tied"]
    )
    assert runs[0].corpus == str(ROOT.parent / "shared/data/fineweb_edu_sample")  # the sample, from any cwd
    for r in runs:
        r.check_trainable()  # a whole number of global batches


@pytest.mark.parametrize(
    "name, seeds, budget", [("rd_controls_mini", 3, 491_520), ("rd_cpu_study", 8, 614_400)]
)
def test_the_demo_and_the_study_train_mini_without_repeating_data(name, seeds, budget):
    """The demo (make demo) and the first study: every variant at `mini`, whole global batches, one
    pass at most over the sample's train split (750k tokens at the 512-token BPE: no max_epochs)."""
    grid = load_grid(ROOT / f"ablations/{name}.toml")
    runs = grid.expand()
    assert (
        len(runs) == 6 * seeds
        and {r.size for r in runs} == {"mini"}
        and {r.budget_tokens for r in runs} == {budget}
    )
    assert sorted({r.variant for r in runs}) == sorted(
        ["block_attnres", "rd_attnres", "param_matched", "dup_route", "fixed_v", "dup_route_tied"]
    )
    for r in runs:
        r.check_trainable()
        assert r.train_config().max_epochs == 0 and budget < 750_000


def test_rd_paper_controls_only_at_the_early_budget():
    grid = load_grid(ROOT / "ablations/rd_paper.toml")
    runs = grid.expand()
    by = {(r.role, r.budget_tokens) for r in runs}
    early, full = 476 * 524_288, 3814 * 524_288  # ~250M and ~2.0B tokens in whole global batches
    assert ("control", full) not in by
    assert {
        ("control", early),
        ("parent", early),
        ("parent", full),
        ("treatment", early),
        ("treatment", full),
    } <= by
    # per size: 2 variants x 5 seeds x 2 budgets + 4 controls x 5 seeds = 40
    assert len(runs) == 80
    assert sum(r.budget_tokens == full and r.size == "343m" for r in runs) == 10
    for r in runs:
        r.check_trainable()


# ----------------------------------------------------------------------------- expansion


def test_expansion_order_and_contents(tmp_path):
    grid = load_grid(write(tmp_path, GOOD + '\n[train]\nlr = 1e-3\n'))
    runs = grid.expand(cwd="/data/root")
    ids = [r.run_id for r in runs]
    assert ids == [
        "g:tiny:block_attnres:s0:1000",
        "g:tiny:rd_attnres:s0:1000",
        "g:tiny:fixed_v:s0:1000",
        "g:tiny:block_attnres:s1:1000",
        "g:tiny:rd_attnres:s1:1000",
        "g:tiny:fixed_v:s1:1000",
    ]
    assert runs[2].to_dict() == {
        "run_id": "g:tiny:fixed_v:s0:1000",
        "grid": "g",
        "variant": "fixed_v",
        "role": "control",
        "size": "tiny",
        "seed": 0,
        "budget_tokens": 1000,
        "corpus": "/data/root/data/corpus.jsonl",
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


def test_budgets_ascending_and_role_restrictions(tmp_path):
    text = GOOD.replace("budgets_tokens = [1000]", "budgets_tokens = [5000, 1000]").replace(
        'sizes = ["tiny"]', 'sizes = ["tiny", "small"]'
    )
    text += '\n[budgets_by_role]\ncontrol = [1000]\n[sizes_by_role]\ncontrol = ["small"]\n'
    runs = load_grid(write(tmp_path, text)).expand(cwd="/x")
    cells = [(r.size, r.budget_tokens, r.variant, r.seed) for r in runs]
    expected = []
    for size, budget, seed in itertools.product(["tiny", "small"], [1000, 5000], [0, 1]):
        for v in ("block_attnres", "rd_attnres", "fixed_v"):
            if v == "fixed_v" and (size != "small" or budget != 1000):
                continue
            expected.append((size, budget, v, seed))
    assert cells == expected
    assert len(runs) == 2 * 2 * 2 * 2 + 2


def test_corpus_override(tmp_path):
    grid = load_grid(write(tmp_path, GOOD))
    assert {r.corpus for r in grid.expand(corpus="hf:a/b:c")} == {"hf:a/b:c"}
    assert {r.corpus for r in grid.expand(corpus="other.txt", cwd="/q")} == {"/q/other.txt"}


def test_a_grids_relative_corpus_is_relative_to_its_file(tmp_path, monkeypatch):
    """The grid's own corpus resolves against the grid file's folder, whatever the cwd; an
    override (--corpus, $HARNESS_CORPUS) against the cwd (issue 31)."""
    (tmp_path / "grids").mkdir()
    grid = load_grid(write(tmp_path / "grids", GOOD.replace("data/corpus.jsonl", "../data/corpus.jsonl")))
    for cwd in (tmp_path, tmp_path / "grids", Path("/")):
        monkeypatch.chdir(cwd)
        assert {r.corpus for r in grid.expand()} == {str(tmp_path / "data/corpus.jsonl")}
        assert {r.corpus for r in grid.expand(corpus="c.jsonl")} == {str(cwd / "c.jsonl")}
    monkeypatch.chdir(tmp_path)
    relative = load_grid(Path("grids/grid.toml"))  # a relative grid path too
    assert {r.corpus for r in relative.expand()} == {str(tmp_path / "data/corpus.jsonl")}


def test_a_grid_chooses_its_corpus_by_the_one_precedence(tmp_path, monkeypatch):
    """Grid.choose_corpus (queue, tune): --corpus, else $HARNESS_CORPUS (both against the cwd), else the
    grid's own (against its file's folder), each named as the source."""
    (tmp_path / "grids").mkdir()
    grid = load_grid(write(tmp_path / "grids", GOOD.replace("data/corpus.jsonl", "../data/corpus.jsonl")))
    monkeypatch.chdir(tmp_path / "grids")
    monkeypatch.delenv("HARNESS_CORPUS", raising=False)
    own = (str(tmp_path / "data/corpus.jsonl"), f"key 'corpus' of {grid.path}")
    assert grid.choose_corpus(None) == own
    monkeypatch.setenv("HARNESS_CORPUS", "env.jsonl")
    assert grid.choose_corpus(None) == (str(tmp_path / "grids/env.jsonl"), "$HARNESS_CORPUS")
    assert grid.choose_corpus("cli.jsonl") == (str(tmp_path / "grids/cli.jsonl"), "--corpus")
    assert grid.choose_corpus("hf:a/b:c") == ("hf:a/b:c", "--corpus")
    # the queue expands the grid with what it chose: the same absolute path in every run
    monkeypatch.delenv("HARNESS_CORPUS")
    assert {r.corpus for r in grid.expand(corpus=grid.choose_corpus(None)[0])} == {own[0]}


def test_a_grid_copied_to_another_folder_keeps_naming_its_corpus(tmp_path):
    """--write-grid NEW.toml from a grid in another folder rewrites a relative corpus."""
    from harness.scheduling.grids.edit import write_train

    (tmp_path / "a").mkdir()
    (tmp_path / "b/c").mkdir(parents=True)
    source = write(tmp_path / "a", "# the grid\n" + GOOD.replace("data/corpus.jsonl", "../data/corpus.jsonl"))
    target = tmp_path / "b/c/new.toml"
    changes = write_train(target, {"lr": 1e-3}, source=source, name="new")
    assert changes == [
        "name: 'g' -> 'new'",
        "corpus: '../data/corpus.jsonl' -> '../../data/corpus.jsonl'",
        "train.lr: '(unset)' -> 0.001",
    ]
    new = load_grid(target)
    assert (new.name, new.train) == ("new", {"lr": 1e-3}) and target.read_text().startswith("# the grid")
    assert (
        {r.corpus for r in new.expand()}
        == {r.corpus for r in load_grid(source).expand()}
        == {str(tmp_path / "data/corpus.jsonl")}
    )
    assert load_grid(source).name == "g" and "lr" not in source.read_text()  # the source is left as it was


def test_run_id_format():
    assert (
        run_id("rd_controls_small", "small", "rd_attnres", 0, 200000)
        == "rd_controls_small:small:rd_attnres:s0:200000"
    )


def test_variants_come_from_the_model_registry():
    names = available_variants()
    for v in (
        "prenorm",
        "full_attnres",
        "block_attnres",
        "rd_attnres",
        "param_matched",
        "dup_route",
        "dup_route_tied",
        "fixed_v",
    ):
        assert v in names


# ----------------------------------------------------------------------------- errors


BAD = {
    "unknown variant": (
        GOOD.replace('fixed_v = "control"', 'fixed_vv = "control"'),
        ["variants.fixed_vv", "unknown variant 'fixed_vv'", "rd_attnres"],
    ),
    "unknown role": (
        GOOD.replace('fixed_v = "control"', 'fixed_v = "controls"'),
        ["variants.fixed_v", "'controls'", "parent, treatment, control, reference"],
    ),
    "no parent": (
        GOOD.replace('block_attnres = "parent"', 'block_attnres = "reference"'),
        ["variants", "exactly one variant must have role 'parent'", "found none"],
    ),
    "two parents": (
        GOOD.replace('fixed_v = "control"', 'fixed_v = "parent"'),
        ["variants", "found 2: block_attnres, fixed_v"],
    ),
    "treatment without parent at its size": (
        GOOD.replace('sizes = ["tiny"]', 'sizes = ["tiny", "small"]')
        + '\n[sizes_by_role]\nparent = ["tiny"]\n',
        ["sizes_by_role", "treatment 'rd_attnres' runs at size 'small'", "parent 'block_attnres' does not"],
    ),
    "control without parent at its budget": (
        GOOD.replace("[1000]", "[1000, 2000]") + '\n[budgets_by_role]\nparent = [2000]\n',
        ["budgets_by_role", "runs at budget 1000"],
    ),
    "negative budget": (
        GOOD.replace("[1000]", "[-1000]"),
        ["budgets_tokens", "-1000 is not allowed", "positive integers"],
    ),
    "zero budget": (GOOD.replace("[1000]", "[0]"), ["budgets_tokens", "0 is not allowed"]),
    "float budget": (
        GOOD.replace("[1000]", "[2e9]"),
        ["budgets_tokens", "2000000000.0 is a float", "2_000_000_000"],
    ),
    "negative seed": (GOOD.replace("[0, 1]", "[0, -1]"), ["seeds", "-1 is not allowed", "non-negative"]),
    "seed not a list": (GOOD.replace("[0, 1]", '"0"'), ["seeds", "non-empty list"]),
    "duplicate seed": (GOOD.replace("[0, 1]", "[1, 1]"), ["seeds", "duplicate"]),
    "unknown size": (GOOD.replace('["tiny"]', '["huge"]'), ["sizes", "'huge'", ", ".join(SIZES)]),
    "unknown key": (
        GOOD.replace('name = "g"', 'name = "g"\nbudget = 5'),
        ["budget", "unknown key 'budget'", "budgets_tokens"],
    ),
    "missing key": (GOOD.replace('corpus = "data/corpus.jsonl"\n', ""), ["corpus", "missing required key"]),
    "bad name": (GOOD.replace('name = "g"', 'name = "a:b"'), ["name", "no ':'"]),
    "unknown train key": (
        GOOD + "\n[train]\nlearning_rate = 1e-3\n",
        ["train.learning_rate", "unknown key", "lr"],
    ),
    "bad train type": (GOOD + '\n[train]\nbatch_tokens = "big"\n', ["train.batch_tokens", "not an int"]),
    "bad train value": (GOOD + '\n[train]\nschedule = "linear"\n', ["train", "schedule", "'cosine', 'wsd'"]),
    "budgets_by_role not a subset": (
        GOOD + "\n[budgets_by_role]\ncontrol = [999]\n",
        ["budgets_by_role.control", "999", "budgets_tokens [1000]"],
    ),
    "budgets_by_role unknown role": (
        GOOD + "\n[budgets_by_role]\ncontrols = [1000]\n",
        ["budgets_by_role.controls", "unknown role"],
    ),
    "duplicate variant key": (
        GOOD + 'fixed_v = "reference"\n',
        ["line 11", "duplicate key 'fixed_v'", "once"],
    ),
    "table declared twice": (
        GOOD + '\n[variants]\nprenorm = "reference"\n',
        ["line 12", "table [variants] declared twice"],
    ),
    "bad analysis value": (
        GOOD + "\n[analysis]\nreproduce_fraction = 1.5\n",
        ["analysis.reproduce_fraction", "out of range", "0 < rho < 1"],
    ),
    "unknown analysis key": (GOOD + "\n[analysis]\nlevel = 0.05\n", ["analysis.level", "unknown key"]),
    "non-TOML file": ('{"name": "g", "seeds": [0]}\n', ["not valid TOML", "line 1"]),
}


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_malformed_grid_errors_name_file_and_key(tmp_path, case):
    text, needles = BAD[case]
    path = write(tmp_path, text)
    with pytest.raises(ValueError) as info:
        load_grid(path)
    msg = str(info.value)
    assert msg.startswith(str(path)), msg
    for needle in needles:
        assert needle in msg, (needle, msg)


def test_binary_file_is_not_toml(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(ValueError, match="not a TOML grid file"):
        load_grid(path)


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.toml"):
        load_grid(tmp_path / "nope.toml")


def test_roles_constant_matches_design():
    assert ROLES == ("parent", "treatment", "control", "reference")


def test_run_id_agrees_with_the_runner():
    from harness.design.config import RunConfig

    runner_id = RunConfig.adhoc("fixed_v", "tiny", 3, 1000, "/c", grid="g").run_id
    assert runner_id == run_id("g", "tiny", "fixed_v", 3, 1000) == "g:tiny:fixed_v:s3:1000"


def test_a_variant_whose_head_groups_cannot_split_a_size_is_refused_at_queue_time(
    tmp_path, thirds_spec, capsys
):
    """Three equal head groups cannot split the 2 heads of `tiny`: `harness queue` says so and
    queues nothing (before RunConfig, the grid was queued and every worker failed on it)."""
    from harness.cli import main as cli

    (tmp_path / "corpus.txt").write_text("text")
    grid = write(
        tmp_path,
        GOOD.replace("data/corpus.jsonl", str(tmp_path / "corpus.txt")).replace(
            'fixed_v = "control"', f'{thirds_spec} = "control"'
        ),
    )
    results = tmp_path / "results"
    assert cli(["queue", str(grid), "--results", str(results)]) == 2
    err = capsys.readouterr().err
    assert "harness queue: error: variant 'thirds' at size 'tiny': " in err and "cannot split 2" in err
    assert "Traceback" not in err and not (results / "queue.journal").exists()
