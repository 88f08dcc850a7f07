"""Compile x DDP on 2 gloo CPU ranks: graph pieces and step time of one optimize_ddp mode (issue 44 row 8).

    python scripts/compile_ddp_ways.py SIZE MODE BUCKET_MB STEPS     # e.g. mini no_optimization 25 10

MODE: ddp_optimizer (dynamo's default) or no_optimization (the harness's, harness/train/compiled.py).
Prints one JSON line from rank 0: graphs inductor compiled, first step (the compile) and median step.
$PORT: the rendezvous port (default 29533). BUCKET_MB must be >= 1 (DDP's first bucket) for ddp_optimizer.
"""

import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

from harness.models import build_model

SIZE, MODE, BUCKET_MB, STEPS = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])


class Wrap(torch.nn.Module):  # Lightning's place: DDP wraps a module whose forward calls the compiled model
    def __init__(self, model):
        super().__init__()
        self.model = model
        object.__setattr__(self, "compiled", torch.compile(model, backend=counted))

    def forward(self, x, y):
        logits = self.compiled(x)
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())


GRAPHS = [0]


def counted(gm, ex):
    GRAPHS[0] += 1
    return torch._dynamo.lookup_backend("inductor")(gm, ex)


def rank(r):
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("PORT", "29533"))
    dist.init_process_group("gloo", rank=r, world_size=2)
    torch._dynamo.config.optimize_ddp = MODE
    model = build_model("rd_attnres", SIZE, seed=0, vocab_size=512)
    ddp = DDP(Wrap(model), bucket_cap_mb=BUCKET_MB)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(r)
    x = torch.randint(0, 512, (4, 64), generator=g)
    y = torch.randint(0, 512, (4, 64), generator=g)
    times = []
    for _ in range(STEPS + 1):
        t = time.perf_counter()
        opt.zero_grad()
        ddp(x, y).backward()
        opt.step()
        times.append(time.perf_counter() - t)
    if r == 0:
        n = sum(p.numel() for p in model.parameters())
        print(
            json.dumps(
                dict(
                    size=SIZE,
                    mode=MODE,
                    bucket_mb=BUCKET_MB,
                    params=n,
                    graphs=GRAPHS[0],
                    first_step_s=round(times[0], 2),
                    step_ms_median=round(1000 * statistics.median(times[1:]), 1),
                    step_ms_all=[round(1000 * t) for t in times[1:]],
                )
            ),
            flush=True,
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(rank, nprocs=2)
