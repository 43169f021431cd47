"""verl's other critic-free estimators: REINFORCE++, REINFORCE++-baseline, ReMax, OPO, GPG, GRPO pass@k.

Known answers are computed by hand from the definitions; the vectorised functions equal the per-sample
references in float64 on random batches (ties, constant and singleton groups, zero lengths).  verl source
read: ``verl/trainer/ppo/core_algos.py`` at commit b178a3cd56f58b2d502255daba591e92833930a7.
"""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from stratagym.algorithms import AdvantageBatch, get_estimator
from stratagym.algorithms import reference as ref
from stratagym.algorithms.advantages import (
    gpg,
    grpo_passk,
    informative_groups,
    opo,
    reinforce_pp,
    reinforce_pp_baseline,
    remax,
    whiten,
)
from stratagym.errors import ConfigError

T = torch.tensor
F64 = torch.float64


def close(a, b, tol=1e-9):
    b = torch.as_tensor(b, dtype=a.dtype)
    assert a.shape == b.shape
    assert torch.allclose(a, b, atol=tol, rtol=1e-9), f"\n got {a.tolist()}\nwant {b.tolist()}"


# ------------------------------------------------------------------ known answers, by hand


def test_reinforce_pp_whitens_over_the_batch():
    """core_algos.py:582-618: token returns (gamma=1: the reward on every token), masked_whiten over all
    tokens (Bessel variance, verl_F.masked_var).  r=[1,0,0,0]: mean 1/4, var (3/4 of squares: 0.75)/3 = 1/4."""
    r = T([1.0, 0.0, 0.0, 0.0], dtype=F64)
    close(reinforce_pp(r), [1.5, -0.5, -0.5, -0.5], tol=1e-7)
    # token weighting: lengths [2,1,1,0] = tokens [1,1],[0],[0]: mean 1/2, var 4*(1/4)/3 = 1/3
    s = math.sqrt(1 / 3)
    close(reinforce_pp(r, lengths=T([2, 1, 1, 0])), [0.5 / s, -0.5 / s, -0.5 / s, -0.5 / s], tol=1e-7)
    # one value everywhere, or a single token: nothing to whiten (verl raises on a total weight of 1)
    close(reinforce_pp(T([0.3, 0.3], dtype=F64)), [0.0, 0.0])
    close(whiten(T([0.3, 0.9], dtype=F64), T([1, 0])), [0.0, 0.0])


def test_reinforce_pp_baseline():
    """core_algos.py:422-473: r - mean_g, then masked_whiten.  Groups a=[1,0], b=[1,1]: centred [.5,-.5,0,0],
    var 0.5/3."""
    r = T([1.0, 0.0, 1.0, 1.0], dtype=F64)
    g = T([1, 1, 2, 2])
    a = 0.5 / math.sqrt(0.5 / 3)
    close(reinforce_pp_baseline(r, g), [a, -a, 0.0, 0.0], tol=1e-7)
    # a singleton: stratagym's default gives it 0 before whitening, verl's convention keeps r (mean 0)
    r3, g3 = T([1.0, 0.0, 1.0], dtype=F64), T([1, 1, 2])
    centred_verl = [0.5, -0.5, 1.0]
    m = sum(centred_verl) / 3
    sd = math.sqrt(sum((x - m) ** 2 for x in centred_verl) / 2)
    close(reinforce_pp_baseline(r3, g3, singleton="verl"), [(x - m) / sd for x in centred_verl], tol=1e-7)
    sd0 = math.sqrt(0.5 / 2)
    close(reinforce_pp_baseline(r3, g3), [0.5 / sd0, -0.5 / sd0, 0.0], tol=1e-7)


def test_remax():
    """core_algos.py:621-654: returns (the outcome reward) minus the greedy rollout's reward."""
    close(remax(T([1.0, 0.0, 0.5], dtype=F64), T([0.5, 0.5, 1.0], dtype=F64)), [0.5, -0.5, -0.5])


def test_opo_length_weighted_baseline():
    """core_algos.py:528-579: baseline = sum(len * r) / sum(len) per group; group of one: baseline 0.
    Group a: r=[1,0], len=[1,3] -> b = 1/4."""
    r = T([1.0, 0.0, 1.0], dtype=F64)
    g, ln = T([1, 1, 2]), T([1, 3, 5])
    close(opo(r, g, ln), [0.75, -0.25, 0.0])
    close(opo(r, g, ln, singleton="verl"), [0.75, -0.25, 1.0])
    # equal lengths give the plain mean; zero total length falls back to it too
    close(opo(r[:2], g[:2], T([2, 2])), [0.5, -0.5])
    close(opo(r[:2], g[:2], T([0, 0])), [0.5, -0.5])


