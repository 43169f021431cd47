"""verl's and TRL's policy-loss modes through the loss registry: known answers by hand, and the vectorised
losses equal to the per-token references in float64, values and gradients (padding, fully-masked rows).

verl source read: ``verl/trainer/ppo/core_algos.py`` at commit b178a3cd56f58b2d502255daba591e92833930a7
(line numbers below); the DPPO losses follow verl's ``compute_policy_loss_dppo_tv/kl`` added after it.
TRL: 1.16.0, ``trl/trainer/grpo_trainer.py`` (``_compute_loss``).
"""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from stratagym.algorithms import reference as ref
from stratagym.algorithms.losses import AGG_MODES, agg_loss, kl_penalty, policy_loss
from stratagym.algorithms.registry import get_policy_loss, list_policy_losses
from stratagym.errors import ConfigError

T = torch.tensor
F64 = torch.float64


def run(lp_vals, old_vals, adv, mask=None, **kw):
    lp = torch.log(T(lp_vals, dtype=F64)).requires_grad_(True)
    old = torch.log(T(old_vals, dtype=F64))
    m = torch.ones_like(old) if mask is None else T(mask, dtype=F64)
    loss, stats = policy_loss(lp, old, T(adv, dtype=F64), m, **kw)
    loss.backward()
    return loss.item(), lp.grad[0].tolist(), stats


# ------------------------------------------------------------------ known answers, by hand


def test_gpg_plain_policy_gradient():
    """core_algos.py:1414-1447: -logp * A.  p=[.5,.25], A=1, token-mean: (ln2 + 2 ln2)/2; grad -A/2."""
    loss, grad, _ = run([[0.5, 0.25]], [[0.5, 0.5]], [1.0], loss="gpg")
    assert loss == pytest.approx(1.5 * math.log(2))
    assert grad == pytest.approx([-0.5, -0.5])


def test_cispo_verl_and_trl():
    """core_algos.py:1721-1779: -sg(clip(r, 0.8, 1.2)) * A * logp.  r=[1.5, 0.5] -> weights [1.2, 0.8]; the
    gradient is -w/2 per token although both tokens are clipped.  TRL (grpo_trainer.py, loss_type cispo):
    sg(min(r, epsilon_high)) -> with cap 1.3: [1.3, 0.5]."""
    loss, grad, st = run([[0.75, 0.25]], [[0.5, 0.5]], [1.0], loss="cispo")
    assert loss == pytest.approx(-(1.2 * math.log(0.75) + 0.8 * math.log(0.25)) / 2)
    assert grad == pytest.approx([-0.6, -0.4]) and st["clip_frac"] == 1.0
    _, grad, st = run([[0.75, 0.25]], [[0.5, 0.5]], [1.0], loss="cispo", cap=1.3)
    assert grad == pytest.approx([-0.65, -0.25]) and st["clip_frac"] == 0.5


def test_sapo_gate():
    """core_algos.py:1329-1411: gate sigmoid(tau (r - 1)) * 4 / tau; at r = 1 it is 2 / tau and its slope in
    logp is sigmoid'(0) * 4 = 1.  tau_pos 1 for A > 0, tau_neg 1.05 otherwise."""
    loss, grad, _ = run([[0.5, 0.5]], [[0.5, 0.5]], [1.0], loss="sapo")
    assert loss == pytest.approx(-2.0) and grad == pytest.approx([-0.5, -0.5])
    loss, grad, _ = run([[0.5, 0.5]], [[0.5, 0.5]], [-1.0], loss="sapo")
    assert loss == pytest.approx(2.0 / 1.05) and grad == pytest.approx([0.5, 0.5])


def test_geo_mean_gmpo():
    """core_algos.py:1635-1718: token log-ratios [ln2, -ln2] clipped on the limiting side by sign(A):
    A > 0 keeps min(d, clip(d)) = [0.2, -ln2]; A < 0 keeps max = [ln2, -0.2]; ratio = exp(mean)."""
    loss, _, st = run([[1.0, 0.25]], [[0.5, 0.5]], [1.0], loss="geo_mean")
    assert loss == pytest.approx(-math.exp((0.2 - math.log(2)) / 2))
    assert st["clip_frac"] == 1.0 and st["clip_frac_lower"] == 0.0
    loss, _, st = run([[1.0, 0.25]], [[0.5, 0.5]], [-1.0], loss="geo_mean")
    assert loss == pytest.approx(math.exp((math.log(2) - 0.2) / 2))
    assert st["clip_frac_lower"] == 1.0


