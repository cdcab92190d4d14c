"""Online hard-example mining as users write it: per-sample losses, the indices of the hardest
half picked with `torch.where(per_sample >= per_sample.median())` (one-argument where), the loss
over those only, and an `assert torch.isfinite(loss)` guard before backward. Instrumented with
goodhart_prof.capture.hooks in full mode:

    PROF_ENABLED=1 PROF_MODE=full PROF_ITERATIONS=2-4 PROF_OUTPUT_DIR=OUT python hard_mining.py
"""
import torch
import torch.nn as nn

from goodhart_prof.capture.hooks import ProfSettings, make_hooks

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 3))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
X, Y = torch.randn(768, 16), torch.randint(0, 3, (768,))

hooks = make_hooks(ProfSettings.from_env(), rank=0, device_type="cpu")
for step in range(6):
    with hooks.iteration(step):
        x, y = X[step * 128:(step + 1) * 128], Y[step * 128:(step + 1) * 128]
        per_sample = nn.functional.cross_entropy(model(x), y, reduction="none")
        (hard,) = torch.where(per_sample >= per_sample.median())
        loss = per_sample[hard].mean()
        assert torch.isfinite(loss), "loss is not finite"
        opt.zero_grad()
        loss.backward()
        opt.step()
hooks.close()
