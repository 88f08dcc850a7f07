"""Print the size presets x variants table with parameter counts (total and trainable).

Counts come from building each model's structure on the meta device (no memory, no
init), so the paper sizes print instantly. The 120m/343m presets use the GPT-2
vocabulary padded to 50304; a run's real count (with its tokenizer's vocabulary) is
stored in the ``runs`` table.

example:
  harness sizes
  harness sizes --size 120m --size 343m --vocab-size 32768
"""

from __future__ import annotations

import argparse

from harness.models import available_variants, count_params, get_spec
from harness.models.sizes import SIZES, derive, padded_vocab


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--size", action="append", choices=list(SIZES), help="preset(s) to show (default: all)")
    p.add_argument("--variant", action="append", help="variant(s) to show (default: all)")
    p.add_argument(
        "--vocab-size",
        type=int,
        default=None,
        help="a tokenizer's vocabulary instead of the presets' (257 .. 1,048,576, as a grid's [train] "
        "vocab_size); the model's is padded to a multiple of 64, as in a run",
    )


def size_table(sizes: list[str], variants: list[str], vocab_size: int | None = None) -> list[dict]:
    """One row per (size, variant): layers, width, heads, context, vocab, block size,
    total and trainable parameters, and the difference to the parent's total."""
    import torch

    from harness.models.gpt import DepthRoutedLM

    rows = []
    for size in sizes:
        overrides = (
            {"vocab_size": padded_vocab(vocab_size)} if vocab_size else {}
        )  # as RunConfig.model_config
        cfg = derive(size, **overrides)
        with torch.device("meta"):
            counts = {v: count_params(DepthRoutedLM(cfg, get_spec(v))) for v in variants}
            parent = count_params(DepthRoutedLM(cfg, get_spec("block_attnres")))
        for v in variants:
            rows.append(
                dict(
                    size=size,
                    variant=v,
                    L=cfg.n_layers,
                    D=cfg.d_model,
                    H=cfg.n_heads,
                    T=cfg.context,
                    V=cfg.vocab_size,
                    block=cfg.block_size,
                    total=counts[v]["total"],
                    trainable=counts[v]["trainable"],
                    vs_parent=counts[v]["total"] - parent["total"],
                )
            )
    return rows


def format_table(rows: list[dict]) -> str:
    """Fixed-width text table of :func:`size_table` rows (counts with thousands separators)."""
    cols = ["size", "variant", "L", "D", "H", "T", "V", "block", "total", "trainable", "vs_parent"]
    fmt = lambda c, v: (
        f"{v:+,}"
        if c == "vs_parent"
        else (f"{v:,}" if isinstance(v, int) and c in ("total", "trainable") else str(v))
    )
    cells = [[fmt(c, r[c]) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    left = {"size", "variant"}
    line = lambda vals: "  ".join(
        v.ljust(w) if c in left else v.rjust(w) for c, v, w in zip(cols, vals, widths)
    )
    out = [line(cols), line(["-" * w for w in widths])]
    prev = None
    for r, row in zip(rows, cells):
        if prev is not None and r["size"] != prev:
            out.append("")
        prev = r["size"]
        out.append(line(row))
    return "\n".join(out)


def main(args: argparse.Namespace) -> int:
    variants = args.variant or available_variants()
    for v in variants:
        get_spec(v)  # ValueError names the valid ones
    if args.vocab_size is not None:
        from harness.data.tokenizer import check_bpe_vocab  # lazy: it loads HF tokenizers

        check_bpe_vocab(args.vocab_size)  # the range a grid's vocab_size allows: one line
    print(format_table(size_table(args.size or list(SIZES), variants, args.vocab_size)))
    return 0
