"""PPO with a critic, the pure parts: turn-level and token-level GAE, the clipped value loss.

verl source read: ``verl/trainer/ppo/core_algos.py`` at commit b178a3cd56f58b2d502255daba591e92833930a7,
``compute_gae_advantage_return`` (lines 214-263) and ``compute_value_loss`` (lines 1799-1838).
"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from stratagym.algorithms import AdvantageBatch, get_estimator
from stratagym.algorithms import reference as ref
from stratagym.algorithms.advantages import gae, gae_tokens, whiten
from stratagym.algorithms.losses import AGG_MODES, value_loss

T = torch.tensor
F64 = torch.float64


def test_gae_turn_level_by_hand():
    """rewards [0, 1], V [0.5, 0.8], gamma 0.9, lam 0.8: deltas [0 + 0.9*0.8 - 0.5, 1 - 0.8] = [0.22, 0.2];
    A = [0.22 + 0.72*0.2, 0.2] = [0.364, 0.2]; returns A + V = [0.864, 1.0].  Rows may come in any order."""
    adv, ret = gae(T([1.0, 0.0], dtype=F64), T([0.8, 0.5], dtype=F64), T([3, 3]), T([1, 0]), gamma=0.9, lam=0.8)
    assert adv.tolist() == pytest.approx([0.2, 0.364]) and ret.tolist() == pytest.approx([1.0, 0.864])
    # lam = 1, gamma = 1: A = (sum of later rewards) - V (Monte Carlo); lam = 0: the one-step TD error
    adv, _ = gae(T([0.0, 1.0], dtype=F64), T([0.5, 0.8], dtype=F64), T([0, 0]), T([0, 1]))
    assert adv.tolist() == pytest.approx([0.5, 0.2])
    adv, _ = gae(T([0.0, 1.0], dtype=F64), T([0.5, 0.8], dtype=F64), T([0, 0]), T([0, 1]), lam=0.0)
    assert adv.tolist() == pytest.approx([0.3, 0.2])


def test_gae_tokens_skips_observation_tokens():
    """verl lines 246-256: rewards [[0,0,1]], V [[.5,.6,.7]], mask [[1,0,1]] (the middle token is an observation):
    t=2: delta 0.3 -> A 0.3; t=1 masked: keeps A 0.3 and V' 0.7; t=0: delta 0 + 0.7 - 0.5 = 0.2 -> A 0.5."""
    adv, ret = gae_tokens(T([[0.0, 0.0, 1.0]], dtype=F64), T([[0.5, 0.6, 0.7]], dtype=F64), T([[1, 0, 1]]))
    assert adv[0].tolist() == pytest.approx([0.5, 0.3, 0.3]) and ret[0].tolist() == pytest.approx([1.0, 0.9, 1.0])


def test_value_loss_by_hand():
    """verl lines 1830-1836: 0.5 * max((V - R)^2, (clip(V, V_old +- c) - R)^2).  V 0.9, V_old 0.5, R 1, c 0.2:
    clipped 0.7 -> max(0.01, 0.09) = 0.09, the clipped branch (no gradient); V 1.0, V_old 0.5, R 0.8: 0.04."""
    v = T([[0.9, 1.0]], dtype=F64, requires_grad=True)
    loss, st_ = value_loss(v, T([[1.0, 0.8]], dtype=F64), T([[0.5, 0.5]], dtype=F64), torch.ones(1, 2),
                           cliprange_value=0.2)
    assert loss.item() == pytest.approx(0.5 * (0.09 + 0.04) / 2) and st_["vf_clipfrac"] == 0.5
    loss.backward()
    assert v.grad[0].tolist() == pytest.approx([0.0, 0.5 * 2 * 0.2 / 2])
    loss, _ = value_loss(v.detach(), T([[1.0, 0.8]], dtype=F64), T([[0.5, 0.5]], dtype=F64), torch.ones(1, 2),
                         cliprange_value=None)
    assert loss.item() == pytest.approx(0.5 * (0.01 + 0.04) / 2)


