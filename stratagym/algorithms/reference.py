"""Straightforward per-sample reference implementations (pure Python loops over lists).

Written from the definitions (and, for GiGPO/HGPO, the structure of verl-agent's official
functions: dicts of lists keyed by group, one statistic per group, one pass per row), independent
of the vectorised estimator families (re-exported by :mod:`stratagym.algorithms.advantages`).
Tests compare the two on random inputs and ``benchmarks/advantages.py`` times them.  Inputs are
plain Python lists (``context`` a list of lists); outputs are lists of floats.  Not meant for
training.  :data:`ESTIMATORS` maps every registered estimator name to its reference, and
:func:`policy_loss_ref` covers every registered loss: ``tests/algorithms/test_every_entry.py``
fails for a registered entry without one.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from typing import Optional, Sequence

import torch

__all__ = [
    "ESTIMATORS",
    "grpo_ref",
    "rloo_ref",
    "stratified_ref",
    "step_returns_ref",
    "gigpo_ref",
    "hgpo_ref",
    "hadw_anchors_ref",
    "hadw_ref",
    "whiten_ref",
    "reinforce_pp_ref",
    "reinforce_pp_baseline_ref",
    "remax_ref",
    "opo_ref",
    "gpg_ref",
    "grpo_passk_ref",
    "informative_groups_ref",
    "gae_ref",
    "gae_tokens_ref",
    "value_loss_ref",
    "agg_ref",
    "policy_loss_ref",
    "kl_ref",
]


def _mean(v: Sequence[float]) -> float:
    return sum(v) / len(v)


def _std(v: Sequence[float], ddof: int) -> float:
    if len(v) <= ddof:
        return 0.0
    mu = _mean(v)
    return math.sqrt(sum((x - mu) ** 2 for x in v) / (len(v) - ddof))


def _dev(x: float, members: Sequence[float]) -> float:
    """x - mean(members), exactly 0 when all members are equal."""
    if max(members) == min(members):
        return 0.0
    return x - _mean(members)


def _div(x: float, d: float) -> float:
    """x / d, 0 when x == 0 (a constant group divided by a zero std gives 0)."""
    return 0.0 if x == 0 else x / d


def _by_key(keys: Sequence) -> dict:
    d = defaultdict(list)
    for i, k in enumerate(keys):
        d[k].append(i)
    return d


def grpo_ref(rewards, group, *, scale="group", eps=1e-6, singleton="zero"):
    groups = _by_key(group)
    vals = {k: [rewards[i] for i in idx] for k, idx in groups.items()}
    batch_std = _std(list(rewards), 1) if len(rewards) > 1 else 1.0
    out = []
    for i, r in enumerate(rewards):
        v = vals[group[i]]
        if len(v) == 1:
            if singleton == "zero":
                out.append(0.0)
                continue
            dev, std = r, 1.0
        else:
            dev, std = _dev(r, v), _std(v, 1)
        if scale == "group":
            out.append(_div(dev, std + eps))
        elif scale == "batch":
            out.append(_div(dev, batch_std + eps))
        else:
            out.append(dev)
    return out


def rloo_ref(rewards, group):
    groups = _by_key(group)
    out = []
    for i, r in enumerate(rewards):
        idx = groups[group[i]]
        if len(idx) == 1:
            out.append(0.0)
            continue
        vals = [rewards[j] for j in idx]
        if max(vals) == min(vals):
            out.append(0.0)
            continue
        others = [rewards[j] for j in idx if j != i]
        out.append(r - sum(others) / len(others))
    return out


def stratified_ref(rewards, group, stratum, *, alpha=1.0, eps=1e-6, normalize=True):
    gvals = {k: [rewards[i] for i in idx] for k, idx in _by_key(group).items()}
    cells = _by_key(list(zip(group, stratum)))
    cvals = {k: [rewards[i] for i in idx] for k, idx in cells.items()}
    out = []
    for i, r in enumerate(rewards):
        cv = cvals[(group[i], stratum[i])]
        gv = gvals[group[i]]
        san = _dev(r, cv)
        gn = _dev(r, gv)
        if normalize:
            san = _div(san, _std(cv, 0) + eps)
            gn = _div(gn, _std(gv, 0) + eps)
        out.append(alpha * san + (1 - alpha) * gn)
    return out


def step_returns_ref(rewards, traj, step, *, gamma):
    out = [0.0] * len(rewards)
    for t, idx in _by_key(traj).items():
        idx = sorted(idx, key=lambda i: step[i])
        running = 0.0
        for i in reversed(idx):
            running = rewards[i] + gamma * running
            out[i] = running
    return out


def _episode_ref(scores, group, eps, remove_std):
    vals = defaultdict(list)
    for i, s in enumerate(scores):
        vals[group[i]].append(s)
    out = []
    for i, s in enumerate(scores):
        v = vals[group[i]]
        if len(v) == 1:
            mean_dev, std = s - 0.0, 1.0
        else:
            mean_dev, std = _dev(s, v), _std(v, 1)
        out.append(mean_dev if remove_std else _div(mean_dev, std + eps))
    return out


def gigpo_ref(episode_rewards, step_returns, group, anchor, *, omega=1.0, mode="mean_std_norm", eps=1e-6):
    remove_std = mode == "mean_norm"
    ep = _episode_ref(episode_rewards, group, eps, remove_std)
    cells = defaultdict(list)
    for i in range(len(step_returns)):
        cells[(group[i], anchor[i])].append(step_returns[i])
    out = []
    for i, r in enumerate(step_returns):
        v = cells[(group[i], anchor[i])]
        if len(v) == 1:
            st = 0.0  # mean = r itself, std 1
        else:
            st = _dev(r, v)
            if not remove_std:
                st = _div(st, _std(v, 1) + eps)
        out.append(ep[i] + omega * st)
    return out


def hgpo_ref(
    step_returns,
    group,
    context,
    *,
    alpha=1.0,
    mode="mean_std_norm",
    eps=1e-6,
    weight_offset=1.0,
    episode_rewards: Optional[Sequence[float]] = None,
):
    n = len(step_returns)
    clusters = defaultdict(list)
    for i in range(n):
        for k, h in enumerate(context[i]):
            if h != -1:
                clusters[(k, group[i], h)].append(i)
    items = defaultdict(list)  # row -> [(n_obs, adv)]
    if episode_rewards is not None:
        base = _episode_ref(episode_rewards, group, eps, mode == "mean_norm")
        for i in range(n):
            items[i].append((0, base[i]))
    for (k, _, _), members in clusters.items():
        if len(members) <= 1:
            continue
        v = [step_returns[j] for j in members]
        std = _std(v, 0)
        for j in members:
            a = _dev(step_returns[j], v)
            if mode == "mean_std_norm":
                a = _div(a, std + eps)
            items[j].append((k + 1, a))
    out = []
    for i in range(n):
        kept = [(L, a) for (L, a) in items.get(i, []) if a != 0]
        if not kept:
            out.append(0.0)
            continue
        w = [(L + weight_offset) ** alpha for (L, _) in kept]
        out.append(sum(wi * a for wi, (_, a) in zip(w, kept)) / (sum(w) + eps))
    return out


def hadw_anchors_ref(batch_means, *, anchor="kalman", eta=0.1, m=10, window=10,
                     sigma_source="observations", init_anchor=None):
    """Anchor used for each batch, from the batch mean rewards, by the formulas."""
    used = []
    if anchor == "window":
        hist = deque(maxlen=window)
        for y in batch_means:
            hist.append(y)
            used.append(sum(hist) / len(hist))
        return used
    c = init_anchor
    hist = deque(maxlen=m)
    for y in batch_means:
        prior = y if c is None else c
        used.append(prior)
        hist.append(prior if sigma_source == "anchors" else y)
        sigma = _std(list(hist), 0)
        eta_t = eta * sigma
        c = (1 - eta_t) * prior + eta_t * y
    return used


def hadw_ref(advantages, rewards, group, anchor_value, lam):
    gv = {k: _mean([rewards[i] for i in idx]) for k, idx in _by_key(group).items()}
    out = []
    for i, a in enumerate(advantages):
        diff = gv[group[i]] - anchor_value
        d = -(0 if a == 0 else math.copysign(1, a)) * (0 if diff == 0 else math.copysign(1, diff))
        out.append(a * lam * math.exp(d * abs(diff)))
    return out


# --------------------------------------------------------------------------- verl's critic-free estimators
# Written from the papers' definitions and the loop structure of verl's ``compute_*_advantage``
# functions (dicts of lists keyed by group), with stratagym's documented conventions (singleton
# groups, constant groups, empty totals).


def whiten_ref(values, lengths=None, *, eps=1e-8):
    """Each value counted ``lengths[i]`` times (its tokens), Bessel variance over the count."""
    if not values:
        return []
    w = [1.0] * len(values) if lengths is None else [float(x) for x in lengths]
    tot = sum(w)
    if tot <= 1.0 or max(values) == min(values):
        return [0.0] * len(values)
    mean = sum(wi * v for wi, v in zip(w, values)) / tot
    var = sum(wi * (v - mean) ** 2 for wi, v in zip(w, values)) / (tot - 1.0)
    return [(v - mean) / math.sqrt(var + eps) for v in values]


def reinforce_pp_ref(rewards, *, lengths=None, eps=1e-8):
    return whiten_ref(list(rewards), lengths, eps=eps)


def reinforce_pp_baseline_ref(rewards, group, *, lengths=None, eps=1e-8, singleton="zero"):
    groups = _by_key(group)
    centred = []
    for i, r in enumerate(rewards):
        v = [rewards[j] for j in groups[group[i]]]
        if len(v) == 1:
            centred.append(r if singleton == "verl" else 0.0)
        else:
            centred.append(_dev(r, v))
    return whiten_ref(centred, lengths, eps=eps)


def remax_ref(rewards, baseline):
    return [r - b for r, b in zip(rewards, baseline)]


def opo_ref(rewards, group, lengths, *, singleton="zero"):
    groups = _by_key(group)
    out = []
    for i, r in enumerate(rewards):
        idx = groups[group[i]]
        v = [rewards[j] for j in idx]
        if len(idx) == 1:
            out.append(r if singleton == "verl" else 0.0)
            continue
        if max(v) == min(v):
            out.append(0.0)
            continue
        lsum = sum(lengths[j] for j in idx)
        base = sum(lengths[j] * rewards[j] for j in idx) / lsum if lsum > 0 else _mean(v)
        out.append(r - base)
    return out


def gpg_ref(rewards, group, *, f_norm=1.0, singleton="zero"):
    n = len(rewards)
    alpha = n / max(sum(1 for r in rewards if r != 0), 1)
    groups = _by_key(group)
    out = []
    for i, r in enumerate(rewards):
        v = [rewards[j] for j in groups[group[i]]]
        if len(v) == 1:
            dev = r if singleton == "verl" else 0.0
        else:
            dev = _dev(r, v)
        out.append(alpha * dev / f_norm)
    return out


def grpo_passk_ref(rewards, group, *, norm=True, eps=1e-6):
    out = [0.0] * len(rewards)
    for _, idx in _by_key(group).items():
        if len(idx) < 2:
            continue
        v = [rewards[j] for j in idx]
        best = max(range(len(idx)), key=lambda k: (v[k], -k))  # first row at the maximum
        second = max(v[k] for k in range(len(idx)) if k != best)
        gap = v[best] - second
        if norm:
            gap = _div(gap, _std(v, 1) + eps)
        out[idx[best]] = gap
    return out


def informative_groups_ref(rewards, group, *, keep_singletons=True):
    """verl filter_groups: keep a group whose metric std is > 0, or that has one member."""
    out = []
    for i in range(len(rewards)):
        v = [rewards[j] for j in _by_key(group)[group[i]]]
        out.append(_std(v, 1) > 0 or (keep_singletons and len(v) == 1))
    return out


# --------------------------------------------------------------------------- policy losses
# Per-token loops over 0-d torch scalars (so autograd gives the reference gradient), written from
# the papers' and verl's per-token definitions, independent of the vectorised code in
# :mod:`stratagym.algorithms.losses`.  ``lp``, ``old``, ``adv`` and ``mask`` are (B, T) tensors
# (``adv`` already per token); the result is the aggregated scalar loss.


def _f(v):
    """A Python float of a scalar, detached (comparisons only; no gradient is taken through it)."""
    return float(v.detach()) if isinstance(v, torch.Tensor) else float(v)


def _clip(v, lo=None, hi=None):
    if lo is not None and _f(v) < lo:
        v = v * 0 + lo
    if hi is not None and _f(v) > hi:
        v = v * 0 + hi
    return v


def _abs(d):
    """|d| with torch's subgradient 0 at d = 0."""
    return d if _f(d) > 0 else (-d if _f(d) < 0 else d * 0)


