"""Composed variants and the ``[factorial]`` grid table (DESIGN section 12).

Identities pinned by numbers (float32, max abs difference <= 1e-6): ``rd_offset`` with its
offset at zero is ``rd_attnres``; with its value query equal to its QK query it is
``param_matched``; parameter counts add up. Grid checks: every bad table is one line naming
the key; the table is stored with the plan and fixed before the runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness.design.analysis_plan import plan_from_configs
from harness.design.factorial import Factorial, parse_factorial
from harness.models import build_model, count_params, get_spec
from harness.models.compose import compose
from harness.models.spec import parse_spec_text
from harness.scheduling.grids.grid import parse_grid

pytestmark = pytest.mark.own_cache  # its commands build their corpus in RESULTS/cache (conftest)

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT.parent / "shared" / "data" / "fineweb_edu_sample"
TOL = 1e-6
LEVELS = {"block_attnres": [0, 0], "param_matched": [1, 0], "rd_attnres": [0, 1], "rd_offset": [1, 1]}
VARIANTS = {
    "block_attnres": "parent",
    "rd_attnres": "treatment",
    "param_matched": "control",
    "rd_offset": "reference",
}


def grid_data(**factorial) -> dict:
    return {
        "name": "fg",
        "corpus": str(CORPUS),
        "sizes": ["tiny"],
        "seeds": [0, 1, 2],
        "budgets_tokens": [4096],
        "variants": dict(VARIANTS),
        "factorial": {"factors": ["offset", "decoupled_v"], "levels": dict(LEVELS), **factorial},
    }


def trained(variant: str, steps: int = 4) -> torch.nn.Module:
    """A tiny model (4 layers, blocks of 4 sublayers) after a few AdamW steps on fixed batches."""
    model = build_model(variant, "tiny", seed=0, n_layers=4, block_size=4)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-2, weight_decay=0.0)
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        x = torch.randint(0, model.cfg.vocab_size, (4, 33), generator=g)
        logits = model(x[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model


def load_into(dst: torch.nn.Module, state: dict) -> None:
    """Copy every tensor of ``state`` that ``dst`` has; what ``dst`` alone has keeps its value."""
    own = dst.state_dict()
    with torch.no_grad():
        for name, value in state.items():
            if name in own:
                own[name].copy_(value)


def probe(model) -> torch.Tensor:
    g = torch.Generator().manual_seed(7)
    return model(torch.randint(0, model.cfg.vocab_size, (2, 32), generator=g))


def test_rd_offset_is_rd_attnres_plus_param_matched_offset():
    spec = get_spec("rd_offset")
    assert spec.base == "rd_attnres"
    attn = spec.sites["attn"]
    assert attn.route_offsets == {"qk": "b_qk", "v": "b_qk"}
    assert attn.routes == get_spec("rd_attnres").sites["attn"].routes
    assert attn.groups == get_spec("rd_attnres").sites["attn"].groups
    assert attn.offsets == get_spec("param_matched").sites["attn"].offsets


@pytest.mark.parametrize("size", ["tiny", "mini", "small"])
def test_composed_parameter_counts_add_up(size):
    def extra(v):
        return count_params(build_model(v, size, seed=0))["total"] - parent

    parent = count_params(build_model("block_attnres", size, seed=0))["total"]
    assert extra("rd_offset") == extra("rd_attnres") + extra("param_matched") > 0


@pytest.mark.slow
def test_rd_offset_with_zero_offset_equals_rd_attnres():
    """The composition's identity: a zero addition is the base (trained weights, b = 0)."""
    rd = trained("rd_attnres")
    composed = build_model("rd_offset", "tiny", seed=0, n_layers=4, block_size=4)
    load_into(composed, rd.state_dict())
    offsets = [t for n, t in composed.named_parameters() if n.endswith("b_qk")]
    assert offsets and all(torch.count_nonzero(b) == 0 for b in offsets)
    assert (probe(composed) - probe(rd)).abs().max().item() <= TOL


