"""Where a step-time ratio's time goes: a per-category profile of interleaved training steps.

``harness bench --profile K`` runs K more interleaved rounds of every arm inside one
``torch.profiler`` session, each step in its own ``record_function`` window, and sums the
*self* time of every operator and kernel whose start lies in the window: self CPU time on a
CPU, self device time (the kernels an operator launched) on CUDA. Each name goes to the first
:data:`CATEGORIES` rule it matches. The names are what make this work under ``--compile``:
Inductor names each fused kernel after the aten operators it fuses (e.g.
``cpp_fused__softmax__unsafe_view_add_addcmul_mean_mul_mv_pow_rsqrt...``, one routing site's
logits, softmax over the sources and mix), and on a CPU the kernels are only visible to the
profiler with ``torch._inductor.config.cpp.enable_kernel_profile`` on, which
:func:`kernel_profiling` sets while the models compile (the profiler is off during timing, so
the marks cost a callback check per kernel). In eager mode element-wise operators (``aten::mul``,
``aten::add``) cannot be told apart by name and fall into ``elementwise``.

For each step-time ratio ``a/b`` the result gives the profile's own ratio of total step time
and the excess ``t_a - t_b`` (ms per step) by category, each the median of one paired value
per round with its 95 % interval (as the timing, :mod:`harness.bench.intervals`: an
allocation's page faults land in whichever operator touches the memory first, and move one
round, not the median), and the operators with the largest
differences (kernel names with their graph and serial numbers removed, so the same kernel of
two variants' graphs lines up). The profiled rounds are few and the profiler itself adds time,
so the interleaved timing, not this profile, decides a goal; the profile says where the
difference sits.
"""

from __future__ import annotations

import bisect
import re
import statistics
from contextlib import contextmanager

from harness.bench import intervals
from harness.bench.settings import sync
from harness.bench.steps import quiet_stderr, round_order

#: ``(category, rule)`` in order; a name (lower-cased) goes to the first rule that matches.
#: ``ancestor:`` rules match a ``record_function`` scope enclosing the operator.
CATEGORIES: list[tuple[str, tuple[str, ...]]] = [
    ("optimizer", ("ancestor:optimizer.", "foreach", "linalg_vector_norm", "clip_grad")),
    ("graph overhead", ("compiledfxgraph", "torch-compiled region", "compiledfunction")),
    # autograd's own scopes (``LogSoftmaxBackward0``), before the rules their names would match
    ("autograd", ("autograd::engine", "regex:^(?!cpp_|triton_|graph_)\\w+backward\\d*$")),
    ("loss", ("log_softmax", "nll_loss", "cross_entropy")),
    ("attention", ("scaled_dot_product", "flash", "efficient_attention", "cudnn_attention")),
    (
        "matmul",
        (
            "aten::mm",
            "aten::addmm",
            "aten::bmm",
            "aten::baddbmm",
            "aten::linear",
            "aten::matmul",
            "gemm",
            "cutlass",
            "sm90_xmma",
            "ampere_",
        ),
    ),
    # two-phase routing (online softmax): amax, maximum and addcmul name its kernels; their backward
    # is named by select_backward (a source's row of the weights, e[i]) and reciprocal (1 / l), and
    # carries exp's neg, which rope's rule would match
    (
        "routing",
        (
            "softmax",
            "aten::mv",
            "aten::addmv",
            "_mv_",
            "aten::addcmul",
            "amax",
            "maximum",
            "addcmul",
            "select_backward",
            "_reciprocal",  # a kernel's name part: aten::reciprocal alone is also clip_grad's
        ),
    ),
    ("mlp", ("silu",)),
    ("rope", ("neg",)),
    ("norm", ("rsqrt", "rms_norm", "_pow_")),
    ("embedding", ("embedding",)),
    (
        "elementwise",
        (
            "aten::mul",
            "aten::add",
            "aten::sub",
            "aten::div",
            "aten::copy",
            "aten::fill",
            "aten::cat",
            "aten::clone",
            "aten::sum",
            "aten::mean",
            "aten::pow",
            "aten::rsqrt",
            "aten::zero",
            "aten::empty",
            "aten::to",
            "aten::_to_copy",
        ),
    ),
]
OTHER = "other"
WINDOW = "harness-bench-profile/"


def categorize(name: str, ancestors: tuple[str, ...] = ()) -> str:
    """The category of an operator or kernel ``name`` (first matching :data:`CATEGORIES` rule).

    ``ancestors``: names of the enclosing profiler scopes (innermost first); an ``ancestor:``
    rule also matches the name itself (the scope's own self time). An aten rule
    (``aten::mul``) matches the operator itself or its in-place and out variants
    (``aten::mul_``), not a longer name (``aten::mv`` is not ``aten::mvlgamma``).
    """
    low = name.lower()
    scopes = [low, *(a.lower() for a in ancestors)]
    for category, rules in CATEGORIES:
        for rule in rules:
            if rule.startswith("ancestor:"):
                if any(s.startswith(rule[len("ancestor:") :]) for s in scopes):
                    return category
            elif rule.startswith("regex:"):
                if re.search(rule[len("regex:") :], low):
                    return category
            elif rule.startswith("aten::"):
                if low == rule or low == rule + "_" or low.startswith(rule + "."):
                    return category
            elif rule in low:
                return category
    return OTHER


