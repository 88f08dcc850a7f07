"""DESIGN section 2-4 identities, pinned by numbers (max abs diff <= 1e-6 in float32)."""

from __future__ import annotations

import math
import tomllib
import zlib
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from harness.models import available_variants, build_model, count_params, get_spec, routing_diagnostics
from harness.models.sizes import derive, get_size
from harness.models.spec import parse_spec

TOL = 1e-6
BLOCK_VARIANTS = [v for v in available_variants() if get_spec(v).residual == "block"]
PARENT = "block_attnres"
AA_CHECK = "dup_route_tied"
CONTROLS = [v for v in BLOCK_VARIANTS if get_spec(v).role == "control" and v != AA_CHECK]
# the canonical degenerate control (DESIGN section 3): the symmetric, averaged dup_route
SYMMETRIC_DUP = parse_spec(
    tomllib.loads((Path(__file__).parents[1] / "specs" / "dup_route_avg.toml").read_text())
)

# (size, model overrides). The presets' blocks have 2 sublayers; blocks of 4 and 6 make
# attention sites route over an in-progress partial block (DESIGN section 3).
CONFIGS = {
    "tiny": ("tiny", {}),
    "small": ("small", {}),
    "tiny-L4-block4": ("tiny", {"n_layers": 4, "block_size": 4}),
    "tiny-L5-block6": ("tiny", {"n_layers": 5, "block_size": 6}),
}
configs = pytest.mark.parametrize("config", list(CONFIGS))


def build(variant, config: str, seed: int):
    size, overrides = CONFIGS[config]
    return build_model(variant, size, seed=seed, **overrides)


def tokens(size: str, B: int = 2, seed: int = 123) -> torch.Tensor:
    size = CONFIGS.get(size, (size, {}))[0]
    cfg = derive(size)
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, cfg.vocab_size, (B, min(cfg.context, 64)), generator=g)


def randomize_queries(model: torch.nn.Module, seed: int, scale: float = 1.0) -> None:
    """Give every pseudo-query (parameter or buffer) a random value keyed by its name: the same in every
    process (CRC-32 of seed and name; Python's ``hash`` of a string changes with each process's
    PYTHONHASHSEED, and one draw in about a hundred left a perturbation below the tests' 1e-4)."""
    with torch.no_grad():
        for name, t in list(model.named_parameters()) + list(model.named_buffers()):
            leaf = name.rsplit(".", 1)[-1]
            if leaf.startswith("w_"):
                g = torch.Generator().manual_seed(zlib.crc32(f"{seed}:{name}".encode()))
                t.copy_(torch.randn(t.shape, generator=g) * scale)


def copy_shared(src: torch.nn.Module, dst: torch.nn.Module) -> None:
    """Copy every tensor of ``src`` whose name ``dst`` also has."""
    dst_state = dst.state_dict()
    with torch.no_grad():
        for name, value in src.state_dict().items():
            if name in dst_state:
                dst_state[name].copy_(value)


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