def _sign(a):
    return (a > 0) - (a < 0)


def agg_ref(mat, mask, mode, *, loss_scale_factor=None, global_batch_size=None, batch_num_tokens=None):
    """``mat``: list of rows of 0-d tensors; ``mask``: list of rows of floats."""
    B = len(mat)
    T = len(mat[0]) if B else 0
    zero = mat[0][0] * 0 if B and T else 0.0
    if mode in ("token-mean", "token-sum"):
        tot = sum((mat[i][t] * mask[i][t] for i in range(B) for t in range(T)), zero)
        if mode == "token-sum":
            return tot
        n = sum(mask[i][t] for i in range(B) for t in range(T)) if batch_num_tokens is None else batch_num_tokens
        return tot / n if n > 0 else tot * 0
    seqs = []
    for i in range(B):
        s = sum((mat[i][t] * mask[i][t] for t in range(T)), zero)
        c = sum(mask[i])
        if mode == "seq-mean-token-mean":
            s = s / c if c > 0 else s * 0
        elif mode == "seq-mean-token-sum-norm":
            s = s / (T if loss_scale_factor is None else loss_scale_factor)
        seqs.append(s)
    tot = sum(seqs, zero)
    n = B if global_batch_size is None else global_batch_size
    return tot / n if n > 0 else tot * 0


