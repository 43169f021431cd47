"""Group-relative advantage estimators, policy losses and their registries (pure torch).

No env imports here: rollouts reach this package as flat tensors (see ``docs/algorithms.md``).
The trainer loop lives in ``stratagym.training.trainer`` and is not imported here.

Importing the package registers the built-in estimators, the ``+hadw`` modifier and the policy losses:
each family module registers its own definitions with :mod:`~stratagym.algorithms.registry`, which
imports none of them (pyproject.toml's import-linter contract keeps it so).
"""

from stratagym.algorithms.advantages import (
    HADW,
    episode_returns,
    gigpo,
    gpg,
    grpo,
    grpo_passk,
    hgpo,
    informative_groups,
    opo,
    reinforce_pp,
    reinforce_pp_baseline,
    remax,
    rloo,
    step_returns,
    stratified,
)
from stratagym.algorithms.losses import (
    agg_loss,
    entropy_from_logits,
    kl_penalty,
    masked_mean,
    policy_loss,
    token_logprobs,
)
from stratagym.algorithms.off_policy import OffPolicyCorrection, importance_weights
from stratagym.algorithms.registry import (
    AdvantageBatch,
    Estimator,
    EstimatorModifier,
    get_estimator,
    get_policy_loss,
    list_estimators,
    list_modifiers,
    list_policy_losses,
    register_estimator,
    register_modifier,
    register_policy_loss,
)

__all__ = [
    "HADW",
    "OffPolicyCorrection",
    "importance_weights",
    "AdvantageBatch",
    "Estimator",
    "EstimatorModifier",
    "agg_loss",
    "entropy_from_logits",
    "episode_returns",
    "get_estimator",
    "get_policy_loss",
    "gigpo",
    "gpg",
    "grpo",
    "grpo_passk",
    "hgpo",
    "informative_groups",
    "kl_penalty",
    "list_estimators",
    "list_modifiers",
    "list_policy_losses",
    "masked_mean",
    "opo",
    "policy_loss",
    "register_estimator",
    "register_modifier",
    "register_policy_loss",
    "reinforce_pp",
    "reinforce_pp_baseline",
    "remax",
    "rloo",
    "step_returns",
    "stratified",
    "token_logprobs",
]