@pytest.mark.slow
def test_rd_offset_with_tied_value_query_equals_param_matched():
    """With w_v = w_qk both routes are r0 + b: RD-with-offset computes param_matched."""
    pm = trained("param_matched")
    composed = build_model("rd_offset", "tiny", seed=0, n_layers=4, block_size=4)
    state = pm.state_dict()
    state.update({n.replace("w_qk", "w_v"): t for n, t in state.items() if n.endswith("w_qk")})
    load_into(composed, state)
    assert any(n.endswith("w_v") for n in state)
    assert (probe(composed) - probe(pm)).abs().max().item() <= TOL


@pytest.mark.slow
def test_after_training_rd_offset_differs_from_both_of_its_parts():
    composed = trained("rd_offset")
    for part in ("rd_attnres", "param_matched"):
        other = build_model(part, "tiny", seed=0, n_layers=4, block_size=4)
        load_into(other, composed.state_dict())
        assert (probe(composed) - probe(other)).abs().max().item() > 1e-3, part


BASE = {
    "name": "b",
    "residual": "block",
    "attn": {
        "queries": {"w_qk": {}},
        "routes": {"qk": ["w_qk"]},
        "roles": {"q": ["qk"], "k": ["qk"], "v": ["qk"]},
    },
}


@pytest.mark.parametrize(
    ("additions", "message"),
    [
        ({"residual": "full"}, "unknown key(s) ['residual'] in a composed spec"),
        ({"attn": {"queries": {"w_qk": {}}}}, "[attn.queries] 'w_qk' is already defined by the base"),
        ({"attn": {"offsets": {"b_x": {}}, "route_offsets": {"nope": "b_x"}}}, "'nope' is not a route"),
        ({"attn": {"colour": 1}}, "[attn] unknown key(s) ['colour']"),
        ({"attn": {"route_offsets": {"qk": 3}}}, "give an offset name"),
    ],
)
def test_composition_errors_name_the_key(additions, message):
    with pytest.raises(ValueError) as err:
        compose(BASE, {"name": "c", "base": "b", **additions}, where="c.toml")
    assert message in str(err.value) and str(err.value).startswith("c.toml: ")


def test_a_route_gets_one_offset_only():
    once = compose(
        BASE, {"name": "c", "base": "b", "attn": {"offsets": {"b_1": {}}, "route_offsets": {"qk": "b_1"}}}
    )
    with pytest.raises(ValueError, match="'qk' already has offset 'b_1'"):
        compose(
            once, {"name": "d", "base": "c", "attn": {"offsets": {"b_2": {}}, "route_offsets": {"qk": "b_2"}}}
        )


