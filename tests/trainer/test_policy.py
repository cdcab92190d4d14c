"""trainer/policy.py: the actor-critic and its two value heads. The value head runs in float32
under bf16 autocast; the plain head passes through, PopArt normalises its targets, moves its
statistics by max(beta, 1/k) while preserving its outputs, and loads old checkpoints as warmed
up; Gumbel-max sampling follows the softmax; `act` and `evaluate` agree with torch's own
distribution."""
from __future__ import annotations

import pytest
import torch
from torch.distributions import Categorical

from tests.support.policies import OBS_SHAPE, small_policy
from trainer.policy import ActorCritic, PopArtValueHead, ValueHead, act, evaluate, sample_actions


def _head(beta: float = 0.5) -> PopArtValueHead:
    torch.manual_seed(0)
    return PopArtValueHead(8, beta=beta)


@pytest.mark.parametrize("value_head", ["plain", "popart"])
def test_value_head_runs_in_float32_under_bf16_autocast(value_head):
    """Under bf16 autocast the trunk runs in bf16 but the value head's Linear in float32: the
    value is fc(features.float()) exactly, not a bf16 product (8 significant bits: steps of
    0.125 near 20), which differs from it."""
    policy = small_policy(value_head)
    with torch.no_grad():
        policy.value_head.fc.bias.fill_(20.0)  # values near a return of 20
        obs = torch.rand(64, *OBS_SHAPE, generator=torch.Generator().manual_seed(5))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            features = policy.trunk(obs)
            logits, value = policy(obs)
            bf16_value = policy.value_head.fc(features).squeeze(-1)  # what autocast alone gives
        assert features.dtype == torch.bfloat16 and logits.dtype == torch.bfloat16
        assert value.dtype == torch.float32
        fc = policy.value_head.fc
        assert torch.equal(value, torch.nn.functional.linear(features.float(), fc.weight, fc.bias).squeeze(-1))
        assert bf16_value.dtype == torch.bfloat16
        assert not torch.equal(value, bf16_value.float())  # the float32 head resolves finer steps


# -- value heads ---------------------------------------------------------------------------------
def test_popart_update_preserves_unnormalised_outputs():
    torch.manual_seed(2)
    head = PopArtValueHead(16, beta=0.3)
    features = torch.randn(64, 16)
    with torch.no_grad():
        before = head.denormalize(head(features))
    weight0 = head.fc.weight.clone()
    for k in range(6):
        returns = 1000.0 + 250.0 * torch.randn(512) + 40.0 * k
        head.update_stats(returns)
        with torch.no_grad():
            after = head.denormalize(head(features))
            # float32 rounding of the identity: a few ulps of the largest term, mu or sigma * y
            sigma = head._sigma(head.mu, head.nu)
            scale = float(head.mu.abs() + sigma * head(features).abs().max())
        assert torch.allclose(after, before, rtol=1e-4, atol=1e-6 * scale)
    # The statistics really moved (so the preservation above was not trivial).
    assert float(head.mu) > 500.0
    sigma = float((head.nu - head.mu ** 2).sqrt())
    assert sigma > 50.0
    assert not torch.allclose(head.fc.weight, weight0)


def test_popart_prepare_targets_normalises():
    head = PopArtValueHead(8, beta=1.0)  # beta = 1: the statistics become those of the batch
    g = torch.Generator().manual_seed(3)
    returns = 500.0 + 80.0 * torch.randn(4096, generator=g)
    head.update_stats(returns)
    assert float(head.mu) == pytest.approx(float(returns.mean()), rel=1e-5)
    old_values = returns + 5.0
    target, old = head.prepare_targets(returns, old_values)
    assert float(target.mean()) == pytest.approx(0.0, abs=1e-3)
    assert float(target.std(unbiased=False)) == pytest.approx(1.0, abs=1e-3)
    sigma = returns.std(unbiased=False)
    assert torch.allclose(old, (old_values - returns.mean()) / sigma, atol=1e-3)
    assert torch.allclose(old - target, torch.full_like(old, 5.0) / sigma, atol=1e-4)
    # Normalised targets and the head's own output live in the same units.
    features = torch.randn(10, 8)
    with torch.no_grad():
        raw = head.denormalize(head(features))
        norm_raw, _ = head.prepare_targets(raw, raw)
        assert torch.allclose(norm_raw, head(features), atol=1e-4)


def test_plain_value_head_is_a_pass_through():
    torch.manual_seed(4)
    head = ValueHead(8)
    features = torch.randn(10, 8)
    out = head(features)
    assert out.shape == (10,)
    assert torch.allclose(out, features @ head.fc.weight[0] + head.fc.bias[0], atol=1e-6)
    assert torch.equal(head.denormalize(out), out)
    returns, old_values = torch.randn(10) * 100, torch.randn(10) * 100
    target, old = head.prepare_targets(returns, old_values)
    assert torch.equal(target, returns) and torch.equal(old, old_values)
    state = {k: v.clone() for k, v in head.state_dict().items()}
    head.update_stats(returns * 1000)
    assert all(torch.equal(v, head.state_dict()[k]) for k, v in state.items())
    assert type(ActorCritic(OBS_SHAPE, 5, 4, 16, "plain").value_head) is ValueHead
    assert type(ActorCritic(OBS_SHAPE, 5, 4, 16, "popart").value_head) is PopArtValueHead