def kernel_name(name: str) -> str:
    """``name`` without Inductor's graph prefix and serial suffix (``graph_1_cpp_fused_x_7`` ->
    ``cpp_fused_x``), so one kernel of two variants' graphs has one name."""
    name = re.sub(r"^graph_\d+_", "", name)
    if name.startswith("## Call CompiledFxGraph"):
        return "## Call CompiledFxGraph ##"
    if name.startswith("Torch-Compiled Region"):  # ": 0/N", N the variant's compile number
        return "Torch-Compiled Region"
    return re.sub(r"_\d+$", "", name) if re.match(r"(cpp|triton)_", name) else name


@contextmanager
def kernel_profiling(on: bool):
    """While compiling: make Inductor's CPU kernels visible to the profiler (module docstring)."""
    if not on:
        yield
        return
    import torch._inductor.config as inductor_config  # lazy: only while profiling a compiled step

    old = inductor_config.cpp.enable_kernel_profile
    inductor_config.cpp.enable_kernel_profile = True
    try:
        yield
    finally:
        inductor_config.cpp.enable_kernel_profile = old


def profile_steps(arms, rounds: int) -> dict[str, dict]:
    """Profile ``rounds`` interleaved rounds of every arm (:class:`~harness.bench.steps.StepArm`).

    Returns ``{arm name: {"total_ms": float, "categories": {category: ms},
    "calls": {category: float}, "ops": {kernel_name: ms}, "op_calls": {kernel_name: float},
    "rounds": [{category: ms}, ...]}}``: means per step over the rounds (ms of self time,
    calls per step) of the operators that start inside the arm's step windows, and the
    categories of each round's step (for the paired comparison of :func:`compare`).

    Raises:
        ValueError: ``rounds < 1``.
    """
    from torch.autograd import DeviceType  # lazy: only while profiling

    if rounds < 1:
        raise ValueError(f"profile rounds={rounds} must be >= 1")
    cuda = arms[0].device.type == "cuda"
    events = _profiled_events(arms, rounds)
    # windows by time, not by parent: on CUDA the backward runs on autograd's device thread
    windows = sorted(
        (e.time_range.start, e.time_range.end, *map(int, e.name[len(WINDOW) :].split("/")))
        for e in events
        if e.name.startswith(WINDOW)
    )  # (start, end, arm, round)
    starts = [w[0] for w in windows]
    out = {
        arm.name: {
            "total_ms": 0.0,
            "categories": {},
            "calls": {},
            "ops": {},
            "op_calls": {},
            "rounds": [{} for _ in range(rounds)],
        }
        for arm in arms
    }
    for event in events:
        if event.name.startswith(WINDOW) or (cuda and event.device_type != DeviceType.CPU):
            continue  # kernels count through the CPU operator that launched them
        j = bisect.bisect_right(starts, event.time_range.start) - 1
        if j < 0 or event.time_range.start > windows[j][1]:
            continue  # between steps (the profiler's own start and stop)
        chain, parent = [], event.cpu_parent
        while parent is not None:
            chain.append(parent.name)
            parent = parent.cpu_parent
        us = event.self_device_time_total if cuda else event.self_cpu_time_total
        _, _, arm, r = windows[j]
        entry = out[arms[arm].name]
        category = categorize(event.name, tuple(chain))
        ms = us / 1e3 / rounds
        entry["total_ms"] += ms
        entry["categories"][category] = entry["categories"].get(category, 0.0) + ms
        entry["calls"][category] = entry["calls"].get(category, 0) + 1
        key = kernel_name(event.name)
        entry["ops"][key] = entry["ops"].get(key, 0.0) + ms
        entry["op_calls"][key] = entry["op_calls"].get(key, 0) + 1
        step = entry["rounds"][r]
        step[category] = step.get(category, 0.0) + us / 1e3
    for entry in out.values():  # counts per step: exact when every round makes the same calls
        for table in ("calls", "op_calls"):
            entry[table] = {k: n / rounds for k, n in entry[table].items()}
    return out


def _profiled_events(arms, rounds: int):
    """The profiler's events of ``rounds`` interleaved rounds of every arm, each step inside a window named
    ``WINDOW<arm>/<round>`` (CUDA activity too on a GPU)."""
    from torch.profiler import ProfilerActivity, profile, record_function  # lazy: only while profiling

    device = arms[0].device
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    prof = profile(activities=activities)
    with quiet_stderr():
        prof.start()
    try:
        for r in range(rounds):
            for i in round_order(len(arms), r):
                sync(device)
                with record_function(f"{WINDOW}{i}/{r}"):
                    arms[i].step()
                    sync(device)  # the step's kernels finish inside its window
    finally:
        with quiet_stderr():
            prof.stop()
    return prof.events()