def run_python(code: str, spec_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HARNESS_SPEC_PATH": str(spec_path)}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT)


def test_user_composed_spec_is_self_contained_and_bad_bases_are_one_line(tmp_path):
    """A composed user spec (on $HARNESS_SPEC_PATH) travels to a worker as its merged text,
    which parses alone to the same spec; an unknown base and a cycle are refused by name."""
    (tmp_path / "pm_v.toml").write_text(
        'name = "pm_v"\nbase = "param_matched"\n[attn.queries]\nw_v = {}\n[attn.routes]\nv = ["w_v"]\n'
        '[attn.roles]\nq = ["qk"]\nk = ["qk"]\nv = ["v"]\n'
    )
    code = (
        "from harness.models import get_spec\nfrom harness.models.spec import parse_spec_text\n"
        "s = get_spec('pm_v'); t = parse_spec_text(s.text)\n"
        "print(s.sites == t.sites, s.base, sorted(s.sites['attn'].routes), s.sites['attn'].route_offsets)"
    )
    out = run_python(code, tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "param_matched", "['qk',", "'v']", "{'qk':", "'b_qk'}"]
    (tmp_path / "loop_a.toml").write_text('name = "loop_a"\nbase = "loop_b"\n')
    (tmp_path / "loop_b.toml").write_text('name = "loop_b"\nbase = "loop_a"\n')
    out = run_python("from harness.models import get_spec\nget_spec('pm_v')", tmp_path)
    assert "composes a cycle: loop_a -> loop_b -> loop_a" in out.stderr
    (tmp_path / "loop_b.toml").write_text('name = "loop_b"\nbase = "nosuch"\n')
    (tmp_path / "loop_a.toml").unlink()
    out = run_python("from harness.models import get_spec\nget_spec('pm_v')", tmp_path)
    assert "base 'nosuch' is not a variant" in out.stderr


@pytest.mark.parametrize("base", ['["rd_attnres"]', "1", '{ name = "rd_attnres" }'])
def test_a_base_that_is_not_a_variant_name_is_one_line(tmp_path, base):
    """Issue 45 row 6: ``base = ["rd_attnres"]`` was ``TypeError: unhashable type: 'list'``."""
    (tmp_path / "lst.toml").write_text(f'name = "lst"\nbase = {base}\n')
    out = subprocess.run(
        [sys.executable, "-m", "harness", "sizes", "--results", str(tmp_path)],
        env={**os.environ, "HARNESS_SPEC_PATH": str(tmp_path)},
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    err = out.stderr.strip()
    assert out.returncode == 2 and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert "lst.toml: base = " in err and 'must be one variant name, e.g. base = "rd_attnres"' in err


def test_parse_spec_text_of_a_shipped_composed_spec_round_trips():
    spec = get_spec("rd_offset")
    again = parse_spec_text(spec.text)
    assert again.sites == spec.sites and again.residual == spec.residual


# ----------------------------------------------------------------------------- [factorial]


def test_factorial_table_parses_into_the_plan_and_round_trips():
    grid = parse_grid(grid_data(), path="fg.toml")
    fac = grid.analysis.factorial
    assert fac == Factorial(("offset", "decoupled_v"), tuple((v, tuple(lv)) for v, lv in LEVELS.items()))
    assert fac.variant(1, 1) == "rd_offset" and fac.variant(0, 0) == "block_attnres"
    stored = grid.analysis.as_config()
    assert stored["factorial"] == {"factors": ["offset", "decoupled_v"], "levels": LEVELS}
    assert plan_from_configs([json.dumps({"analysis": stored})]).factorial == fac


def test_a_grid_without_factorial_stores_the_plan_as_before():
    data = grid_data()
    del data["factorial"]
    assert "factorial" not in parse_grid(data, path="fg.toml").analysis.as_config()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"factors": ["offset"]}, "factorial.factors: ['offset']; allowed: 2 distinct non-empty names"),
        ({"factors": ["a", "a"]}, "factorial.factors: ['a', 'a']"),
        (
            {"levels": {**LEVELS, "rd_offset": [1, 0]}},
            "factorial.levels.rd_offset: combination [1, 0] is already 'param_matched'",
        ),
        (
            {"levels": {**LEVELS, "rd_offset": [2, 1]}},
            "factorial.levels.rd_offset: [2, 1]; allowed: one level per factor, each 0 or 1",
        ),
        ({"levels": {**LEVELS, "rd_offset": [True, 1]}}, "factorial.levels.rd_offset: [True, 1]"),
        (
            {"levels": {k: v for k, v in LEVELS.items() if k != "rd_offset"}},
            "factorial.levels: no variant at combination(s) [[1, 1]]",
        ),
        (
            {"levels": {**LEVELS, "dup_route": [1, 1]}},
            "factorial.levels.dup_route: 'dup_route' is not a variant of the grid",
        ),
        ({"colour": 1}, "factorial.colour: unknown key; allowed keys: factors"),
    ],
)
def test_bad_factorial_tables_are_one_line_naming_the_key(change, message):
    data = grid_data()
    data["factorial"] = {**data["factorial"], **change}
    with pytest.raises(ValueError) as err:
        parse_grid(data, path="fg.toml")
    assert str(err.value).startswith("fg.toml: ") and message in str(err.value), str(err.value)