def policy_loss_ref(lp, old, adv, mask, *, loss="vanilla", agg="token-mean", weights=None, norms=None,
                    **opt):
    """Reference for each registered policy loss (see :mod:`stratagym.algorithms.losses`)."""
    norms = norms or {}
    B, T = lp.shape
    mk = [[_f(mask[i, t]) for t in range(T)] for i in range(B)]
    lo = opt.get("clip_low", 0.2)
    hi = opt.get("clip_high") if opt.get("clip_high") is not None else lo
    tok = lambda i, t: (lp[i, t], _f(old[i, t]), _f(adv[i, t]))  # noqa: E731
    mat = [[None] * T for _ in range(B)]

    if loss == "geo_mean":
        seq = []
        for i in range(B):
            c = sum(mk[i])
            s = lp[i, 0] * 0
            a_sum = 0.0
            for t in range(T):
                x, o, a = tok(i, t)
                d = x - o
                dc = _clip(d, -lo, hi)
                sg = _sign(a)
                s = s + mk[i][t] * sg * (sg * d if _f(sg * d) <= _f(sg * dc) else sg * dc)
                a_sum += a * mk[i][t]
            r = torch.exp(s / (c + 1e-8))
            v = -(a_sum / (c + 1e-8)) * r
            if weights is not None:
                # the geometric mean of the row's token weights (verl): exp(mean_t log(w + 1e-10))
                log_w = sum(math.log(_f(weights[i, t]) + 1e-10) * mk[i][t] for t in range(T))
                v = v * math.exp(log_w / (c + 1e-8))
            seq.append(v)
        return sum(seq[1:], seq[0]) / B

    if loss == "gspo":
        seq_log = []
        for i in range(B):
            c = sum(mk[i])
            s = sum(_f(lp[i, t]) - _f(old[i, t]) for t in range(T) if mk[i][t] > 0)
            seq_log.append(s / c if c > 0 else 0.0)

    if loss == "vespo":
        phi_rows = []
        for i in range(B):
            s_ = sum(min(max(_f(lp[i, t]) - _f(old[i, t]), -20.0), 20.0) * mk[i][t] for t in range(T))
            log_w = min(max(s_, math.log(1e-8)), 20.0)
            row = []
            for t in range(T):
                a = _f(adv[i, t])
                k, lam = (opt.get("k_pos", 2.0), opt.get("lambda_pos", 3.0)) if a >= 0 else \
                    (opt.get("k_neg", 3.0), opt.get("lambda_neg", 2.0))
                lam = max(lam, 1e-4)
                row.append(math.exp(lam + k * log_w - lam * math.exp(log_w)))
            phi_rows.append(row)

    sel = set()
    if loss in ("clip_cov", "kl_cov"):
        cells = [(i, t) for i in range(B) for t in range(T) if mk[i][t] > 0]
        if loss == "clip_cov":
            n_tok = sum(sum(r) for r in mk)
            ma = sum(_f(adv[i, t]) * mk[i][t] for i in range(B) for t in range(T)) / n_tok if n_tok else 0.0
            ml = sum(_f(lp[i, t]) * mk[i][t] for i in range(B) for t in range(T)) / n_tok if n_tok else 0.0
            cand = []
            for i in range(B):
                for t in range(T):
                    x, o, a = tok(i, t)
                    r = math.exp(_f(x) - o)
                    l1, l2 = -a * r, -a * min(max(r, 1 - lo), 1 + hi)
                    cov = (a - ma) * (_f(x) - ml)
                    if mk[i][t] > 0 and not l2 > l1 and opt.get("clip_cov_lb", 1.0) < cov < opt.get("clip_cov_ub", 5.0):
                        cand.append((i, t))
            num = max(int(opt.get("clip_cov_ratio", 0.0002) * n_tok), 1)
            if cand:
                gen = None if opt.get("seed") is None else torch.Generator().manual_seed(int(opt["seed"]))
                perm = torch.randperm(len(cand), generator=gen).tolist()
                sel = {cand[k] for k in perm[: min(num, len(cand))]}
        elif cells:
            av = [_f(adv[i, t]) for i, t in cells]
            lv = [_f(lp[i, t]) for i, t in cells]
            ma, ml = sum(av) / len(av), sum(lv) / len(lv)
            cov = [(a - ma) * (v - ml) for a, v in zip(av, lv)]
            k = max(1, int(len(cells) * opt.get("kl_cov_ratio", 0.0002)))
            order = sorted(range(len(cells)), key=lambda j: -cov[j])  # stable: ties keep token order
            sel = {cells[j] for j in order[:k]}

    for i in range(B):
        for t in range(T):
            x, o, a = tok(i, t)
            d = x - o
            if loss == "vanilla":
                r = torch.exp(_clip(d, -20.0, 20.0))
                r1 = r if opt.get("delta") is None else _clip(r, None, opt["delta"])
                l1, l2 = -a * r1, -a * _clip(r, 1 - lo, 1 + hi)
                v = l1 if _f(l1) >= _f(l2) else l2
                c = opt.get("clip_c")
                if c is not None and a < 0 and _f(v) > -a * c:
                    v = v * 0 - a * c
            elif loss == "gspo":
                lr = _clip(x - x.detach() + seq_log[i], None, 10.0)
                r = torch.exp(lr)
                l1, l2 = -a * r, -a * _clip(r, 1 - lo, 1 + hi)
                v = l1 if _f(l1) >= _f(l2) else l2
            elif loss == "gpg":
                v = -x * a
            elif loss == "cispo":
                if opt.get("cap") is None:
                    r = math.exp(min(max(_f(d), -20.0), 20.0))
                    w = min(max(r, 1 - lo), 1 + hi)
                else:
                    w = min(math.exp(_f(d)), opt["cap"])
                v = -w * a * x
            elif loss == "sapo":
                r = torch.exp(_clip(d, -20.0, 20.0))
                tau = opt.get("tau_pos", 1.0) if a > 0 else opt.get("tau_neg", 1.05)
                v = -a * torch.sigmoid(tau * (r - 1.0)) * (4.0 / tau)
            elif loss == "clip_cov":
                r = torch.exp(d)
                l1, l2 = -a * r, -a * _clip(r, 1 - lo, 1 + hi)
                v = l1 if _f(l1) >= _f(l2) else l2
                if (i, t) in sel:
                    v = v * 0
            elif loss == "kl_cov":
                v = -a * torch.exp(d)
                if (i, t) in sel:
                    v = v + opt.get("ppo_kl_coef", 0.1) * _abs(d)
            elif loss == "vespo":
                v = -phi_rows[i][t] * a * x
            elif loss in ("dppo_tv", "dppo_kl"):
                r = math.exp(min(max(_f(d), -20.0), 20.0))
                c = opt.get("clip_c", 3.0)
                p, po = math.exp(_f(x)), math.exp(o)
                if loss == "dppo_tv":
                    keep = (p - po <= hi) if a > 0 else (p - po >= -lo)
                else:
                    bkl = po * (o - _f(x)) + (1 - po) * math.log((1 - po + 1e-8) / (1 - p + 1e-8))
                    keep = (bkl <= hi or p <= po) if a > 0 else (bkl <= lo or p >= po)
                v = -a * min(r, c) * x * (1.0 if keep else 0.0)
            else:
                raise ValueError(f"no reference for loss {loss!r}")
            if weights is not None:
                v = v * _f(weights[i, t])
            mat[i][t] = v
    return agg_ref(mat, mk, agg, **norms)