def test_geo_mean_takes_the_geometric_mean_of_per_token_weights():
    """core_algos.py:1697-1705: a row's token weights enter as exp(mean_t log(w + 1e-10)), the geometric
    mean, as the sequence ratio is one.  log-probs = old = [-1, -2] (ratio 1), A = 1, weights [1, 4]:
    sqrt(1 * 4) = 2, so the loss is -2 (the arithmetic mean gave -2.5) and each token's gradient is
    -A * ratio / 2 * 2 = -1 (was -1.25)."""
    lp = T([[-1.0, -2.0]], dtype=F64).requires_grad_(True)
    loss, _ = policy_loss(lp, lp.detach(), T([1.0], dtype=F64), torch.ones(1, 2, dtype=F64), loss="geo_mean",
                          weights=T([[1.0, 4.0]], dtype=F64))
    loss.backward()
    assert loss.item() == pytest.approx(-2.0)
    assert lp.grad[0].tolist() == pytest.approx([-1.0, -1.0])
    # a per-row weight is its own geometric mean: 3 scales the sequence's loss by 3
    lp = T([[-1.0, -2.0]], dtype=F64)
    loss, _ = policy_loss(lp, lp, T([1.0], dtype=F64), torch.ones(1, 2, dtype=F64), loss="geo_mean",
                          weights=T([3.0], dtype=F64))
    assert loss.item() == pytest.approx(-3.0)
    with pytest.raises(ValueError, match="geometric mean"):
        policy_loss(lp, lp, T([1.0], dtype=F64), torch.ones(1, 2, dtype=F64), loss="geo_mean",
                    weights=T([[1.0, -1.0]], dtype=F64))


def test_clip_cov_cuts_the_high_covariance_token():
    """core_algos.py:1450-1552: cov = (A - mean A)(logp - mean logp) = [2, 1, 0] for A=[2,-1,-1],
    logp=[0,-2,-1]; only token 0 lies in (lb=1, ub=5), so its gradient is cut.  r = 1: loss (0+1+1)/3."""
    lp = T([[0.0, -2.0, -1.0]], dtype=F64, requires_grad=True)
    adv = T([[2.0, -1.0, -1.0]], dtype=F64)
    loss, st = policy_loss(lp, lp.detach(), adv, torch.ones(1, 3), loss="clip_cov", clip_cov_ratio=0.5)
    assert loss.item() == pytest.approx(2 / 3) and st["clip_frac"] == pytest.approx(1 / 3)
    loss.backward()
    assert lp.grad[0].tolist() == pytest.approx([0.0, 1 / 3, 1 / 3])


def test_kl_cov_penalises_the_top_covariance_token():
    """core_algos.py:1555-1632: same covariances [2, 1, 0]; k = max(1, int(3 * 0.0002)) = 1 token (token 0)
    gets + ppo_kl_coef |logp - old| (0.1 * 0.5)."""
    lp = T([[0.0, -2.0, -1.0]], dtype=F64, requires_grad=True)
    old = T([[-0.5, -2.0, -1.0]], dtype=F64)
    adv = T([[2.0, -1.0, -1.0]], dtype=F64)
    loss, st = policy_loss(lp, old, adv, torch.ones(1, 3), loss="kl_cov")
    assert loss.item() == pytest.approx((-2 * math.exp(0.5) + 0.05 + 1 + 1) / 3)
    assert st["kl_abs"] == pytest.approx(0.5 / 3)


@pytest.mark.parametrize("name", ["dppo_tv", "dppo_kl"])
def test_dppo_masks_tokens_outside_the_divergence_region(name):
    """DPPO (arXiv 2602.04879): p 0.5 -> 0.9 with A > 0 moves TV 0.4 > 0.2 and binary KL ln(5/3) > 0.2: the
    token is masked.  The other token keeps -A * sg(min(r, 3)) * logp = ln2 / 2 (token-mean)."""
    loss, grad, st = run([[0.9, 0.5]], [[0.5, 0.5]], [1.0], loss=name)
    assert loss == pytest.approx(math.log(2) / 2)
    assert grad == pytest.approx([0.0, -0.5]) and st["clip_frac"] == 0.5


