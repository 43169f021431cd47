"""Every advantage estimator in one namespace: re-exports of the family modules (pure torch).

The definitions live by family, each estimator one function registered by its signature
(:func:`~stratagym.algorithms.registry.register_estimator`):

- :mod:`~stratagym.algorithms.group_relative`: GRPO / Dr.GRPO, RLOO, OPO, GPG, GRPO pass@k, and DAPO's
  ``informative_groups``;
- :mod:`~stratagym.algorithms.stratified_grpo`: Stratified GRPO;
- :mod:`~stratagym.algorithms.step_level`: GiGPO and HGPO (one row per step);
- :mod:`~stratagym.algorithms.reinforce`: REINFORCE++, REINFORCE++-baseline, ReMax;
- :mod:`~stratagym.algorithms.ppo_gae`: GAE for PPO with a critic;
- :mod:`~stratagym.algorithms.hadw`: HA-DW, the ``+hadw`` modifier;
- below them :mod:`~stratagym.algorithms.returns` (``step_returns``, ``episode_returns``) and
  :mod:`~stratagym.algorithms.whitening` (``whiten``).

Conventions shared by all: rows are flat, one per trajectory or one per step; id tensors (``group``,
``stratum``, ``traj``, ``anchor``, the ``context`` hashes) are integer ids of any value, densified with
``torch.unique(return_inverse=True)``; statistics use scatter/segment reductions (no Python loop over
rows or groups), in float64, and the result comes back in the reward dtype.  Rewards with NaN/inf raise
``ValueError`` naming the offending rows; a group whose members all share one value gets an advantage of
exactly 0.  See ``docs/algorithms.md`` for the definitions, the paper-vs-code options and the defaults.
"""

from __future__ import annotations

from stratagym.algorithms.group_relative import gpg, grpo, grpo_passk, informative_groups, opo, rloo
from stratagym.algorithms.hadw import HADW, HADWEstimator
from stratagym.algorithms.ppo_gae import gae, gae_advantages, gae_tokens
from stratagym.algorithms.reinforce import reinforce_pp, reinforce_pp_baseline, remax
from stratagym.algorithms.returns import episode_returns, step_returns
from stratagym.algorithms.step_level import gigpo, hgpo
from stratagym.algorithms.stratified_grpo import stratified
from stratagym.algorithms.whitening import whiten

__all__ = [
    "grpo",
    "rloo",
    "stratified",
    "step_returns",
    "episode_returns",
    "gigpo",
    "hgpo",
    "HADW",
    "HADWEstimator",
    "reinforce_pp",
    "reinforce_pp_baseline",
    "remax",
    "opo",
    "gpg",
    "grpo_passk",
    "whiten",
    "informative_groups",
    "gae",
    "gae_advantages",
    "gae_tokens",
]
