"""Seeded, name-keyed initialisation (DESIGN section 4).

Every tensor is drawn from its own generator seeded by ``(seed, sha256(name))``, so a
parameter's initial value depends only on the run seed and its qualified name: all
variants share bit-identical values for every parameter the parent also has, and
adding a parameter (a new pseudo-query) never shifts another one's values.

Scheme (GPT-2 / nanoGPT): embeddings and input projections N(0, 0.02); output
projections (``attn.proj``, ``mlp.down``) N(0, 0.02 / sqrt(2 L)) (Radford et al. 2019,
section 2.3); RMSNorm gains 1; pseudo-queries ``w_*`` 0 (AttnRes, arXiv 2603.15031: a zero
query starts every route as the uniform mean of its sources); route offsets ``b_*`` 0
(a route plus a zero offset is the route, so every variant starts as the parent).
"""

from __future__ import annotations

import hashlib
import math

import torch
from torch import nn

STD = 0.02


def name_seed(seed: int, name: str) -> int:
    """63-bit generator seed from ``(seed, name)``; stable across processes and machines."""
    digest = hashlib.sha256(f"{int(seed)}/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


ZERO_PREFIXES = ("w_", "b_")  # pseudo-queries and route offsets (harness.models.spec)


def is_zero_init(name: str) -> bool:
    """Whether the tensor called ``name`` is a pseudo-query or a route offset (zero-initialised)."""
    return name.rsplit(".", 1)[-1].startswith(ZERO_PREFIXES)


def init_std(name: str, n_layers: int) -> float | None:
    """Normal std for a weight named ``name``, or None for tensors set to a constant."""
    if is_zero_init(name):
        return None  # pseudo-query or route offset: zeros
    if name.endswith("norm.weight"):
        return None  # RMSNorm gain: ones
    if name.endswith(("attn.proj.weight", "mlp.down.weight")):
        return STD / math.sqrt(2 * n_layers)
    return STD


@torch.no_grad()
def init_weights(model: nn.Module, seed: int, n_layers: int) -> None:
    """Initialise every parameter and persistent buffer of ``model`` in place from ``seed``.

    Tied weights are initialised once (under the first name that owns them).
    """
    tensors = dict(model.named_parameters())
    for name, buf in model.named_buffers():
        if is_zero_init(name):
            tensors[name] = buf  # frozen pseudo-queries and offsets
    for name, tensor in tensors.items():
        std = init_std(name, n_layers)
        if std is None:
            tensor.fill_(0.0 if is_zero_init(name) else 1.0)
            continue
        g = torch.Generator(device="cpu").manual_seed(name_seed(seed, name))
        value = torch.randn(tensor.shape, generator=g, dtype=torch.float32) * std
        tensor.copy_(value.to(device=tensor.device, dtype=tensor.dtype))
