"""A classifier whose batches are augmented in numpy (random flips, noise, per-channel
normalisation on the host), then handed to torch the way many scripts do it:
`torch.from_numpy(xb).float().to(device)` and `torch.from_numpy(yb).to(device)` every step;
predictions come back with `.detach().cpu().numpy()` for a numpy accuracy. Instrumented with
goodhart_prof.capture.hooks in full mode:

    PROF_ENABLED=1 PROF_MODE=full PROF_ITERATIONS=2-4 PROF_OUTPUT_DIR=OUT python numpy_aug.py
"""
import numpy as np
import torch
import torch.nn as nn

from goodhart_prof.capture.hooks import ProfSettings, make_hooks

device = "cpu"
rng = np.random.default_rng(0)
torch.manual_seed(0)
images = rng.normal(size=(512, 3, 8, 8))  # float64, as numpy makes it
labels = rng.integers(0, 4, size=512)
model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 8 * 8, 4)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def augment(xb):
    flip = rng.random(len(xb)) < 0.5
    xb = np.where(flip[:, None, None, None], xb[..., ::-1], xb)
    xb = xb + rng.normal(scale=0.1, size=xb.shape)
    return (xb - xb.mean(axis=(0, 2, 3), keepdims=True)) / xb.std(axis=(0, 2, 3), keepdims=True)


hooks = make_hooks(ProfSettings.from_env(), rank=0, device_type=device)
correct = seen = 0
for step in range(6):
    with hooks.iteration(step):
        idx = rng.choice(len(images), 64, replace=False)
        xb, yb = augment(images[idx]), labels[idx]
        x = torch.from_numpy(xb).float().to(device)
        y = torch.from_numpy(yb).to(device)
        logits = model(x)
        loss = nn.functional.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        preds = logits.detach().cpu().numpy().argmax(1)
        correct += int((preds == yb).sum())
        seen += len(yb)
hooks.close()
print(f"train accuracy {correct / seen:.3f}")
