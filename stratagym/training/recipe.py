"""What the trainer and its rollout workers build from a recipe, and the checks of a recipe against its env.

* :func:`build_policy`: the policy of a recipe's ``policy:`` mapping (the trainer's, and each async rollout
  worker's own copy, :mod:`stratagym.training.async_rollout`);
* :func:`seed_everything`: python, numpy and torch seeded from ``train.seed``;
* :func:`refuse_eval_split`: RL tasks never come from an evaluation split;
* :func:`check_estimator_metadata`: the estimator's required env metadata is what the env provides;
* :func:`training_set_of`: the provenance entry (:mod:`stratagym.provenance`) of tasks a run trained on.

They live apart from the trainer so that the rollout workers build their policy without importing the
trainer (which imports the workers: no import cycle).
"""

from __future__ import annotations

import random
from typing import Any, Optional

import numpy as np
import torch

from stratagym.agents.llm import LLMConfig, LLMPolicy
from stratagym.objects import load_object
from stratagym.envs.registry import get_spec
from stratagym.errors import ConfigError
from stratagym.provenance import training_set
from stratagym.training.demos import EVAL_SPLIT_NAMES
from stratagym.training.rollout import env_metadata_keys

__all__ = ["build_policy", "seed_everything", "refuse_eval_split", "check_estimator_metadata", "training_set_of"]


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def build_policy(spec: dict[str, Any]) -> Any:
    """A policy from a recipe's ``policy:`` mapping: ``class: "module:Class"`` builds that class
    (``Class.from_config(options)`` if it has one, else ``Class(**options)``); otherwise an
    :class:`~stratagym.agents.llm.LLMPolicy` from :class:`~stratagym.agents.llm.LLMConfig` options."""
    spec = dict(spec)
    cls_path = spec.pop("class", None)
    if cls_path:
        try:
            cls = load_object(cls_path)
        except (ImportError, AttributeError, ValueError) as exc:
            raise ConfigError(f"policy.class {cls_path!r} cannot be imported: {exc}") from exc
        return cls.from_config(spec) if hasattr(cls, "from_config") else cls(**spec)
    return LLMPolicy.from_config(LLMConfig.from_dict(spec))


def refuse_eval_split(env_kwargs: dict[str, Any]) -> None:
    """RL tasks must not come from an evaluation split (``test``, ``test_unseen``, ``valid``, ...): a
    policy trained on them is then measured on what it was trained on, as demonstrations drawn from them
    are refused (:func:`stratagym.training.demos.check_train_split`)."""
    split = (env_kwargs or {}).get("split")
    if split is not None and str(split).lower() in EVAL_SPLIT_NAMES:
        raise ConfigError(
            f"env.kwargs.split is {split!r}, an evaluation split: RL on its tasks would be measured on what it "
            "trained on. Train on a train split (env.kwargs.split: train) and evaluate there with env.eval_kwargs."
        )


def check_estimator_metadata(estimator: Any, env_id: str, observed_info: Optional[dict[str, Any]] = None) -> None:
    """Refuse an estimator whose required env metadata ``env_id`` does not provide."""
    provided = env_metadata_keys(env_id, observed_info)
    missing = sorted(set(estimator.requires) - provided)
    if missing:
        raise ConfigError(
            f"estimator {estimator.name!r} needs env metadata {missing}, but {env_id!r} provides only "
            f"{sorted(provided)}. Pick an estimator whose needs the env meets (grpo, rloo and dr_grpo need "
            f"none), or declare the keys in the env's EnvSpec.metadata_keys if it really fills them."
        )


def training_set_of(stage: str, env_id: str, env_kwargs: dict[str, Any], split: Optional[str], task_ids: Any,
                    **extra: Any) -> dict[str, Any]:
    """The provenance entry of a training stage: ``task_ids`` of ``env_id``'s ``split``, with the env kwargs
    its spec names as data-defining (``EnvSpec.data_kwargs``: where the data lives), hashed. An env
    registered outside stratagym's registry keeps no data kwargs (its tasks are still named)."""
    try:
        keys = get_spec(env_id).data_kwargs
    except KeyError:
        keys = ()
    return training_set(stage=stage, env_id=env_id, split=split, task_ids=task_ids,
                        data_kwargs={k: env_kwargs[k] for k in keys if k in env_kwargs}, **extra)
