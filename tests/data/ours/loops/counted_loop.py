"""A small user loop that reports its env steps to the hooks: `goodhart-prof run -- python
counted_loop.py --iterations N` runs it as a run of its own (tests/e2e/test_command_runs.py).

--envs N: env steps per iteration (0: reports none); --fail-at K exits with code 3 at iteration K;
--wait-for FILE: before iteration 1, waits until FILE exists (a test sends a signal meanwhile).
"""
import argparse
import os
import sys
import time

import torch

from goodhart_prof.capture.hooks import ProfSettings, make_hooks

parser = argparse.ArgumentParser()
parser.add_argument("--iterations", type=int, default=6)
parser.add_argument("--envs", type=int, default=64)
parser.add_argument("--fail-at", type=int, default=-1)
parser.add_argument("--wait-for", default=None)
args = parser.parse_args()

torch.manual_seed(0)
policy = torch.nn.Linear(16, 4)
opt = torch.optim.SGD(policy.parameters(), lr=0.01)
hooks = make_hooks(ProfSettings.from_env(), rank=0)
print(f"counted_loop: PROF_OUTPUT_DIR={os.environ.get('PROF_OUTPUT_DIR')}", flush=True)
for it in range(args.iterations):
    if it == 1 and args.wait_for:
        print("counted_loop: waiting", flush=True)
        while not os.path.exists(args.wait_for):
            time.sleep(0.01)
    if it == args.fail_at:
        sys.exit(3)
    with hooks.iteration(it, env_steps=args.envs or None):
        with hooks.phase("rollout"):
            obs = torch.randn(args.envs or 8, 16)
            actions = policy(obs).argmax(dim=1)
        with hooks.phase("ppo_update"):
            loss = policy(obs).logsumexp(dim=1).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss.item()
hooks.close()
