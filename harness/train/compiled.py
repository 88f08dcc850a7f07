"""One run's ``torch.compile``: a fresh compiled forward per run, its graphs counted, a fall-back to eager seen.

A queue worker trains run after run in one process. Dynamo keeps the compiled entries of every
model it has seen on the model's ``forward`` code, and each (variant, size) adds one: at its
``recompile_limit`` (8) it stops compiling that code and every later run would train eager, with one
warning in the log and nothing in the result. So :class:`CompiledForward` resets
dynamo's caches before it compiles (:func:`torch._dynamo.reset`: the previous run's graphs are gone
with its model), and tells the run whether it really trained compiled: the graphs inductor compiled
for it (a counting backend around ``inductor``) and the frames dynamo left to eager since the reset
(``torch._dynamo.utils.counters["frames"]``: ``total`` counts every frame dynamo was asked to
convert, ``ok`` the converted ones; a frame past the recompile limit, or one dynamo gave up on,
runs eager).

Under DDP the compiled model runs inside DDP's forward (Lightning wraps the Lightning module),
where dynamo's default ``optimize_ddp = "ddp_optimizer"`` splits the graph at every gradient
bucket (25 MB: ~19 pieces at 120m) so that each bucket's all-reduce can start while the backward
runs. :data:`DDP_MODE` is what the harness uses instead, chosen (and measured on 2 gloo ranks)
in docs/paper-scale.md, "Compile under DDP": one graph, DDP's all-reduce after the backward
(its overlap would help only the last micro-batch of a step).
"""

from __future__ import annotations

import torch
from torch._dynamo.utils import counters

#: ``torch._dynamo.config.optimize_ddp`` while a compiled forward runs: one graph under DDP (see the
#: module docstring; ``"ddp_optimizer"``, dynamo's default, splits it at every gradient bucket).
DDP_MODE = "no_optimization"

#: The backend the counting wrapper hands each graph to: inductor, what training uses (a test that
#: needs dynamo's real trace without inductor's numerics sets ``"eager"``).
INNER_BACKEND = "inductor"


def _frames() -> tuple[int, int]:
    """(frames dynamo was asked to convert, frames it converted) in this process so far."""
    return int(counters["frames"]["total"]), int(counters["frames"]["ok"])


class CompiledForward:
    """``torch.compile(model)`` for one run, after :func:`torch._dynamo.reset` (see the module docstring).

    Calling it runs the compiled model (tokens ``[B, T]`` -> logits ``[B, T, V]``) with
    ``optimize_ddp`` set to :data:`DDP_MODE`. The compilation itself happens at the first call.

    Attributes:
        graphs: graphs inductor compiled for this run (DDP's optimiser, when on, compiles one per
            gradient bucket: each piece counts).
    """

    def __init__(self, model: torch.nn.Module) -> None:
        # every earlier run's compiled entries go: they count towards this run's recompile limit
        torch._dynamo.reset()
        self.graphs = 0
        self._frames_at_start = _frames()
        self._inductor = torch._dynamo.lookup_backend(INNER_BACKEND)
        self._fn = torch.compile(model, backend=self._backend)

    def _backend(self, gm: torch.fx.GraphModule, example_inputs):
        self.graphs += 1
        return self._inductor(gm, example_inputs)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        with torch._dynamo.config.patch(optimize_ddp=DDP_MODE):
            return self._fn(x)

    @property
    def eager_frames(self) -> int:
        """Frames dynamo left to eager since this run's reset (past the recompile limit, or given up)."""
        total, ok = _frames()
        return (total - self._frames_at_start[0]) - (ok - self._frames_at_start[1])

    @property
    def compiled(self) -> bool:
        """Whether this run trained compiled: inductor compiled a graph for it and no frame fell back."""
        return self.graphs > 0 and self.eager_frames == 0


__all__ = ["DDP_MODE", "INNER_BACKEND", "CompiledForward"]