def train_steps(
    model: torch.nn.Module, steps: int, lr: float, probe: torch.Tensor | None = None
) -> list[torch.Tensor]:
    """``steps`` AdamW steps (no weight decay) on fixed random batches (the same for every
    model); returns the logits on ``probe`` (default: the first batch) after each step."""
    g = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, model.cfg.vocab_size, (4, 33), generator=g) for _ in range(steps)]
    probe = batches[0][:, :-1] if probe is None else probe
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    out = []
    for x in batches:
        loss = F.cross_entropy(model(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            out.append(model(probe))
    return out


def test_core_variants_exist():
    assert set(available_variants()) >= {
        "prenorm",
        "full_attnres",
        "block_attnres",
        "rd_attnres",
        "param_matched",
        "dup_route",
        "dup_route_tied",
        "fixed_v",
        "query_reparam",
    }
    assert get_spec(PARENT).role == "parent" and get_spec("rd_attnres").role == "treatment"
    for v in ("param_matched", "dup_route", "dup_route_tied", "fixed_v", "query_reparam"):
        assert get_spec(v).role == "control"
        assert "controls" in get_spec(v).source  # controls are specs in controls/, not model code


@configs
@pytest.mark.parametrize("variant", BLOCK_VARIANTS + [SYMMETRIC_DUP])
def test_every_variant_equals_parent_at_init(config, variant):
    x = tokens(config)
    ref = build(PARENT, config, seed=0)(x)
    out = build(variant, config, seed=0)(x)
    assert out.shape == (x.shape[0], x.shape[1], derive(CONFIGS[config][0]).vocab_size)
    assert max_diff(out, ref) <= TOL


def test_prenorm_and_full_differ_from_parent_but_run():
    """References are different architectures: they must NOT silently equal the parent."""
    x = tokens("tiny")
    ref = build_model(PARENT, "tiny", seed=0)(x)
    for v in ("prenorm", "full_attnres"):
        out = build_model(v, "tiny", seed=0)(x)
        assert torch.isfinite(out).all()
        assert max_diff(out, ref) > 1e-3


@configs
def test_rd_with_tied_value_query_equals_parent_forward_and_grads(config):
    x = tokens(config)
    parent = build(PARENT, config, seed=1)
    rd = build("rd_attnres", config, seed=1)
    randomize_queries(parent, seed=7)
    copy_shared(parent, rd)
    with torch.no_grad():
        for l, layer in enumerate(rd.layers[1:], start=1):  # layer 0's site has no queries
            layer.attn_route.w_v.copy_(parent.layers[l].attn_route.w_qk)
    # the random queries must actually change the model, or the identity is vacuous
    assert max_diff(parent(x), build(PARENT, config, seed=1)(x)) > 1e-3
    out_p, out_r = parent(x), rd(x)
    assert max_diff(out_p, out_r) <= TOL
    out_p.float().square().mean().backward()
    out_r.float().square().mean().backward()
    rd_params = dict(rd.named_parameters())
    checked = 0
    for name, p in parent.named_parameters():
        if name.rsplit(".", 1)[-1].startswith("w_"):
            continue
        assert p.grad is not None, name  # every parameter gets a gradient (DESIGN section 11)
        assert max_diff(p.grad, rd_params[name].grad) <= TOL, name
        checked += 1
    assert checked >= 7 * len(rd.layers)
    # the parent's w_qk gradient is split between rd's two queries (chain rule)
    for l in range(1, len(rd.layers)):  # layer 0 routes over one source: it has no queries
        g_parent = parent.layers[l].attn_route.w_qk.grad
        g_rd = rd.layers[l].attn_route.w_qk.grad + rd.layers[l].attn_route.w_v.grad
        assert max_diff(g_parent, g_rd) <= TOL


@pytest.mark.slow
@pytest.mark.parametrize("config", ["tiny", "tiny-L4-block4"])
def test_rd_with_w_v_the_same_parameter_as_w_qk_tracks_the_parent_over_20_steps(config):
    """With ``w_v`` literally ``w_qk`` (one parameter, one optimiser state), RD-AttnRes is
    the parent in exact arithmetic for every step. In float32 its gradients differ from the
    parent's by rounding (~1e-9, other summation order), which AdamW's normalisation lifts
    to a few 1e-6 in the logits; the same run with an untied ``w_v`` moves ~1e-3 away."""
    lr, steps = 1e-3, 20
    parent = train_steps(build(PARENT, config, seed=0), steps, lr)
    rd = build("rd_attnres", config, seed=0)
    for layer in rd.layers[1:]:  # layer 0's site routes over one source and has no queries
        layer.attn_route.w_v = layer.attn_route.w_qk  # the same Parameter object
    assert count_params(rd) == count_params(build(PARENT, config, seed=0))
    tied = train_steps(rd, steps, lr)
    untied = train_steps(build("rd_attnres", config, seed=0), steps, lr)
    track = [max_diff(a, b) for a, b in zip(parent, tied)]
    assert max(track) <= 2e-5, track
    assert max_diff(parent[-1], untied[-1]) >= 50 * max(track)


@pytest.mark.slow
@pytest.mark.parametrize("config", ["tiny", "tiny-L4-block4"])
def test_after_5_adamw_steps_every_control_differs_from_the_parent_and_the_aa_check_does_not(config):
    """A control that cannot leave the parent is not a control (DESIGN section 3)."""
    lr, steps = 3e-3, 5
    parent = train_steps(build(PARENT, config, seed=0), steps, lr)[-1]
    moved = {v: max_diff(train_steps(build(v, config, seed=0), steps, lr)[-1], parent) for v in CONTROLS}
    assert set(moved) >= {"param_matched", "dup_route", "fixed_v", "query_reparam"}
    assert min(moved.values()) > 1e-3, moved
    aa = max_diff(train_steps(build(AA_CHECK, config, seed=0), steps, lr)[-1], parent)
    assert aa <= 1e-4, aa  # float32 rounding lifted by AdamW (see the 20-step test), not a difference


@pytest.mark.slow
def test_dup_route_queries_get_their_own_gradients_and_the_symmetric_version_does_not():
    """New dup_route: each query has its own gradient from zero-init. The symmetric version
    (both routes averaged into every role) keeps w_qk == w_dup bitwise: it is the parent."""
    for spec, same in (("dup_route", False), (SYMMETRIC_DUP, True)):
        m = build(spec, "tiny-L4-block4", seed=0)
        train_steps(m, 3, 3e-3)
        for layer in m.layers[1:]:  # layer 0 routes over one source: it has no queries
            w_qk, w_dup = layer.attn_route.w_qk, layer.attn_route.w_dup
            if same:
                assert torch.equal(w_qk, w_dup), (spec, layer)
            else:
                assert max_diff(w_qk, w_dup) > 1e-4 and w_dup.abs().max() > 0, layer


@configs
def test_dup_route_tied_equals_parent_with_random_queries(config):
    x = tokens(config)
    parent = build(PARENT, config, seed=2)
    randomize_queries(parent, seed=3)
    tied = build("dup_route_tied", config, seed=2)
    copy_shared(parent, tied)
    assert max_diff(parent(x), build(PARENT, config, seed=2)(x)) > 1e-3
    assert max_diff(parent(x), tied(x)) <= TOL


@configs
@pytest.mark.parametrize(
    "variant, added, value, layers",
    [
        ("param_matched", "b_qk", 0.05, (1, -1)),  # norm(r0 + b) is not norm(r0)
        ("query_reparam", "w_extra", 0.5, (-1,)),
    ],
)
def test_control_with_its_added_vector_at_zero_equals_parent(config, variant, added, value, layers):
    """param_matched with b = 0 and query_reparam with w_extra = 0 are the parent; a
    non-zero value moves them away."""
    x = tokens(config)
    parent = build(PARENT, config, seed=4)
    randomize_queries(parent, seed=5)
    m = build(variant, config, seed=4)
    copy_shared(parent, m)  # the added vector keeps its zero init
    # layer 0's site routes over one source: it has no parameters (test_parameter_counts)
    assert all(float(getattr(l.attn_route, added).detach().abs().max()) == 0 for l in m.layers[1:])
    assert max_diff(parent(x), m(x)) <= TOL
    for l in layers:
        with torch.no_grad():
            getattr(m.layers[l].attn_route, added).fill_(value)
        assert max_diff(parent(x), m(x)) > 1e-4
        with torch.no_grad():
            getattr(m.layers[l].attn_route, added).zero_()


@configs
def test_dup_route_with_equal_queries_equals_parent(config):
    """Both head groups read the parent's route when w_dup = w_qk; the projections split
    per head group must give the parent's Q, K and V."""
    x = tokens(config)
    parent = build(PARENT, config, seed=6)
    randomize_queries(parent, seed=8)
    dup = build("dup_route", config, seed=6)
    copy_shared(parent, dup)
    with torch.no_grad():
        for l, layer in enumerate(dup.layers[1:], start=1):  # layer 0's site has no queries
            layer.attn_route.w_dup.copy_(parent.layers[l].attn_route.w_qk)
    assert max_diff(parent(x), dup(x)) <= TOL
    with torch.no_grad():
        dup.layers[-1].attn_route.w_dup.mul_(-1)
    assert max_diff(parent(x), dup(x)) > 1e-4


@pytest.mark.parametrize("size", ["tiny", "small", "120m"])
def test_parameter_counts(size):
    L, D = get_size(size).n_layers, get_size(size).d_model
    with torch.device("meta"):
        counts = {v: count_params(build_model_meta(v, size)) for v in BLOCK_VARIANTS}
    parent = counts[PARENT]
    # one [D] per layer after the first: layer 0's attention site routes over the embedding
    # alone and has no parameters (no query, key gain or offset could get a gradient there)
    for v in ("rd_attnres", "param_matched", "dup_route", "query_reparam"):
        assert counts[v]["total"] == parent["total"] + (L - 1) * D, v
        assert counts[v]["trainable"] == parent["trainable"] + (L - 1) * D, v
    assert counts["fixed_v"]["trainable"] == parent["trainable"]
    assert counts["dup_route_tied"] == parent


def build_model_meta(variant: str, size: str):
    """Structure only (no init) so that large presets count quickly."""
    from harness.models.gpt import DepthRoutedLM

    return DepthRoutedLM(derive(size), get_spec(variant))


def test_fixed_v_value_query_is_a_frozen_buffer():
    m = build_model("fixed_v", "tiny", seed=0)
    names = dict(m.named_buffers())
    assert "layers.1.attn_route.w_v" in names
    assert "layers.1.attn_route.w_v" not in dict(m.named_parameters())
    assert "layers.1.attn_route.w_v" in m.state_dict()


def test_parameter_names_found_by_role():
    names = {v: {n for n, _ in build_model(v, "tiny", seed=0).named_parameters()} for v in BLOCK_VARIANTS}
    assert "layers.1.attn_route.w_qk" in names[PARENT]
    assert "layers.1.attn_route.w_v" in names["rd_attnres"]
    assert "layers.1.attn_route.b_qk" in names["param_matched"]
    assert not any(n.startswith("layers.0.attn_route.") for v in BLOCK_VARIANTS for n in names[v])
    assert "layers.1.attn_route.w_extra" in names["query_reparam"]
    assert "layers.1.attn_route.w_dup" in names["dup_route"]
    assert "layers.1.mlp_route.w_mlp" in names[PARENT]
    assert "out_route.w_out" in names[PARENT]


@pytest.mark.slow
def test_same_seed_shared_parameters_bit_identical_and_seeds_differ():
    states = {v: build_model(v, "small", seed=11).state_dict() for v in available_variants()}
    parent = states[PARENT]
    shared_checked = 0
    for v, state in states.items():
        for name, value in state.items():
            if name in parent:
                assert torch.equal(value, parent[name]), (v, name)
                shared_checked += 1
    assert shared_checked > 8 * 20
    other = build_model(PARENT, "small", seed=12).state_dict()
    for name, value in parent.items():
        if value.std() > 0:  # random tensors (not the constant norms/queries) must differ
            assert not torch.equal(value, other[name]), name


def test_init_values_follow_the_scheme():
    m = build_model(PARENT, "small", seed=0)
    L = m.cfg.n_layers
    assert abs(m.tok_emb.weight.std().item() - 0.02) < 1e-3
    assert abs(m.layers[0].attn.proj.weight.std().item() - 0.02 / math.sqrt(2 * L)) < 5e-4
    assert m.lm_head.weight is m.tok_emb.weight


def test_value_route_learns_on_its_own():
    torch.manual_seed(0)
    m = build_model("rd_attnres", "tiny", seed=0)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    x = tokens("tiny", B=4)
    for _ in range(2):
        logits = m(x[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    for layer in m.layers[1:]:  # layer 0 routes over a single source: no gradient there
        w_qk, w_v = layer.attn_route.w_qk, layer.attn_route.w_v
        assert w_v.abs().max() > 0 and w_qk.abs().max() > 0
        assert max_diff(w_qk, w_v) > 1e-4


def test_fixed_v_buffer_does_not_train():
    m = build_model("fixed_v", "tiny", seed=0)
    opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-2)
    x = tokens("tiny", B=4)
    loss = m(x).float().logsumexp(-1).mean()
    loss.backward()
    opt.step()
    assert all(float(l.attn_route.w_v.abs().max()) == 0 for l in m.layers[1:])


def test_bad_variant_and_size_name_the_valid_ones():
    with pytest.raises(ValueError, match="valid variants: .*rd_attnres"):
        build_model("rd_atnres", "tiny", seed=0)
    with pytest.raises(ValueError, match="valid sizes: tiny, mini, small, 120m, 343m"):
        build_model("rd_attnres", "huge", seed=0)
    with pytest.raises(ValueError, match="unknown model override"):
        build_model("rd_attnres", "tiny", seed=0, width=3)


def test_bad_tokens_raise_clear_errors():
    m = build_model("rd_attnres", "tiny", seed=0)
    V = m.cfg.vocab_size
    with pytest.raises(ValueError, match=rf"token ids must be in \[0, {V}\), got min 0 and max {V}"):
        m(torch.tensor([[0, 1, V]]))
    with pytest.raises(ValueError, match="min -1"):
        m(torch.tensor([[-1, 1]]))
    with pytest.raises(ValueError, match="int64"):
        m(torch.tensor([[0.0, 1.0]]))
    with pytest.raises(ValueError, match="exceeds the context"):
        m(torch.zeros(1, m.cfg.context + 1, dtype=torch.long))


@pytest.mark.slow
def test_routing_diagnostics_shapes_and_values():
    x = tokens("small")
    rd = build_model("rd_attnres", "small", seed=0)
    L = rd.cfg.n_layers
    d0 = routing_diagnostics(rd, x)
    attn = d0.sites["attn"]
    assert set(attn.routes) == {"qk", "v"}
    S = int(attn.n_sources.max())
    assert attn.routes["qk"].shape == (L, S)
    # at init every route is uniform over its sources; the K and V routes coincide
    for row in range(L):
        n = int(attn.n_sources[row])
        assert torch.allclose(attn.routes["v"][row, :n], torch.full((n,), 1 / n))
        assert attn.entropy["v"][row].item() == pytest.approx(math.log(n), abs=1e-6)
        assert attn.eff_depth["qk"][row].item() == pytest.approx((n - 1) / 2, abs=1e-5)
    assert attn.js_qk_v.abs().max().item() <= 1e-7
    # with different queries the JS divergence is positive and matches a direct computation
    randomize_queries(rd, seed=9, scale=3.0)
    d1 = routing_diagnostics(rd, x)
    js = d1.sites["attn"].js_qk_v
    assert js[1:].min().item() > 1e-4 and js.max().item() <= math.log(2) + 1e-6
    assert d1.sites["attn"].js_qk_v_of_means[1:].max().item() <= js[1:].max().item() + 1e-6
    # per-token JS of the last layer recomputed from the captured weights by hand
    site = rd.layers[-1].attn_route
    site.capture = True
    rd(x)
    p, q = site.last_weights["qk"].double(), site.last_weights["v"].double()
    site.capture = False
    m_ = (p + q) / 2
    kl = lambda a, b: (torch.xlogy(a, a) - torch.xlogy(a, b)).sum(0)
    expected = (0.5 * kl(p, m_) + 0.5 * kl(q, m_)).mean().item()
    assert js[-1].item() == pytest.approx(expected, abs=1e-6)
    rows = d1.rows(tokens=1000)
    assert {r["site"] for r in rows} == {"attn", "mlp", "out"}
    assert all(r["tokens"] == 1000 for r in rows)
    # each (layer, site, route) distribution sums to one
    from collections import defaultdict

    sums = defaultdict(float)
    for r in rows:
        sums[(r["layer"], r["site"], r["route"])] += r["weight"]
    assert all(abs(s - 1) < 1e-5 for s in sums.values())


def test_prenorm_has_no_diagnostics():
    assert routing_diagnostics(build_model("prenorm", "tiny", seed=0), tokens("tiny")).sites == {}


def test_spec_validation_errors_name_the_key():
    base = {"name": "x", "residual": "block"}
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['colour'\]"):
        parse_spec({**base, "colour": 1})
    with pytest.raises(ValueError, match="residual='deep'"):
        parse_spec({"name": "x", "residual": "deep"})
    bad_role = {
        "queries": {"w_qk": {}},
        "routes": {"qk": ["w_qk"]},
        "roles": {"q": ["qk"], "k": ["qk"], "v": ["zz"]},
    }
    with pytest.raises(ValueError, match="unknown route 'zz'"):
        parse_spec({**base, "attn": bad_role})
    q, r = {"w_qk": {}}, {"qk": ["w_qk"]}
    qkv = {"q": ["qk"], "k": ["qk"], "v": ["qk"]}
    cases = [
        (
            {"queries": q, "routes": r, "roles": qkv, "head_groups": [qkv, qkv]},
            r"needs exactly one of 'roles' or 'head_groups'",
        ),
        ({"queries": q, "routes": r, "head_groups": [qkv]}, r"at least two tables"),
        (
            {"queries": q, "routes": r, "head_groups": [qkv, {**qkv, "share": 0}]},
            r"#1 share=0: a positive integer",
        ),
        (
            {"queries": q, "routes": r, "head_groups": [qkv, {"q": ["qk"], "k": ["qk"]}]},
            r"#1 must define exactly \['q', 'k', 'v'\]",
        ),
        (
            {"queries": q, "offsets": {"x_qk": {}}, "routes": r, "roles": qkv},
            r"\[attn.offsets\] 'x_qk': names start with 'b_'",
        ),
        (
            {"queries": q, "offsets": {"b_qk": {}}, "routes": r, "roles": qkv},
            r"\['b_qk'\] declared but used by no route",
        ),
        (
            {"queries": q, "routes": {"qk": {"queries": ["w_qk"], "offset": "b_zz"}}, "roles": qkv},
            r"unknown offset 'b_zz'",
        ),
        (
            {"queries": q, "routes": {"qk": {"query": ["w_qk"]}}, "roles": qkv},
            r"a route table has keys 'queries' \(required\) and 'offset'",
        ),
        (
            {"queries": {"w_qk": "yes"}, "routes": r, "roles": qkv},
            r"w_qk = 'yes': use \{\} or \{ trainable = false \}",
        ),
    ]
    for attn, message in cases:
        with pytest.raises(ValueError, match=message):
            parse_spec({**base, "attn": attn})
    with pytest.raises(ValueError, match=r"\[mlp\] head_groups: only the attention site has heads"):
        parse_spec(
            {
                **base,
                "mlp": {
                    "queries": {"w_mlp": {}},
                    "routes": {"mlp": ["w_mlp"]},
                    "head_groups": [{"mlp": ["mlp"]}, {"mlp": ["mlp"]}],
                },
            }
        )


def test_head_groups_that_cannot_split_the_heads_are_one_clear_error(thirds_spec):
    from harness.design.config import RunConfig

    with pytest.raises(
        ValueError, match=r"variant 'thirds': head groups with shares \[1, 1, 1\] cannot split 2 "
    ):
        build_model("thirds", "tiny", seed=0)
    with pytest.raises(
        ValueError, match=r"variant 'thirds' at size 'tiny': .*cannot split 2 attention heads"
    ):
        RunConfig.create("thirds", "tiny", 0, 1000, "corpus")  # refused at queue time
    assert RunConfig.create("thirds", "120m", 0, 1000, "corpus").variant == "thirds"
    with torch.device("meta"):
        assert build_model_meta("thirds", "120m").layers[0].attn.head_ranges == [(0, 4), (4, 8), (8, 12)]


def test_new_control_is_just_a_spec(tmp_path):
    """q_kv (Q alone on its own route) is a new control with no model code."""
    spec = parse_spec(
        {
            "name": "q_kv",
            "residual": "block",
            "role": "control",
            "attn": {
                "queries": {"w_qk": {}, "w_q": {}},
                "routes": {"qk": ["w_qk"], "q": ["w_q"]},
                "roles": {"q": ["q"], "k": ["qk"], "v": ["qk"]},
            },
        }
    )
    m = build_model(spec, "tiny", seed=0)
    x = tokens("tiny")
    assert max_diff(m(x), build_model(PARENT, "tiny", seed=0)(x)) <= TOL
    # one w_q per layer after the first (layer 0's site routes over one source: no parameters)
    assert (
        count_params(m)["total"] == count_params(build_model(PARENT, "tiny", seed=0))["total"] + (2 - 1) * 64
    )


def test_diagnostics_over_batches_equal_one_concatenated_batch():
    rd = build_model("rd_attnres", "tiny", seed=0)
    randomize_queries(rd, seed=1, scale=2.0)
    x1, x2 = tokens("tiny", B=2, seed=1), tokens("tiny", B=3, seed=2)
    split = routing_diagnostics(rd, [x1, x2]).sites["attn"]
    whole = routing_diagnostics(rd, torch.cat([x1, x2])).sites["attn"]
    for r in ("qk", "v"):
        assert torch.allclose(split.routes[r], whole.routes[r], atol=1e-6, equal_nan=True)
        assert torch.allclose(split.token_entropy[r], whole.token_entropy[r], atol=1e-6)
    assert torch.allclose(split.js_qk_v, whole.js_qk_v, atol=1e-6)


@configs
@pytest.mark.parametrize("variant", [v for v in available_variants() if v != "prenorm"])
def test_every_trainable_parameter_gets_a_gradient(config, variant):
    """DDP without ``find_unused_parameters`` needs a gradient for every trainable parameter
    at every step (DESIGN section 11): no site keeps parameters a softmax over one source
    makes constant."""
    m = build(variant, config, seed=0)
    randomize_queries(m, seed=3)
    m(tokens(config)).float().square().mean().backward()
    missing = [n for n, p in m.named_parameters() if p.requires_grad and p.grad is None]
    assert not missing, missing


@pytest.mark.parametrize("variant", available_variants())
def test_every_variant_is_causal(variant):
    """Logits at positions < t do not depend on tokens at >= t (no leak through the depth routes,
    whose softmax runs over sources, never over positions): changing the tail leaves the head bit-identical."""
    model = build_model(variant, "mini", seed=0, vocab_size=512).eval()
    x = torch.randint(0, 512, (2, 64), generator=torch.Generator().manual_seed(0))
    tail = x.clone()
    tail[:, 40:] = torch.randint(0, 512, (2, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        a, b = model(x), model(tail)
    a, b = (a[0], b[0]) if isinstance(a, tuple) else (a, b)
    assert torch.equal(a[:, :40], b[:, :40])
    assert (a[:, 40:] - b[:, 40:]).abs().max() > 0.1  # the tail does change what follows it
