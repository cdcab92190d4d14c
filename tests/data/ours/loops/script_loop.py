"""A script-style training loop: everything at module level, instrumented as docs/trainer.md says.

Planted host reads, each on its own line (tests/test_line_sites.py names the lines).
Run: PROF_ENABLED=1 PROF_MODE=full PROF_ITERATIONS=2-3 PROF_OUTPUT_DIR=out python script_loop.py
"""
import numpy as np
import torch

from goodhart_prof.capture.hooks import ProfSettings, make_hooks

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
hooks = make_hooks(ProfSettings.from_env(), rank=0, device_type="cpu")
history = []
for it in range(4):
    with hooks.iteration(it):
        with hooks.phase("rollout"):
            obs = torch.randn(32, 8)
            logits = model(obs)
            actions = logits.argmax(dim=1)
            first_action = actions[0].item()
            reward_np = np.random.default_rng(it).random(32).astype(np.float32)
            rewards = torch.as_tensor(reward_np)
            chosen = (actions == first_action).nonzero()
            action_list = actions[:4].tolist()
        with hooks.phase("ppo_update"):
            loss = (logits.logsumexp(dim=1) - rewards).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss_value = loss.item()
            grad_norm = model[0].weight.grad.norm().item()
            if (rewards > 0.99).any():
                history.append(loss_value)
            history.append(loss.detach().cpu())
        with hooks.phase("logging"):
            print(loss.detach())
hooks.close()