@pytest.mark.parametrize("name", ["dppo_tv", "dppo_kl"])
def test_dppo_truncation_cap_defaults_to_verls_3(name):
    """verl reads ``config.get("clip_ratio_c", 20.0)``, but its ActorConfig always holds clip_ratio_c = 3.0
    (verl/workers/config/actor.py:143), so 3 is the cap verl applies.  p 0.1 -> 0.5 with A = -1 stays in
    the region (p rose), r = 5 is truncated to 3: loss -A * 3 * ln 0.5 = -3 ln2, gradient 3; clip_c=20
    keeps r = 5."""
    loss, grad, st = run([[0.5]], [[0.1]], [-1.0], loss=name)
    assert loss == pytest.approx(-3 * math.log(2)) and grad == pytest.approx([3.0])
    assert st["clip_frac_lower"] == 1.0
    loss, grad, st = run([[0.5]], [[0.1]], [-1.0], loss=name, clip_c=20.0)
    assert loss == pytest.approx(-5 * math.log(2)) and grad == pytest.approx([5.0])
    assert st["clip_frac_lower"] == 0.0


def test_vespo_gamma_weight():
    """TRL grpo_trainer.py (get_gamma_weights): phi(w) = exp(lam + k ln w - lam w), w the sequence ratio
    exp(sum of token log-ratios), phi detached; loss -phi A logp.  w = 1 gives phi = 1; token ratios [2, 1]
    give w = 2 and, for A > 0 (k 2, lam 3), phi = 4 e^-3."""
    loss, grad, _ = run([[0.5, 0.5]], [[0.5, 0.5]], [1.0], loss="vespo")
    assert loss == pytest.approx(math.log(2)) and grad == pytest.approx([-0.5, -0.5])
    loss, grad, _ = run([[0.5, 0.5]], [[0.25, 0.5]], [1.0], loss="vespo")
    phi = 4 * math.exp(-3)
    assert loss == pytest.approx(phi * math.log(2)) and grad == pytest.approx([-phi / 2, -phi / 2])
    # A < 0 uses k_neg 3, lambda_neg 2: phi = exp(2 + 3 ln 2 - 4) = 8 e^-2
    loss, _, _ = run([[0.5, 0.5]], [[0.25, 0.5]], [-1.0], loss="vespo")
    assert loss == pytest.approx(-8 * math.exp(-2) * math.log(2))


def test_vanilla_trl_two_sided_delta():
    """TRL grpo_trainer.py (``delta``): the unclipped branch's ratio is capped at delta.  r=3, A=-1:
    max(min(3, 2), clip(3)) = 2; without delta 3."""
    assert run([[0.75]], [[0.25]], [-1.0], delta=2.0)[0] == pytest.approx(2.0)
    assert run([[0.75]], [[0.25]], [-1.0])[0] == pytest.approx(3.0)


LOSS = T([[1.0, 2.0, 3.0, 100.0], [4.0, 5.0, 100.0, 100.0], [7.0, 7.0, 7.0, 7.0]], dtype=F64)
MASK = T([[1, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]])


def test_token_sum_and_global_normalisers():
    """token-sum: 6 + 9 = 15.  verl agg_loss (core_algos.py:1025-1081): with global_batch_size the sequence
    modes divide the summed sequence losses by it (here 4: e.g. rows on other ranks), with batch_num_tokens
    token-mean divides by it; without, stratagym divides by B = 3 rows (the fully-masked one counts 0)."""
    assert agg_loss(LOSS, MASK, "token-sum").item() == 15.0
    assert agg_loss(LOSS, MASK, "token-mean", batch_num_tokens=10).item() == 1.5
    assert agg_loss(LOSS, MASK, "seq-mean-token-sum", global_batch_size=4).item() == pytest.approx(15 / 4)
    assert agg_loss(LOSS, MASK, "seq-mean-token-sum").item() == pytest.approx(15 / 3)
    assert agg_loss(LOSS, MASK, "seq-mean-token-mean", global_batch_size=2).item() == pytest.approx((2 + 4.5) / 2)
    assert agg_loss(LOSS, MASK, "seq-mean-token-sum-norm", global_batch_size=5,
                    loss_scale_factor=3).item() == pytest.approx(15 / 3 / 5)
    assert agg_loss(LOSS, MASK, "token-mean", batch_num_tokens=0).item() == 0.0