def test_missing_factorial_key_and_non_table():
    with pytest.raises(ValueError, match="factorial.levels: missing"):
        parse_factorial({"factors": ["a", "b"]}, VARIANTS, where="g")
    with pytest.raises(ValueError, match="factorial: must be a table"):
        parse_factorial([1], VARIANTS, where="g")


def harness(*args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, capture_output=True, text=True)


@pytest.mark.parametrize(
    "key, table, cell",
    [
        ("budgets_by_role", {"reference": [4096]}, "budget 2048"),
        ("budgets_by_role", {"control": [2048]}, "budget 4096"),
        ("sizes_by_role", {"reference": ["tiny"]}, "size 'small'"),
    ],
)
def test_a_factorial_variant_left_out_of_a_cell_is_refused_in_one_line(key, table, cell):
    """Issue 45 row 5: the grid was queued and its report said "interaction not tested"."""
    data = {**grid_data(), "budgets_tokens": [2048, 4096], "sizes": ["tiny", "small"], key: table}
    with pytest.raises(ValueError) as caught:
        parse_grid(data, path="fg.toml")
    msg = str(caught.value)
    assert msg.startswith(f"fg.toml: {key}: the factorial variant ") and f"does not run at {cell}," in msg
    assert "every factorial variant must run in every cell the factorial covers" in msg and "\n" not in msg
    parse_grid({**data, key: {}}, path="fg.toml")  # every variant in every cell: accepted


@pytest.mark.slow
def test_queue_stores_the_factorial_and_refuses_a_changed_one(tmp_path):
    """`harness queue` checks [factorial] in one line (exit 2, no traceback), stores it with the
    plan in every run, and refuses to re-queue the grid with another design."""
    text = (
        f'name = "fg"\ncorpus = "{CORPUS}"\nsizes = ["tiny"]\nseeds = [0, 1, 2]\nbudgets_tokens = [4096]\n'
        '[variants]\nblock_attnres = "parent"\nrd_attnres = "treatment"\nparam_matched = "control"\n'
        'rd_offset = "reference"\n[factorial]\nfactors = ["offset", "decoupled_v"]\n'
        "levels = { block_attnres = [0, 0], param_matched = [1, 0], rd_attnres = [0, 1], rd_offset = [1, 1] }\n"
    )
    grid = tmp_path / "fg.toml"
    grid.write_text(text.replace("rd_offset = [1, 1]", "rd_offset = [0, 1]"))
    bad = harness("queue", str(grid), "--results", str(tmp_path / "r"), cwd=tmp_path)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert (
        bad.stderr.strip()
        .splitlines()[-1]
        .endswith(
            "factorial.levels.rd_offset: combination [0, 1] is already 'rd_attnres'; each combination exactly once"
        )
    )
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())
    grid.write_text(text)
    ok = harness("queue", str(grid), "--results", str(tmp_path / "r"), cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    code = (
        "import sys, json; from harness.scheduling.queue.run_queue import RunQueue\n"
        "q = RunQueue.open(None, sys.argv[1], create=False)\n"
        "print(json.dumps([r.config.analysis.get('factorial') for r in q.runs('fg').values()]))"
    )
    stored = subprocess.run([sys.executable, "-c", code, str(tmp_path / "r")], capture_output=True, text=True)
    assert stored.returncode == 0, stored.stderr
    assert json.loads(stored.stdout) == [{"factors": ["offset", "decoupled_v"], "levels": LEVELS}] * 12
    grid.write_text(text.replace('factors = ["offset", "decoupled_v"]', 'factors = ["offset", "v_route"]'))
    again = harness("queue", str(grid), "--results", str(tmp_path / "r"), cwd=tmp_path)
    assert again.returncode != 0 and "analysis.factorial" in again.stderr, again.stderr
