"""A regression loop that clips gradients and warns when they were large, as users add to spot
instability: `norm = clip_grad_norm_(params, 1.0)` then `if norm > 5.0: print(...)` (a Python
branch on the returned norm tensor) before the optimizer step; an LR scheduler steps every
iteration; the loss is printed only every 10th step (not in the traced window). Instrumented with
goodhart_prof.capture.hooks in lite mode (the default):

    PROF_ENABLED=1 PROF_ITERATIONS=2-4 PROF_OUTPUT_DIR=OUT python clip_warn.py
"""
import torch
import torch.nn as nn

from goodhart_prof.capture.hooks import ProfSettings, make_hooks

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(10, 32), nn.SiLU(), nn.Linear(32, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
X = torch.randn(256, 10)
Y = X[:, :1] * 3 + 0.1 * torch.randn(256, 1)

hooks = make_hooks(ProfSettings.from_env(), rank=0, device_type="cpu")
for step in range(6):
    with hooks.iteration(step):
        for i in range(0, 256, 128):
            loss = nn.functional.mse_loss(model(X[i:i + 128]), Y[i:i + 128])
            opt.zero_grad()
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            if norm > 5.0:
                print(f"step {step}: large gradient norm")
            opt.step()
        sched.step()
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f}")
hooks.close()
