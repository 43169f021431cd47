"""Straightforward per-sample reference implementations (pure Python loops over lists).

Written from the definitions (and, for GiGPO/HGPO, the structure of verl-agent's official
functions: dicts of lists keyed by group, one statistic per group, one pass per row), independent
of the vectorised code in :mod:`stratagym.algorithms.advantages`.  Tests compare the two on
random inputs and ``benchmarks/advantages.py`` times them.  Inputs are plain Python lists
(``context`` a list of lists); outputs are lists of floats.  Not meant for training.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from typing import Optional, Sequence

__all__ = [
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