def test_straight_through_kl():
    """core_algos.py:1841-1864: ``k3+`` = k3's value with k2's gradient (d = logp - ref)."""
    lp = T([math.log(0.5)], dtype=F64, requires_grad=True)
    r = T([math.log(0.25)], dtype=F64)
    for kind, value in (("k3+", 0.5 + math.log(2) - 1), ("low_var_kl+", 0.5 + math.log(2) - 1),
                        ("k1+", math.log(2)), ("abs+", math.log(2)), ("k2+", 0.5 * math.log(2) ** 2)):
        lp.grad = None
        v = kl_penalty(lp, r, kind)
        v.sum().backward()
        assert v.item() == pytest.approx(value), kind
        assert lp.grad.item() == pytest.approx(math.log(2)), kind


def test_trl_bias_corrected_kl():
    """TRL grpo_trainer.py (use_bias_correction_kl): per-token KL times the importance ratio.  r = 2,
    k1 = ln2 -> 2 ln2 with kl_coef 1 (A = 0, so the policy term is 0)."""
    lp = torch.full((1, 2), math.log(0.5), dtype=F64)
    old = torch.full((1, 2), math.log(0.25), dtype=F64)
    ref_lp = torch.full((1, 2), math.log(0.25), dtype=F64)
    kw = dict(ref_logprob=ref_lp, kl_coef=1.0, kl_type="k1")
    loss, st = policy_loss(lp, old, T([0.0], dtype=F64), torch.ones(1, 2), kl_is_correction=True, **kw)
    assert loss.item() == pytest.approx(2 * math.log(2))
    loss, st = policy_loss(lp, old, T([0.0], dtype=F64), torch.ones(1, 2), **kw)
    assert loss.item() == pytest.approx(math.log(2))


def test_registry_names_and_errors():
    assert set(list_policy_losses()) >= {"vanilla", "gspo", "gpg", "cispo", "sapo", "geo_mean", "clip_cov",
                                         "kl_cov", "dppo_tv", "dppo_kl", "vespo"}
    assert get_policy_loss("ppo").name == "vanilla" and get_policy_loss("GMPO").name == "geo_mean"
    with pytest.raises(ConfigError, match="unknown policy loss 'nope'; registered: \\[.*'cispo'"):
        get_policy_loss("nope")
    with pytest.raises(ConfigError, match="valid: \\['tau_neg', 'tau_pos'\\]"):
        get_policy_loss("sapo", clip_low=0.1)
    lp = torch.zeros(1, 2)
    with pytest.raises(ConfigError, match="clip_c"):
        policy_loss(lp, lp, T([1.0]), torch.ones(1, 2), loss="cispo", clip_c=3.0)
    with pytest.raises(ValueError, match="GSPO"):
        policy_loss(lp, lp, T([1.0]), torch.ones(1, 2), loss="cispo", ratio_level="sequence")


# ------------------------------------------------------------------ vectorised == reference

GRID = [-3.0 + 0.25 * k for k in range(13)]  # dyadic log-probs: means and covariances are exact
LOSS_CASES = [
    ("vanilla", {}), ("vanilla", {"clip_high": 0.28, "clip_c": 3.0}), ("vanilla", {"delta": 1.5}),
    ("gspo", {}), ("gpg", {}), ("cispo", {}), ("cispo", {"cap": 1.5}), ("sapo", {}),
    ("geo_mean", {"clip_low": 0.25, "clip_high": 0.5}), ("clip_cov", {"clip_cov_ratio": 0.3, "seed": 3}),
    ("kl_cov", {"kl_cov_ratio": 0.3}), ("dppo_tv", {}), ("dppo_kl", {"clip_c": 2.0}), ("vespo", {}),
    ("vespo", {"k_pos": 1.0, "lambda_neg": 0.5}),
]


