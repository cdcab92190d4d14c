"""The step functions a Trainer builds: a clean config gets the env's own step and the no-sync
clip, a planted pattern wraps the step, CUDA graphs are refused off CUDA, without compile and with
several ranks, a graph generation begins before each call, and the pageable_htod pattern's host
observations become the policy input."""
from __future__ import annotations

from typing import NamedTuple

import pytest
import torch

from tests.support.helpers import write_tiny_config
from trainer.config import ConfigError, build_config
from trainer.ppo import clip_grad_norm_no_sync
from trainer.step_functions import build_step_functions, check_cudagraphs, host_obs_to_policy, step_begin
from trainer.train import Trainer


def _tiny(tmp_path, **overrides):
    return build_config(str(write_tiny_config(tmp_path)), device="cpu", output_dir=str(tmp_path),
                        progress=False, **overrides)


def test_a_clean_config_steps_the_env_itself(tmp_path):
    trainer = Trainer(_tiny(tmp_path))
    fns = build_step_functions(trainer)
    assert fns.env_step == trainer.env.step and fns.clip_grads is clip_grad_norm_no_sync
    out, final_values = fns.act_all(trainer.policy_obs)
    assert out.action.shape == (trainer.n_envs,) and final_values.shape == (trainer.max_truncated,)


def test_item_logging_wraps_the_step_and_reads_each_reward_back(tmp_path):
    trainer = Trainer(_tiny(tmp_path, inject="item_logging"))
    assert trainer.env_step != trainer.env.step
    out, _ = trainer.act_all(trainer.policy_obs)
    res = trainer.env_step(trainer.state, out.action)
    assert trainer.reward_log == [pytest.approx(res.proxy_reward.mean().item())]


@pytest.mark.parametrize("cuda,compiled,ranks,message", [
    (False, True, 1, "^cudagraphs needs a CUDA device$"),
    (True, False, 1, r"^cudagraphs needs torch.compile \(compile is off\)$"),
    (True, True, 2, r"^cudagraphs runs on one rank only"),
])
def test_cudagraphs_needs_cuda_compile_and_one_rank(cuda, compiled, ranks, message):
    with pytest.raises(ConfigError, match=message):
        check_cudagraphs(cuda, compiled, ranks)
    check_cudagraphs(True, True, 1)  # all three: no error


def test_step_begin_marks_a_new_generation_before_each_call(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: calls.append("mark"))
    wrapped = step_begin(lambda x, y: calls.append(("fn", x, y)) or x + y)
    assert wrapped(2, 3) == 5 and wrapped(1, 1) == 2
    assert calls == ["mark", ("fn", 2, 3), "mark", ("fn", 1, 1)]


class Step(NamedTuple):
    obs: torch.Tensor
    final_obs: torch.Tensor
    policy_obs: torch.Tensor


def test_host_observations_become_the_policy_input():
    host = Step(obs=torch.ones(3, 2), final_obs=torch.zeros(1, 2), policy_obs=torch.full((4, 2), 7.0))
    res = host_obs_to_policy(lambda state, actions: host)(None, None)
    assert torch.equal(res.policy_obs, torch.tensor([[1.0, 1.0]] * 3 + [[0.0, 0.0]]))
    assert res.obs is host.obs and res.final_obs is host.final_obs
