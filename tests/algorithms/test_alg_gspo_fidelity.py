"""GSPO clamps like verl: only the sequence log-ratio, at 10; approx KL from the unclamped values (issue 13, item 16)."""

import math

import pytest
import torch

from stratagym.algorithms.losses import policy_loss

F64 = torch.float64


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_one_token_far_off_matches_verl(agg):
    """verl ``compute_policy_loss_gspo`` (verl/trainer/ppo/core_algos.py at commit b178a3cd56f5, lines 1286-1298):
    ``negative_approx_kl = log_prob - old_log_prob`` is NOT clamped; the sequence mean
    ``(24 + -10) / 2 = 7`` is taken first, and only ``log_seq_importance_ratio`` is clamped, at ``max=10.0``.
    With A = -1 the clipped surrogate is ``max(s, clip(s)) = s = e^7`` on both tokens (stratagym used to clamp
    each token at 20 first: mean 5, e^5).  ``ppo_kl`` (line 1320) is the masked mean of the unclamped
    ``-negative_approx_kl``: -7."""
    lp = torch.tensor([[24.0, -10.0]], dtype=F64, requires_grad=True)
    old = torch.zeros(1, 2, dtype=F64)
    loss, st = policy_loss(lp, old, torch.tensor([-1.0], dtype=F64), torch.ones(1, 2), loss="gspo", agg=agg)
    assert loss.item() == pytest.approx(math.exp(7))
    assert st["approx_kl"] == pytest.approx(-7.0)
    assert st["ratio_mean"] == pytest.approx(math.exp(7))
    loss.backward()
    # value s * pi/sg(pi): d/dlogp_t of -A * s * exp(logp_t - sg logp_t), averaged over the 2 tokens
    assert lp.grad[0].tolist() == pytest.approx([math.exp(7) / 2, math.exp(7) / 2])


def test_sequence_log_ratio_clamped_at_10_without_gradient():
    """Past 10 the clamp holds the ratio at e^10 and, as torch.clamp in verl, passes no gradient."""
    lp = torch.tensor([[30.0, 0.0]], dtype=F64, requires_grad=True)
    old = torch.zeros(1, 2, dtype=F64)
    loss, st = policy_loss(lp, old, torch.tensor([-1.0], dtype=F64), torch.ones(1, 2), ratio_level="sequence")
    assert loss.item() == pytest.approx(math.exp(10))
    assert st["approx_kl"] == pytest.approx(-15.0)
    loss.backward()
    assert torch.all(lp.grad == 0)
