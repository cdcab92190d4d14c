"""A classification loop as users write it when they want honest step times and a live log: each
step starts and ends with an explicit device synchronize (`torch.cpu.synchronize()` here, what
`torch.cuda.synchronize()` becomes on a CPU run) around `time.perf_counter()`, and every step
logs the loss, the batch accuracy and the gradient norm with `.item()` (the norm read between
clipping and the optimizer step); the per-step losses are also kept, detached, for an epoch
mean. Instrumented with goodhart_prof.capture.hooks (run once in full mode and once in lite mode):

    PROF_ENABLED=1 PROF_MODE=full PROF_ITERATIONS=3-6 PROF_OUTPUT_DIR=OUT/full python metrics_sync.py
    PROF_ENABLED=1 PROF_MODE=lite PROF_ITERATIONS=3-6 PROF_OUTPUT_DIR=OUT/lite python metrics_sync.py
"""
import time

import torch
import torch.nn as nn

from goodhart_prof.capture.hooks import ProfSettings, make_hooks

device = "cpu"
sync = torch.cuda.synchronize if device == "cuda" else torch.cpu.synchronize

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 5)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
X = torch.randn(1024, 20, device=device)
Y = (X[:, :5].argmax(1) + (X[:, 5] > 1).long()) % 5
epoch_losses = []

hooks = make_hooks(ProfSettings.from_env(), rank=0, device_type=device)
for step in range(8):
    with hooks.iteration(step):
        sync()
        t0 = time.perf_counter()
        i = (step * 128) % 1024
        x, y = X[i:i + 128], Y[i:i + 128]
        logits = model(x)
        loss = nn.functional.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        gn = grad_norm.item()
        opt.step()
        epoch_losses.append(loss.detach())
        with hooks.phase("logging"):
            acc = (logits.argmax(1) == y).float().mean().item()
            sync()
            dt = time.perf_counter() - t0
            print(f"step {step} loss {loss.item():.4f} acc {acc:.3f} grad_norm {gn:.3f} {dt * 1e3:.2f} ms")
hooks.close()
print("epoch mean loss", torch.stack(epoch_losses).mean().item())
