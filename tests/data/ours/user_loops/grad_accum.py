"""Gradient accumulation as users write it: 4 micro-batches per optimizer step, the running loss
summed with .item() after each backward, AdamW; instrumented with goodhart_prof.capture.hooks in lite
mode (the default: no stacks, no shapes):

    PROF_ENABLED=1 PROF_ITERATIONS=2-4 PROF_OUTPUT_DIR=OUT python grad_accum.py
"""
import torch
import torch.nn as nn

from goodhart_prof.capture.hooks import ProfSettings, make_hooks

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 128), nn.GELU(), nn.Linear(128, 32))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = [(torch.randn(64, 32), torch.randn(64, 32)) for _ in range(4)]

hooks = make_hooks(ProfSettings.from_env(), rank=0, device_type="cpu")
for step in range(6):
    with hooks.iteration(step):
        running = 0.0
        for x, y in data:
            loss = nn.functional.mse_loss(model(x), y) / len(data)
            loss.backward()
            running += loss.item()
        with hooks.phase("optimizer_step"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        if step % 2 == 0:
            print(f"step {step} loss {running:.4f}")
hooks.close()
