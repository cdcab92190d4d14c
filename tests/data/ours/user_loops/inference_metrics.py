"""An evaluation loop as users write it: a small CNN under torch.no_grad(), accuracy and mean
confidence accumulated with .item() every batch; recorded with torch.profiler (schedule,
record_shapes, with_stack), one ProfilerStep per batch.

    python inference_metrics.py OUT.json
"""
import sys

import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile, schedule

torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                      nn.Flatten(), nn.Linear(16, 10)).eval()
batches = [(torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,))) for _ in range(6)]


def evaluate(model, batches, prof):
    correct, conf, seen = 0, 0.0, 0
    with torch.no_grad():
        for x, y in batches:
            probs = model(x).softmax(-1)
            pred = probs.argmax(-1)
            correct += (pred == y).sum().item()
            conf += probs.max(-1).values.sum().item()
            seen += len(y)
            prof.step()
    return correct / seen, conf / seen


with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
             on_trace_ready=lambda p: p.export_chrome_trace(sys.argv[1]),
             record_shapes=True, with_stack=True) as prof:
    acc, mean_conf = evaluate(model, batches, prof)
print(f"accuracy {acc:.3f} mean confidence {mean_conf:.3f}")
