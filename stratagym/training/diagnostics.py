"""Per-step diagnostics of the advantages, logged with every update: why an estimator did what it did.

Issue 34's studies must be explainable whatever their outcome, so every step's ``metrics.jsonl`` row holds,
besides ``adv/mean``, ``adv/std``, ``adv/nonzero`` and HA-DW's ``adv/hadw_anchor`` (the estimator's own):

* ``adv/tied_groups`` -- the share of task groups whose trajectories all returned the same reward. A
  tied group gives every group-relative estimator zero signal (all right or all wrong), so this is the
  share of the batch that cannot move the policy;
* ``adv/stratum/<s>/mean`` and ``adv/stratum/<s>/share`` -- per stratum (the search count, Stratified
  GRPO's key), the mean advantage of its rows and its share of the rows: whether the update pushes the
  policy across strata (a positive mean for 2 searches and a negative one for 1 is a push to search
  more), which is what stratified normalisation removes;
* ``groups/level<k>/size`` and ``groups/level<k>/singleton`` (step-level rows with context hashes, so
  GiGPO and HGPO) -- per history level k (0: the current state, GiGPO's anchor groups), the mean size of
  the group of steps that share the task and the last k+1 observations, and the share of steps alone
  in theirs (those get no step-level advantage at that level).

Strata above ``MAX_STRATUM`` are pooled into ``MAX_STRATUM`` so a runaway search count cannot add keys
without bound.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["advantage_diagnostics", "MAX_STRATUM"]

#: Strata >= this are logged together under this key.
MAX_STRATUM = 8


def _tied_share(rows: Any) -> float:
    """Share of groups whose trajectory returns are all equal (a trajectory counted once)."""
    group = rows.group
    ret = rows.episode_rewards if rows.episode_rewards is not None else rows.rewards
    if rows.traj is not None:  # one value per trajectory (step-level rows repeat it)
        order = torch.argsort(rows.traj, stable=True)
        t = rows.traj[order]
        first = torch.ones_like(t, dtype=torch.bool)
        first[1:] = t[1:] != t[:-1]
        idx = order[first]
        group, ret = group[idx], ret[idx]
    tied = total = 0
    for g in torch.unique(group):
        r = ret[group == g]
        total += 1
        tied += bool(torch.all(r == r[0]))
    return tied / total if total else 0.0


def advantage_diagnostics(rows: Any, adv_rows: torch.Tensor) -> dict[str, float]:
    """The diagnostics above for one batch of advantage rows and their advantages (one per row)."""
    if len(rows) == 0:
        return {}
    out: dict[str, float] = {"adv/tied_groups": _tied_share(rows)}
    adv = adv_rows.detach().double()
    if rows.stratum is not None:
        strata = rows.stratum.clamp(max=MAX_STRATUM)
        for s in torch.unique(strata).tolist():
            m = strata == s
            out[f"adv/stratum/{int(s)}/mean"] = float(adv[m].mean())
            out[f"adv/stratum/{int(s)}/share"] = float(m.double().mean())
    if rows.context is not None and rows.step is not None:
        for k in range(rows.context.shape[1]):
            key = rows.context[:, k]
            present = key != -1
            if not bool(present.any()):
                continue
            pairs = torch.stack([rows.group[present], key[present]], dim=1)
            _, inverse, counts = torch.unique(pairs, dim=0, return_inverse=True, return_counts=True)
            sizes = counts[inverse].double()
            out[f"groups/level{k}/size"] = float(sizes.mean())
            out[f"groups/level{k}/singleton"] = float((sizes == 1).double().mean())
    return out