def compare(profiles: dict[str, dict], pairs: dict[str, tuple[str, str]], top: int = 8) -> dict[str, dict]:
    """Where each ratio ``a/b`` of ``pairs`` spends its difference, round by round.

    Per ratio key: ``ratio`` (median over rounds of ``t_a / t_b``, the step totals of the
    profile's round r), ``excess_ms`` (median of ``t_a - t_b``), ``categories`` (per
    category, the median of the per-round differences in ms per step, largest first),
    ``category_intervals`` (their distribution-free 95 % intervals,
    :func:`harness.bench.intervals.median_interval`; None with too few rounds) and
    ``top_ops`` (the ``top`` operators with the largest differences of their means).
    Paired rounds, as the timing: a page-fault storm in one step moves one round, not the
    answer.
    """
    out = {}
    for key, (a, b) in pairs.items():
        if a not in profiles or b not in profiles:
            continue
        pa, pb = profiles[a], profiles[b]
        ra, rb = pa["rounds"], pb["rounds"]
        totals = [(sum(x.values()), sum(y.values())) for x, y in zip(ra, rb)]
        cats: dict[str, float] = {}
        spans: dict[str, list[float] | None] = {}
        for c in {*pa["categories"], *pb["categories"]}:
            diffs = [x.get(c, 0.0) - y.get(c, 0.0) for x, y in zip(ra, rb)]
            cats[c] = statistics.median(diffs)
            ci = intervals.median_interval(diffs)
            spans[c] = list(ci) if ci else None
        order = sorted(cats, key=lambda c: -abs(cats[c]))
        ops = {o: pa["ops"].get(o, 0.0) - pb["ops"].get(o, 0.0) for o in {*pa["ops"], *pb["ops"]}}
        out[key] = {
            "ratio": statistics.median(ta / tb for ta, tb in totals) if all(tb for _, tb in totals) else None,
            "excess_ms": statistics.median(ta - tb for ta, tb in totals),
            "categories": {c: cats[c] for c in order},
            "category_intervals": {c: spans[c] for c in order},
            "top_ops": dict(sorted(ops.items(), key=lambda kv: -abs(kv[1]))[:top]),
        }
    return out


def _min_rounds() -> int:
    """The fewest rounds that give a 95 % interval for a median."""
    return next(n for n in range(1, 1000) if intervals.median_rank(n))


def format_profile(profile: dict) -> list[str]:
    """Printed lines of a result's ``profile`` entry (see :func:`harness.bench.measure.run_bench`)."""
    if "error" in profile:
        return [f"profile: not taken ({profile['error']})"]
    arms = profile["arms"]
    cats = sorted(
        {c for p in arms.values() for c in p["categories"]},
        key=lambda c: -max(p["categories"].get(c, 0.0) for p in arms.values()),
    )
    lines = [
        f"profile ({profile['rounds']} interleaved round(s), {profile['time']}, ms per step, by "
        "operator/kernel name; a fused kernel counts under its first category, so the routing "
        "kernels include the norms fused into them):"
    ]
    width = max(len("arm"), *(len(name) for name in arms))
    cols = [max(len(c), 8) for c in cats]
    lines.append(f"  {'arm':<{width}} {'total':>8} " + " ".join(f"{c:>{w}}" for c, w in zip(cats, cols)))
    for name, p in arms.items():
        lines.append(
            f"  {name:<{width}} {p['total_ms']:8.1f} "
            + " ".join(f"{p['categories'].get(c, 0.0):{w}.1f}" for c, w in zip(cats, cols))
        )
    pairs = {k: c for k, c in profile["pairs"].items() if c["ratio"] is not None}
    if pairs:
        few = all(ci is None for c in pairs.values() for ci in c["category_intervals"].values())
        lines.append(
            "  each ratio a/b of step times: median of the per-round ratios; t_a - t_b by category, "
            "medians of the per-round differences (they need not add up to the total)"
            + (
                f"; no 95 % intervals from {profile['rounds']} round(s), they need {_min_rounds()}"
                if few
                else " [95 % interval]"
            )
            + ":"
        )
    for key, c in pairs.items():
        spans = c.get("category_intervals", {})
        parts = ", ".join(
            f"{cat} {ms + 0.0:+.1f}"
            + (f" [{spans[cat][0] + 0.0:+.1f}, {spans[cat][1] + 0.0:+.1f}]" if spans.get(cat) else "")
            for cat, ms in list(c["categories"].items())[:4]
        )
        lines.append(f"  {key}: {c['ratio']:.3f}, {c['excess_ms'] + 0.0:+.1f} ms per step: {parts}")
    return lines


__all__ = [
    "CATEGORIES",
    "categorize",
    "kernel_name",
    "kernel_profiling",
    "profile_steps",
    "compare",
    "format_profile",
]
