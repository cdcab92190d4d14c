"""A supervised loop bound by its DataLoader, as a tutorial writes it: a Dataset whose __getitem__
runs a slow per-sample transform (affine warp, blur), DataLoader(num_workers=0), an MLP, Adam, the loss logged
every step with .item(); recorded with torch.profiler (schedule, record_shapes, with_stack,
profile_memory), one ProfilerStep per batch.

    python supervised_slow_loader.py OUT.json
"""
import sys

import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile, schedule
from torch.utils.data import DataLoader, Dataset


class NoisyDigits(Dataset):
    def __init__(self, n=512):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 64, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        # per-sample "augmentation", torchvision-style: a random affine warp and a blur of the
        # 8x8 image, each sample on its own (the DataLoader runs it in the training process)
        img = self.x[i].view(1, 1, 8, 8)
        theta = torch.tensor([[[1.0, 0.1 * (i % 3 - 1), 0.0], [0.0, 1.0, 0.05 * (i % 5 - 2)]]])
        grid = nn.functional.affine_grid(theta, [1, 1, 8, 8], align_corners=False)
        img = nn.functional.grid_sample(img, grid, align_corners=False)
        for _ in range(8):
            img = nn.functional.avg_pool2d(img, 3, stride=1, padding=1)
        return img.flatten(), self.y[i]

model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
loader = DataLoader(NoisyDigits(), batch_size=32, shuffle=True, num_workers=0)
losses = []
with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
             on_trace_ready=lambda p: p.export_chrome_trace(sys.argv[1]),
             record_shapes=True, with_stack=True, profile_memory=True) as prof:
    for step, (x, y) in enumerate(loader):
        if step >= 5:
            break
        logits = model(x)
        loss = nn.functional.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        prof.step()
print("mean loss", sum(losses) / len(losses))