def test_gae_registry_entry():
    b = AdvantageBatch(rewards=T([0.0, 1.0, 0.0], dtype=F64), group=T([0, 0, 0]), traj=T([0, 0, 1]),
                       step=T([0, 1, 0]), values=T([0.5, 0.8, 0.2], dtype=F64))
    adv, _ = gae(b.rewards, b.values, b.traj, b.step, gamma=0.9)
    assert torch.allclose(get_estimator("gae", gamma=0.9)(b), whiten(adv))
    assert torch.allclose(get_estimator("gae", gamma=0.9, whiten_adv=False)(b), adv)
    assert get_estimator("gae").level == "step"
    with pytest.raises(ValueError, match="values"):
        get_estimator("gae")(AdvantageBatch(rewards=b.rewards, group=b.group, traj=b.traj, step=b.step))


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 25).flatmap(lambda n: st.tuples(
    st.lists(st.floats(-2, 2, width=32), min_size=n, max_size=n),
    st.lists(st.floats(-2, 2, width=32), min_size=n, max_size=n),
    st.lists(st.integers(-2, 2), min_size=n, max_size=n),
    st.permutations(list(range(n))))), st.sampled_from([0.0, 0.9, 1.0]), st.sampled_from([0.0, 0.95, 1.0]))
def test_gae_matches_reference(case, gamma, lam):
    r, v, traj, step = case
    adv, ret = gae(T(r, dtype=F64), T(v, dtype=F64), T(traj, dtype=torch.long), T(step, dtype=torch.long),
                   gamma=gamma, lam=lam)
    want_a, want_r = ref.gae_ref(r, v, traj, step, gamma=gamma, lam=lam)
    assert torch.allclose(adv, T(want_a, dtype=F64), atol=1e-9) and torch.allclose(ret, T(want_r, dtype=F64), atol=1e-9)


@st.composite
def token_cases(draw):
    B, Tn = draw(st.integers(1, 4)), draw(st.integers(1, 6))
    vals = st.lists(st.floats(-2, 2, width=32), min_size=B * Tn, max_size=B * Tn)
    mask = draw(st.lists(st.sampled_from([0.0, 1.0]), min_size=B * Tn, max_size=B * Tn))
    return B, Tn, draw(vals), draw(vals), draw(vals), mask


@settings(max_examples=40, deadline=None)
@given(token_cases(), st.sampled_from([0.9, 1.0]), st.sampled_from([0.0, 0.95, 1.0]), st.sampled_from(AGG_MODES),
       st.sampled_from([None, 0.2]))
def test_tokens_and_value_loss_match_reference(case, gamma, lam, agg, clip):
    B, Tn, a, b, c, m = case
    rw, vv, mk = (T(x, dtype=F64).reshape(B, Tn) for x in (a, b, m))
    adv, ret = gae_tokens(rw, vv, mk, gamma=gamma, lam=lam)
    want_a, want_r = ref.gae_tokens_ref(rw.tolist(), vv.tolist(), mk.tolist(), gamma=gamma, lam=lam)
    assert torch.allclose(adv, T(want_a, dtype=F64), atol=1e-9) and torch.allclose(ret, T(want_r, dtype=F64), atol=1e-9)
    # the value loss of predictions c against those returns, old values vv: value and gradient
    v1 = T(c, dtype=F64).reshape(B, Tn).requires_grad_(True)
    v2 = v1.detach().clone().requires_grad_(True)
    got, _ = value_loss(v1, ret, vv, mk, cliprange_value=clip, agg=agg)
    want = ref.value_loss_ref(v2, ret, vv, mk, cliprange_value=clip, agg=agg)
    assert got.item() == pytest.approx(float(want.detach()), rel=1e-9, abs=1e-12)
    got.backward()
    want.backward()
    assert torch.allclose(v1.grad, v2.grad, atol=1e-12)