def kl_ref(lp, ref, kind):
    """Per-token KL estimator from 0-d tensors; a trailing ``+``: k2's gradient, the named value."""
    base = kind.rstrip("+")
    d = lp - ref
    if base in ("k1", "kl"):
        v = d
    elif base in ("k2", "mse"):
        return 0.5 * d * d
    elif base == "abs":
        v = _abs(d)
    else:
        k = _clip(ref - lp, -20.0, 20.0)
        v = _clip(torch.exp(k) - k - 1.0, -10.0, 10.0)
    if not kind.endswith("+"):
        return v
    back = 0.5 * d * d
    return back - back.detach() + v.detach()


# --------------------------------------------------------------------------- PPO with a critic


def gae_ref(rewards, values, traj, step, *, gamma=1.0, lam=1.0):
    """Per trajectory, backwards over its steps: delta = r + gamma V' - V, A = delta + gamma lam A'."""
    adv = [0.0] * len(rewards)
    for _, idx in _by_key(traj).items():
        idx = sorted(idx, key=lambda i: step[i])
        a_next, v_next = 0.0, 0.0
        for i in reversed(idx):
            a_next = rewards[i] + gamma * v_next - values[i] + gamma * lam * a_next
            v_next = values[i]
            adv[i] = a_next
    return adv, [a + v for a, v in zip(adv, values)]


