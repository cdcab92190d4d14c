"""A small compiled loop with a graph break and a recompile, instrumented with our hooks
(tests/data/SOURCES.md: how the run folder beside it was recorded).

`update` reads a value back with `.item()` and branches on it: torch.compile breaks the graph
there and resumes in `torch_dynamo_resume_in_update_at_<line>` (its own dynamo frame). Iteration 4
calls it with a new batch size: dynamo compiles both frames again inside the traced window.
"""
import torch

from goodhart_prof.capture.hooks import ProfSettings, make_hooks

torch.manual_seed(0)
w = torch.randn(64, 64)


def update(x):
    y = torch.tanh(x @ w)
    s = y.sum().item()
    if s > 0:
        y = y * 2
    return torch.relu(y) + 1


step = torch.compile(update)
x = torch.randn(32, 64)
hooks = make_hooks(ProfSettings.from_env(), rank=0, device_type="cpu")
for it in range(6):
    with hooks.iteration(it, env_steps=len(x)):
        with hooks.phase("ppo_update"):
            out = step(x if it < 4 else x[:16])
hooks.close()
