"""Off-policy correction (TIS / MIS, token and sequence level) pinned to verl's and SkyRL's definitions.

Sources read (not copied):
- verl ``verl/trainer/ppo/rollout_corr_helper.py`` at b178a3cd56f58b2d502255daba591e92833930a7:
  ``log_ratio = old_log_prob - rollout_log_prob`` (779), ``SAFETY_BOUND = 20.0`` (75), token weights
  ``exp(clamp(log_ratio))`` (534), sequence weights ``exp(clamp(masked_sum(log_ratio)))`` broadcast (544),
  truncation ``clamp(max=rollout_is_threshold)`` (562), detached (566).
- SkyRL ``skyrl/backends/skyrl_train/utils/off_policy_correction_utils.py`` at
  a9564572eb8e91076be43c1bd5e4615e3de17265: token TIS ``clamp(exp(old - rollout), max=cap)`` (50-60),
  sequence TIS on ``sum(log ratio * mask)`` (63-70); token mask keeps ratios in ``[low, high]``
  (176-179); geometric sequence mask on ``exp(sum / num_tokens)`` (222-229); product sequence mask on
  ``exp(sum)`` (239-245); exponent clamped to +-20 (``torch_utils.py:191``, ``safe_exp_delta``).
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from stratagym.algorithms.losses import policy_loss
from stratagym.algorithms.off_policy import OffPolicyCorrection, importance_weights

# two sequences; the second has one padded token. ratios pi_old / mu per real token:
#   seq 0: e^0.5, e^-0.2, e^1.0    seq 1: e^-1.5, e^0.1, (pad)
OLD = torch.tensor([[-1.0, -2.0, -0.5], [-3.0, -0.4, -9.0]])
MU = torch.tensor([[-1.5, -1.8, -1.5], [-1.5, -0.5, 0.0]])
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool)
E = math.e


def _w(**kw):
    return importance_weights(OLD, MU, MASK, OffPolicyCorrection(**kw))


def test_off_by_default_weights_are_one_on_real_tokens():
    c = OffPolicyCorrection()
    assert not c.enabled
    w, _ = importance_weights(OLD, MU, MASK, c)
    assert w.tolist() == [[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]


def test_token_tis_truncates_each_token_ratio_at_the_cap():
    # verl 534 + 562, SkyRL 50-60: min(exp(old - mu), cap); cap 2: e^0.5 = 1.6487 kept, e^1 = 2.718 -> 2
    w, s = _w(tis="token", tis_cap=2.0)
    want = [[E**0.5, E**-0.2, 2.0], [E**-1.5, E**0.1, 0.0]]
    assert torch.allclose(w, torch.tensor(want), atol=1e-6)
    assert s["tis_clip_frac"] == pytest.approx(1 / 5)
    assert s["is_ratio_max"] == pytest.approx(E)
    assert s["is_weight_max"] == pytest.approx(2.0)
    assert not w.requires_grad


def test_sequence_tis_is_the_truncated_product_over_real_tokens():
    # verl 544, SkyRL 63-70: seq 0: exp(0.5 - 0.2 + 1.0) = e^1.3 = 3.669 -> cap 3; seq 1: exp(-1.4) (pad ignored)
    w, s = _w(tis="sequence", tis_cap=3.0)
    assert torch.allclose(w, torch.tensor([[3.0] * 3, [E**-1.4, E**-1.4, 0.0]]), atol=1e-6)
    assert s["tis_clip_frac"] == pytest.approx(0.5)


def test_token_mis_drops_tokens_outside_the_interval():
    # SkyRL 176-179: keep low <= ratio <= high. [0.5, 2]: e^1 (2.718) and e^-1.5 (0.223) dropped
    w, s = _w(mis="token", mis_high=2.0, mis_low=0.5)
    assert torch.allclose(w, torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 0.0]]))
    assert s["mis_masked_frac"] == pytest.approx(2 / 5)
    assert s["mis_seq_masked_frac"] == pytest.approx(1.0)


def test_sequence_mis_drops_whole_sequences_on_the_product():
    # SkyRL 239-245 (product): seq ratios e^1.3 = 3.67 (in [1/4, 4]: kept), e^-1.4 = 0.247 (< 0.25: dropped)
    w, s = _w(mis="sequence", mis_high=4.0)  # mis_low unset: 1 / mis_high = 0.25 (verl's default lower bound)
    assert torch.allclose(w, torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]))
    assert s["mis_seq_masked_frac"] == pytest.approx(0.5)
    assert s["mis_masked_frac"] == pytest.approx(2 / 5)


def test_geometric_mis_uses_the_per_token_mean_log_ratio():
    # SkyRL 222-229: geometric means e^(1.3/3) = 1.544 and e^(-1.4/2) = 0.497; interval [0.5, 1.5] drops both,
    # [0.45, 1.6] keeps both
    w, _ = _w(mis="geometric", mis_high=1.5, mis_low=0.5)
    assert torch.count_nonzero(w) == 0
    w, _ = _w(mis="geometric", mis_high=1.6, mis_low=0.45)
    assert w.tolist() == [[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]


def test_tis_and_mis_combine_as_a_product():
    w, _ = _w(tis="token", tis_cap=2.0, mis="token", mis_high=2.0, mis_low=0.5)
    assert torch.allclose(w, torch.tensor([[E**0.5, E**-0.2, 0.0], [0.0, E**0.1, 0.0]]), atol=1e-6)


def test_exponent_is_clamped_at_twenty():
    # verl SAFETY_BOUND (75), SkyRL safe_exp_delta clip 20: a log ratio of 50 gives e^20, not inf
    old, mu, m = torch.tensor([[10.0, 0.0]]), torch.tensor([[-40.0, 0.0]]), torch.ones(1, 2, dtype=torch.bool)
    _, s = importance_weights(old, mu, m, OffPolicyCorrection(tis="token", tis_cap=1e12))
    assert s["is_ratio_max"] == pytest.approx(math.exp(20.0), rel=1e-5)


def test_weights_scale_the_policy_gradient_per_token():
    """The weights enter the loss as per-token multipliers: the loss with TIS equals the hand-weighted
    token mean of the unweighted per-token losses, and its gradient scales alike."""
    lp = OLD.clone().requires_grad_(True)
    adv = torch.tensor([1.0, -2.0])
    w, _ = _w(tis="token", tis_cap=2.0)
    loss, _ = policy_loss(lp, OLD, adv, MASK, weights=w)
    # at lp == old the ratio is 1: per-token loss -A; token-mean over the 5 real tokens
    want = -(1.0 * (E**0.5 + E**-0.2 + 2.0) - 2.0 * (E**-1.5 + E**0.1)) / 5
    assert float(loss.detach()) == pytest.approx(want, rel=1e-6)
    loss.backward()
    assert float(lp.grad[0, 2]) == pytest.approx(-1.0 * 2.0 / 5, rel=1e-6)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-3, 3), min_size=6, max_size=6), st.lists(st.floats(-3, 3), min_size=6, max_size=6),
       st.floats(1.01, 10))
def test_properties_bounds_and_identity(old, mu, cap):
    o, u = torch.tensor(old).view(2, 3), torch.tensor(mu).view(2, 3)
    m = torch.ones(2, 3, dtype=torch.bool)
    for kind in ("token", "sequence"):
        w, _ = importance_weights(o, u, m, OffPolicyCorrection(tis=kind, tis_cap=cap))
        assert bool((w >= 0).all()) and bool((w <= cap + 1e-6).all())
        # on-policy samples (mu == pi_old) get weight 1 at every level
        w1, s1 = importance_weights(o, o, m, OffPolicyCorrection(tis=kind, tis_cap=cap, mis=kind, mis_high=cap))
        assert torch.allclose(w1, torch.ones(2, 3)) and s1["is_ess"] == pytest.approx(1.0)


@pytest.mark.parametrize("kw, match", [
    ({"tis": "seq"}, "tis must be one of"), ({"mis": "product"}, "mis must be one of"),
    ({"tis": "token", "tis_cap": 0.0}, "tis_cap must be > 0"), ({"mis": "token", "mis_low": 3.0}, "mis_low"),
])
def test_bad_options_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        OffPolicyCorrection(**kw)