# -- PopArt statistics ----------------------------------------------------------------------------
def test_step_is_a_running_average_then_beta():
    """w_k = max(beta, 1/k): the first batch sets the statistics, the next ones average in
    equally until 1/k falls below beta, then each moves them by beta."""
    head = _head(beta=0.25)
    batches = [torch.full((10,), v) for v in (4.0, 10.0, 1.0, 7.0, 100.0)]
    head.update_stats(batches[0])
    assert float(head.mu) == pytest.approx(4.0) and float(head.nu) == pytest.approx(16.0)
    head.update_stats(batches[1])
    assert float(head.mu) == pytest.approx(7.0)  # (4 + 10) / 2
    head.update_stats(batches[2])
    assert float(head.mu) == pytest.approx(5.0)  # (4 + 10 + 1) / 3
    head.update_stats(batches[3])
    assert float(head.mu) == pytest.approx(5.5)  # w = 1/4 = beta: still the plain average
    head.update_stats(batches[4])
    assert float(head.mu) == pytest.approx(0.75 * 5.5 + 0.25 * 100.0)  # w = beta from here on
    assert int(head.updates) == 5


def test_plain_head_never_reduces_across_ranks():
    calls = []
    ValueHead(8).update_stats(torch.randn(16), lambda x: calls.append(x) or x)
    assert calls == []


def test_checkpoint_without_update_count_loads_as_warmed_up():
    head = _head(beta=0.1)
    head.update_stats(torch.randn(64) * 3 + 9)
    state = head.state_dict()
    del state["updates"]  # written before the count existed
    fresh = _head(beta=0.1)
    fresh.load_state_dict(state)
    assert float(fresh.updates) == pytest.approx(10.0) and float(fresh.mu) == float(head.mu)


# -- the actor-critic -----------------------------------------------------------------------------
def test_act_and_evaluate_agree_with_torchs_categorical():
    policy = small_policy("popart")
    policy.value_head.update_stats(torch.tensor([10.0, 30.0]))  # mu 20, sigma 10
    obs = torch.rand(32, *OBS_SHAPE, generator=torch.Generator().manual_seed(1))
    torch.manual_seed(3)
    out = act(policy, obs)
    with torch.no_grad():
        logits, value = policy(obs)
        logprob, entropy, trained_value = evaluate(policy, obs, out.action)
    dist = Categorical(logits=logits)
    assert logits.shape == (32, 5) and out.action.shape == out.logprob.shape == out.value.shape == (32,)
    assert torch.allclose(out.logprob, dist.log_prob(out.action), atol=1e-6)
    assert torch.allclose(logprob, out.logprob, atol=1e-6) and torch.allclose(entropy, dist.entropy(), atol=1e-6)
    assert torch.allclose(out.value, value * 10.0 + 20.0, atol=1e-4)  # act gives raw values
    assert torch.equal(trained_value, value)  # evaluate gives them in training units


def test_popart_beta_out_of_range_is_refused():
    for beta in (0.0, 1.5):
        with pytest.raises(ValueError, match=f"PopArt beta must be in \\(0, 1\\], not {beta}"):
            PopArtValueHead(8, beta=beta)
    assert PopArtValueHead(8, beta=1.0).beta == 1.0


# -- sampling ------------------------------------------------------------------------------------
def test_sample_actions_frequencies_match_softmax():
    torch.manual_seed(6)
    logits = torch.tensor([[0.0, 0.0, 0.0, 0.0, 0.0],
                           [2.0, 1.0, 0.0, -1.0, -2.0],
                           [-0.5, 1.5, 0.3, 0.3, -1.0],
                           [3.0, 0.0, 0.5, 1.0, 0.2]])
    samples = 40_000
    actions, logprobs = sample_actions(logits.repeat(samples, 1, 1))
    assert actions.shape == logprobs.shape == (samples, 4)
    assert actions.dtype == torch.int64 and logprobs.dtype == torch.float32
    probs = torch.softmax(logits, -1)
    for row in range(logits.shape[0]):
        observed = torch.bincount(actions[:, row], minlength=5).double()
        expected = probs[row].double() * samples
        chi2 = float(((observed - expected) ** 2 / expected).sum())
        # 4 degrees of freedom: P(chi2 > 30) is about 5e-6.
        assert chi2 < 30.0, (row, observed.tolist(), expected.tolist())
        assert torch.allclose(observed / samples, probs[row].double(), atol=0.01)
    log_softmax = torch.log_softmax(logits, -1)
    assert torch.allclose(logprobs, log_softmax[torch.arange(4), actions], atol=1e-6)


def test_sample_actions_logprob_and_masked_actions():
    torch.manual_seed(7)
    logits = torch.randn(2000, 5) * 2
    logits[:, 3] = -1e4  # practically impossible
    actions, logprobs = sample_actions(logits.bfloat16())
    assert not bool((actions == 3).any())
    assert logprobs.dtype == torch.float32
    expected = torch.log_softmax(logits.bfloat16().float(), -1).gather(1, actions[:, None])[:, 0]
    assert torch.allclose(logprobs, expected, atol=1e-6)
    assert len(set(actions.tolist())) == 4
