"""A regression loop with gradient clipping that raises on a non-finite norm, as users write it to
catch divergence: clip_grad_norm_(..., error_if_nonfinite=True), whose check is a Python `if`
on a tensor inside torch (a read-back every step). Instrumented with goodhart_prof.capture.hooks, full
mode:

    PROF_ENABLED=1 PROF_MODE=full PROF_ITERATIONS=2-4 PROF_OUTPUT_DIR=OUT python clip_nonfinite.py
"""
import torch
import torch.nn as nn

from goodhart_prof.capture.hooks import ProfSettings, make_hooks

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
x, y = torch.randn(256, 16), torch.randn(256, 1)

hooks = make_hooks(ProfSettings.from_env(), rank=0, device_type="cpu")
for it in range(6):
    with hooks.iteration(it):
        for i in range(0, 256, 64):
            loss = nn.functional.mse_loss(model(x[i:i + 64]), y[i:i + 64])
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)
            opt.step()
hooks.close()
