"""The benchmark's printed table: medians, ratios with their intervals and goals, the loops, routing and
the profile."""

from __future__ import annotations

from harness.bench.profile import format_profile
from harness.bench.routing_cost import format_routing
from harness.bench.settings import PARENT, PRECISION_RATIO


def format_report(result: dict) -> str:
    """Human-readable table of medians, ratios against the parent and their goals."""
    lines = [
        f"harness bench: size {result['size']}, {'compiled' if result['compile'] else 'eager'}, "
        f"{result['device']} ({result['device_name']}), {result['threads']} thread(s), torch {result['torch']}",
        f"a step of {result.get('micro_batches', 1)} micro-batch(es) of {result['batch_size']} x "
        f"{result['context']} tokens, one clip and AdamW step; {result['steps']} interleaved rounds after "
        f"{result['warmup']} warmup step(s); medians",
    ]
    if result.get("micro_batch_note"):
        lines.append(result["micro_batch_note"])
    if result.get("flops_per_token"):
        lines.append(
            "model FLOPs per token (6 N + 12 L D T): "
            + ", ".join(f"{v} {f / 1e9:.3f} G" for v, f in result["flops_per_token"].items())
        )
    if result.get("mfu_note"):
        lines.append(result["mfu_note"])
    lines.append("")
    lines += _variant_table(result)
    if result["loop_tokens_per_s"]:
        lines.append("")
        lines.append(
            f"training loop ({result['loop_variant']}, {result['loop_rounds']} rounds x "
            f"{result['loop_steps']} steps): "
            + ", ".join(f"{k} {v:,.0f} tokens/s" for k, v in result["loop_tokens_per_s"].items())
        )
    lines += [f"n/a {name}: {why}" for name, why in result.get("missing_arms", {}).items()]
    if result.get("precision_step_ms"):
        ms = result["precision_step_ms"]
        lines.append("")
        lines.append(
            f"precision ({result['precision_arms']['32-true'].split('@')[0]}, interleaved): "
            + ", ".join(f"{p} {v:.1f} ms" for p, v in ms.items())
        )
    lines.append("")
    lines += _ratio_lines(result)
    width = result["intervals"]["target_width"]
    wide = [k for k, w in result["intervals"]["widths"].items() if w is None or w >= width]
    if wide:
        lines.append(
            f"  intervals wider than {100 * width:g} %: {', '.join(wide)} (more --steps / --max-steps, "
            "or a quieter machine)"
        )
    for key, t in result["targets"].items():
        if key.startswith("mem:"):
            lines.append(
                f"  {key:<30} {t['value']:7.3f}  (one step each)  goal {t['op']} {t['bound']}: {t['verdict']}"
            )
    lines += format_routing(result)
    if result.get("profile"):
        lines.append("")
        lines += format_profile(result["profile"])
    lines.append("")
    lines.append("method: " + "; ".join(f"{k}: {v}" for k, v in result["method"].items()))
    return "\n".join(lines)


def _variant_table(result: dict) -> list[str]:
    """The per-variant table: step ms, tokens/s and peak MiB, each against the parent (and MFU if known)."""
    parent_ms = result["step_ms"].get(PARENT)
    parent_mb = result["peak_mem_mb"].get(PARENT)
    head = (
        f"{'variant':<16} {'step_ms':>9} {'vs parent':>9} {'tokens/s':>10} {'peak_MiB':>9} {'vs parent':>9}"
    )
    micro = result.get("micro_batches", 1) > 1  # the time per micro-batch beside the whole step's
    if micro:
        head += f" {'micro_ms':>9}"
    if result["mfu"]:
        head += f" {'MFU':>6}"
    lines = [head, "-" * len(head)]
    for v, ms in result["step_ms"].items():
        mb = result["peak_mem_mb"][v]
        rel = f"{ms / parent_ms:9.3f}" if parent_ms else f"{'':9}"
        rel_mb = f"{mb / parent_mb:9.3f}" if parent_mb else f"{'':9}"
        line = f"{v:<16} {ms:9.1f} {rel} {result['tokens_per_s'][v]:10.0f} {mb:9.1f} {rel_mb}"
        if micro:
            line += f" {result['micro_batch_ms'][v]:9.1f}"
        if result["mfu"]:
            line += f" {100 * result['mfu'][v]:5.1f}%"
        lines.append(line)
    return lines


def _ratio_lines(result: dict) -> list[str]:
    """The ratios with their intervals, rounds and goal verdicts."""
    ci_head = f"{int(100 * result['intervals']['level'])} % interval"
    lines = [f"ratios (median of per-round paired ratios; {ci_head}; goal judged against the interval):"]
    for key in [*result["ratios"], *result.get("precision_ratios", {})]:
        value = result["ratios"].get(key, result.get("precision_ratios", {}).get(key))
        if value is None:
            lines.append(f"  {key:<30}     n/a  (an arm ran out of memory: missing_arms)")
            continue
        ci = result["ratio_intervals"].get(key)
        span = f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else f"{'(too few rounds)':>16}"
        line = f"  {key:<30} {value:7.3f}  {span}  n={result['ratio_rounds'][key]:<4}"
        t = result["targets"].get(key)
        if t:
            line += f" goal {t['op']} {t['bound']}: {t['verdict']}"
        elif key == PRECISION_RATIO:  # a throughput ratio among step-time ratios: say which way it reads
            line += " tokens/s: above 1, bf16 is faster"
        lines.append(line)
    return lines