def gae_tokens_ref(rewards, values, mask, *, gamma=1.0, lam=1.0):
    """Lists of rows; masked tokens pass the recursion through and copy the next response token's A."""
    adv = []
    for r, v, m in zip(rewards, values, mask):
        row = [0.0] * len(r)
        a_next, v_next = 0.0, 0.0
        for t in reversed(range(len(r))):
            if m[t]:
                a_next = r[t] + gamma * v_next - v[t] + gamma * lam * a_next
                v_next = v[t]
            row[t] = a_next
        adv.append(row)
    return adv, [[a + x for a, x in zip(ra, rv)] for ra, rv in zip(adv, values)]


def value_loss_ref(vpreds, returns, old_values, mask, *, cliprange_value=0.5, agg="token-mean", norms=None):
    """0-d tensor per token (autograd): 0.5 * agg(max of the plain and the clipped squared error)."""
    B, T = vpreds.shape
    mk = [[_f(mask[i, t]) for t in range(T)] for i in range(B)]
    mat = []
    for i in range(B):
        row = []
        for t in range(T):
            v, ret, old = vpreds[i, t], _f(returns[i, t]), _f(old_values[i, t])
            l1 = (v - ret) * (v - ret)
            if cliprange_value is not None:
                vc = _clip(v, old - cliprange_value, old + cliprange_value)
                l2 = (vc - ret) * (vc - ret)
                if _f(l2) > _f(l1):
                    l1 = l2
            row.append(l1)
        mat.append(row)
    return 0.5 * agg_ref(mat, mk, agg, **(norms or {}))