def test_gpg():
    """core_algos.py:657-717: alpha = B / #nonzero rewards; A = alpha (r - mean_g) / f_norm, no std.
    8 rows, 5 non-zero -> alpha 1.6; group a [1,0,0,0] mean 1/4, group b constant."""
    r = T([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0], dtype=F64)
    g = T([0, 0, 0, 0, 1, 1, 1, 1])
    close(gpg(r, g), [1.2, -0.4, -0.4, -0.4, 0, 0, 0, 0])
    close(gpg(r, g, f_norm=2.0), [0.6, -0.2, -0.2, -0.2, 0, 0, 0, 0])
    close(gpg(T([0.0, 0.0], dtype=F64), T([0, 0])), [0.0, 0.0])  # no non-zero reward: alpha = B / 1


def test_grpo_passk():
    """core_algos.py:360-419: only the group's best row gets (r_max - r_second) / (std + eps)."""
    r = T([0.2, 1.0, 0.5], dtype=F64)
    g = T([3, 3, 3])
    mu = 1.7 / 3
    sd = math.sqrt(sum((x - mu) ** 2 for x in (0.2, 1.0, 0.5)) / 2)
    close(grpo_passk(r, g), [0.0, 0.5 / (sd + 1e-6), 0.0])
    close(grpo_passk(r, g, norm=False), [0.0, 0.5, 0.0])
    # a tie at the top: r_max - r_second = 0 for everyone; a group of one gets 0 (verl raises)
    close(grpo_passk(T([1.0, 0.2, 1.0, 0.7], dtype=F64), T([1, 1, 1, 2])), [0.0, 0.0, 0.0, 0.0])


def test_informative_groups_dapo_filter():
    """verl recipe/dapo/dapo_ray_trainer.py (filter_groups): keep a group whose metric std > 0 or that has
    one member.  Groups: a=[1,0] varied, b=[1,1] tied, c=[0.5] alone."""
    r = T([1.0, 0.0, 1.0, 1.0, 0.5], dtype=F64)
    g = T([7, 7, 8, 8, 9])
    assert informative_groups(r, g).tolist() == [True, True, False, False, True]
    assert informative_groups(r, g, keep_singletons=False).tolist() == [True, True, False, False, False]


def test_registry_entries():
    b = AdvantageBatch(rewards=T([1.0, 0.0, 1.0], dtype=F64), group=T([1, 1, 2]),
                       lengths=T([1, 3, 5]), baseline=T([0.5, 0.5, 0.0], dtype=F64))
    close(get_estimator("opo")(b), opo(b.rewards, b.group, b.lengths))
    close(get_estimator("remax")(b), [0.5, -0.5, 1.0])
    close(get_estimator("gpg", f_norm=2.0)(b), gpg(b.rewards, b.group, f_norm=2.0))
    close(get_estimator("grpo_passk")(b), grpo_passk(b.rewards, b.group))
    close(get_estimator("reinforce_plus_plus")(b), reinforce_pp(b.rewards, lengths=b.lengths))
    close(get_estimator("reinforce_plus_plus_baseline", singleton="verl")(b),
          reinforce_pp_baseline(b.rewards, b.group, lengths=b.lengths, singleton="verl"))
    assert get_estimator("gpg+hadw", hadw_lam=1.0).name == "gpg+hadw"
    with pytest.raises(ValueError, match="baseline"):
        get_estimator("remax")(AdvantageBatch(rewards=b.rewards, group=b.group))
    with pytest.raises(ValueError, match="lengths"):
        get_estimator("opo")(AdvantageBatch(rewards=b.rewards, group=b.group))
    with pytest.raises(ConfigError, match="valid: \\['f_norm', 'singleton'\\]"):
        get_estimator("gpg", alpha=1.0)


# ------------------------------------------------------------------ vectorised == reference


@st.composite
def batches(draw):
    n = draw(st.integers(0, 30))
    if draw(st.booleans()):
        r = draw(st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0]), min_size=n, max_size=n))
    else:
        r = draw(st.lists(st.floats(-3, 3, allow_nan=False, width=32), min_size=n, max_size=n))
    pool = draw(st.lists(st.integers(-10**12, 10**12), min_size=1, max_size=6, unique=True))
    g = draw(st.lists(st.sampled_from(pool), min_size=n, max_size=n))
    ln = draw(st.lists(st.integers(0, 6), min_size=n, max_size=n))
    b = draw(st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=n, max_size=n))
    return r, g, ln, b