@st.composite
def loss_batches(draw):
    B, Tn = draw(st.integers(1, 4)), draw(st.integers(1, 5))
    grid = st.sampled_from(GRID)
    lp = draw(st.lists(grid, min_size=B * Tn, max_size=B * Tn))
    old = draw(st.lists(grid, min_size=B * Tn, max_size=B * Tn))
    lens = draw(st.lists(st.integers(0, Tn), min_size=B, max_size=B))  # right padding, rows of length 0
    per_token = draw(st.booleans())
    adv = draw(st.lists(st.sampled_from([-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0]),
                        min_size=B * Tn if per_token else B, max_size=B * Tn if per_token else B))
    n_w = draw(st.sampled_from([None, B, B * Tn]))  # none, per row or per token
    weights = None if n_w is None else draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0]), min_size=n_w, max_size=n_w))
    return B, Tn, lp, old, lens, per_token, adv, weights


@settings(max_examples=30, deadline=None)
@given(loss_batches(), st.sampled_from(AGG_MODES), st.booleans())
def test_losses_match_reference_values_and_gradients(case, agg, global_norm):
    B, Tn, lp_v, old_v, lens, per_token, adv_v, w_v = case
    mask = torch.zeros(B, Tn, dtype=F64)
    for i, n in enumerate(lens):
        mask[i, :n] = 1.0
    old = T(old_v, dtype=F64).reshape(B, Tn)
    adv = T(adv_v, dtype=F64).reshape(B, Tn) if per_token else T(adv_v, dtype=F64)
    adv_tok = adv if per_token else adv.unsqueeze(-1).expand(B, Tn)
    w = None
    if w_v is not None:  # (B,) per row or (B, T) per token; the reference takes them per token
        w = T(w_v, dtype=F64).reshape(B) if len(w_v) == B else T(w_v, dtype=F64).reshape(B, Tn)
    w_tok = None if w is None else (w.unsqueeze(-1).expand(B, Tn) if w.dim() == 1 else w)
    norms = {"global_batch_size": B + 1, "batch_num_tokens": 7} if global_norm else {}
    for name, opts in LOSS_CASES:
        lp1 = T(lp_v, dtype=F64).reshape(B, Tn).requires_grad_(True)
        lp2 = lp1.detach().clone().requires_grad_(True)
        got, _ = policy_loss(lp1, old, adv, mask, loss=name, agg=agg, weights=w, **norms, **opts)
        want = ref.policy_loss_ref(lp2, old, adv_tok, mask, loss=name, agg=agg, norms=norms,
                                   weights=w_tok, **opts)
        assert got.item() == pytest.approx(float(want.detach()), rel=1e-9, abs=1e-9), name
        got.backward()
        if want.requires_grad:
            want.backward()
        g2 = torch.zeros_like(lp2) if lp2.grad is None else lp2.grad
        assert torch.allclose(lp1.grad, g2, rtol=1e-9, atol=1e-9), (name, lp1.grad, g2)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(GRID), st.sampled_from(GRID)), min_size=1, max_size=6),
       st.sampled_from(sorted(["k1", "kl", "k2", "mse", "k3", "low_var_kl", "abs", "k1+", "k3+",
                               "low_var_kl+", "abs+", "k2+"])))
def test_kl_matches_reference_values_and_gradients(pairs, kind):
    lp = T([p for p, _ in pairs], dtype=F64, requires_grad=True)
    r = T([q for _, q in pairs], dtype=F64)
    kl_penalty(lp, r, kind).sum().backward()
    for i, (p, q) in enumerate(pairs):
        x = T(p, dtype=F64, requires_grad=True)
        v = ref.kl_ref(x, T(q, dtype=F64), kind)
        assert kl_penalty(lp.detach()[i:i + 1], r[i:i + 1], kind).item() == pytest.approx(float(v.detach()), abs=1e-12)
        v.backward()
        assert lp.grad[i].item() == pytest.approx(x.grad.item() if x.grad is not None else 0.0, abs=1e-12)
