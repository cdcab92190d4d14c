"""A supervised loop recorded the simplest way: `with torch.profiler.profile() as prof:` around
setup and loop, no schedule and no `prof.step()`, so the trace has no ProfilerStep#N. Setup
inside the window (the model and its data made once, a first forward to warm up), then 6 steps of
DataLoader batch, forward, backward and SGD step.

    python unmarked_loop.py OUT.json
"""
import sys

import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
torch.set_num_threads(1)
with profile(activities=[ProfilerActivity.CPU]) as prof:
    # setup, once: the data and the model built, one forward to warm up
    x, y = torch.randn(192, 256), torch.randint(0, 10, (192,))
    loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=False, num_workers=0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with torch.no_grad():
        model(x[:4])
    for xb, yb in loader:  # 6 steps
        loss = nn.functional.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
prof.export_chrome_trace(sys.argv[1])