# --------------------------------------------------------------------------- by registry name


def _episode_totals(rewards, traj):
    tot = defaultdict(float)
    for r, t in zip(rewards, traj):
        tot[t] += r
    return [tot[t] for t in traj]


def _gigpo_by_name(b, *, gamma=0.95, **opt):
    ret = step_returns_ref(b["rewards"], b["traj"], b["step"], gamma=gamma)
    return gigpo_ref(_episode_totals(b["rewards"], b["traj"]), ret, b["group"], b["anchor"], **opt)


def _hgpo_by_name(b, *, gamma=0.95, base_group=False, **opt):
    ret = step_returns_ref(b["rewards"], b["traj"], b["step"], gamma=gamma)
    ep = _episode_totals(b["rewards"], b["traj"]) if base_group else None
    return hgpo_ref(ret, b["group"], b["context"], episode_rewards=ep, **opt)


def _gae_by_name(b, *, gamma=1.0, lam=1.0, whiten_adv=True):
    adv, _ = gae_ref(b["rewards"], b["values"], b["traj"], b["step"], gamma=gamma, lam=lam)
    return whiten_ref(adv) if whiten_adv else adv


# Every registered estimator's reference, computed from a batch given as a dict of lists (the
# AdvantageBatch field names; step rows carry ``traj``/``step``) with the entry's options.
# tests/algorithms/test_every_entry.py requires an entry here for each registered estimator.
ESTIMATORS = {
    "grpo": lambda b, **o: grpo_ref(b["rewards"], b["group"], **o),
    "dr_grpo": lambda b, **o: grpo_ref(b["rewards"], b["group"], **{"scale": "none", **o}),
    "rloo": lambda b, **o: rloo_ref(b["rewards"], b["group"], **o),
    "stratified": lambda b, **o: stratified_ref(b["rewards"], b["group"], b["stratum"], **o),
    "gigpo": _gigpo_by_name,
    "hgpo": _hgpo_by_name,
    "reinforce_plus_plus": lambda b, **o: reinforce_pp_ref(b["rewards"], lengths=b.get("lengths"), **o),
    "reinforce_plus_plus_baseline": lambda b, **o: reinforce_pp_baseline_ref(
        b["rewards"], b["group"], lengths=b.get("lengths"), **o),
    "remax": lambda b, **o: remax_ref(b["rewards"], b["baseline"], **o),
    "opo": lambda b, **o: opo_ref(b["rewards"], b["group"], b["lengths"], **o),
    "gpg": lambda b, **o: gpg_ref(b["rewards"], b["group"], **o),
    "grpo_passk": lambda b, **o: grpo_passk_ref(b["rewards"], b["group"], **o),
    "gae": _gae_by_name,
}
