"""A loop profiled the way torch.profiler's own docs show: a schedule, and `prof.step()` as the
last statement of the loop body (no `with` per iteration).

Planted host reads, each on its own line (tests/test_line_sites.py names the lines); every pass
of the loop body lies inside one ProfilerStep#N, so the k-th read of a kind in a step is the k-th
such call of the body.
Run: python step_loop.py OUT.json (torch 2.13.0+cpu; writes OUT.json with export_chrome_trace)
"""
import sys

import torch
from torch.profiler import ProfilerActivity, profile, schedule

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
history = []
with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=2),
             with_stack=True, record_shapes=True) as prof:
    for it in range(4):
        obs = torch.randn(32, 8)
        logits = model(obs)
        first = logits[0, 0].item()
        loss = (logits.logsumexp(dim=1) - first).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss_value = loss.item()
        if (logits > 10).any():
            history.append(loss_value)
        prof.step()
prof.export_chrome_trace(sys.argv[1])