@settings(max_examples=60, deadline=None)
@given(batches())
def test_vectorised_matches_reference(case):
    r, g, ln, b = case
    rt, gt, lt = T(r, dtype=F64), T(g, dtype=torch.long), T(ln, dtype=torch.long)
    for lengths in (None, ln):
        lt_ = None if lengths is None else lt
        close(reinforce_pp(rt, lengths=lt_), ref.reinforce_pp_ref(r, lengths=lengths), tol=1e-7)
        for single in ("zero", "verl"):
            close(reinforce_pp_baseline(rt, gt, lengths=lt_, singleton=single),
                  ref.reinforce_pp_baseline_ref(r, g, lengths=lengths, singleton=single), tol=1e-7)
    close(remax(rt, T(b, dtype=F64)), ref.remax_ref(r, b))
    for single in ("zero", "verl"):
        close(opo(rt, gt, lt, singleton=single), ref.opo_ref(r, g, ln, singleton=single))
        close(gpg(rt, gt, f_norm=0.5, singleton=single), ref.gpg_ref(r, g, f_norm=0.5, singleton=single))
    for norm in (True, False):
        close(grpo_passk(rt, gt, norm=norm), ref.grpo_passk_ref(r, g, norm=norm), tol=1e-7)
    for keep in (True, False):
        assert informative_groups(rt, gt, keep_singletons=keep).tolist() == \
            ref.informative_groups_ref(r, g, keep_singletons=keep)


# ------------------------------------------------------------------ whitening over data-parallel processes


def _in_threads(parts, fn):
    """Run ``fn(part, gather)`` for every part in its own thread, as N data-parallel processes would:
    ``gather`` is a barrier that stacks every thread's 1-D tensor, in part order."""
    from stratagym.testing.threads import run_as_processes

    return run_as_processes(len(parts), lambda rank, all_gather: fn(
        parts[rank], lambda t: torch.stack(all_gather(t.clone()))))


@pytest.mark.parametrize("cuts", [(3, 7), (0, 7), (7, 10), (2, 2, 9)])
def test_whiten_with_gather_is_the_global_whitening(cuts):
    """Rows split over 'processes' (some with none): with ``gather`` each process's rows are whitened with
    the global mean and variance, token-weighted or not; constant or one-row global batches give 0."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(10, generator=g, dtype=F64)
    lengths = torch.randint(0, 5, (10,), generator=g).to(F64)
    bounds = [0, *cuts, 10]
    for w in (None, lengths):
        parts = [(x[a:b], None if w is None else w[a:b]) for a, b in zip(bounds, bounds[1:])]
        got = _in_threads(parts, lambda p, gather: whiten(p[0], p[1], gather=gather))
        close(torch.cat(got), whiten(x, w), tol=1e-12)
    for values in (torch.full((10,), 0.5, dtype=F64), torch.tensor([2.0] + [0.0] * 9, dtype=F64)[:1]):
        parts = [values[:1], values[1:]]
        got = _in_threads(parts, lambda p, gather: whiten(p, gather=gather))
        assert float(torch.cat(got).abs().sum()) == 0.0


def test_batch_wide_estimators_with_gather_equal_the_whole_batch():
    """``gae``, REINFORCE++ and REINFORCE++-baseline read ``batch.gather``: with whole groups (and whole
    trajectories) per process they give the whole batch's advantages; a process with no row joins the
    collective through the trainer's ``estimate_advantages``. Estimators without batch statistics are
    not ``batch_wide``."""
    from stratagym.training.trainer import estimate_advantages

    g = torch.Generator().manual_seed(1)
    n = 12
    rewards = torch.randn(n, generator=g)
    group = torch.arange(n) // 4
    traj = torch.arange(n) // 2
    step = torch.arange(n) % 2
    values = torch.randn(n, generator=g)
    lengths = torch.randint(1, 6, (n,), generator=g).float()

    def batch(sl):
        return AdvantageBatch(rewards=rewards[sl], group=group[sl], traj=traj[sl], step=step[sl],
                              values=values[sl], lengths=lengths[sl])

    for name in ("gae", "reinforce_plus_plus", "reinforce_plus_plus_baseline"):
        est = get_estimator(name)
        assert est.batch_wide
        whole = est(batch(slice(0, n)))
        parts = [slice(0, 4), slice(4, 4), slice(4, n)]  # the middle process has no row

        def run(sl, gather):
            b = batch(sl)
            b.gather = gather
            return estimate_advantages(est, b)

        close(torch.cat(_in_threads(parts, run)).double(), whole.double(), tol=1e-5)
    assert not get_estimator("grpo").batch_wide and not get_estimator("rloo").batch_wide
