"""Group rollouts: G envs per task (same task id, same seed), one batched generation per turn.

:class:`RolloutCollector` plays ``len(tasks) x group_size`` episodes at once. Every turn it sends ONE
:meth:`Policy.generate` call covering every live episode, then steps the envs (in-process, in worker
processes, or in Ray actors), and records per step the policy's payload (prompt/response tokens and
sampling log-probs for LLMs), the env reward, ``action_valid`` and the structural metadata of the
state the action was taken in (``state_hash``, ``context_hashes``) and after it (``search_count``...).

:func:`to_advantage_batch` flattens a :class:`RolloutBatch` into the tensors the estimators read:
one row per trajectory (``grpo``, ``rloo``, ``stratified``: reward = episode return, stratum = final
search count) or one row per step (``gigpo``, ``hgpo``: reward = step reward, anchor = state hash,
context = the K+1 context hashes, -1 where the history is shorter), plus the map from training
samples (steps) to rows.

Failures are contained: an env that raises, or a worker process that dies, marks the trajectories it
hosted ``failed`` (they are left out of training and counted in the metrics); the rest go on.
Evaluation is the same loop at group size 1 (:func:`play`).

The package is split by job: :mod:`.records` (what is recorded), :mod:`.pools` (where envs live),
:mod:`.collector` (the loop) and :mod:`.batch` (shaping and flat tensors).
"""

from __future__ import annotations

from stratagym.training.rollout.batch import env_metadata_keys, shape_rewards, to_advantage_batch
from stratagym.training.rollout.collector import RolloutCollector, play
from stratagym.training.rollout.pools import InProcessPool, RayPool, SubprocessPool, WorkerCrashed, make_pool
from stratagym.training.rollout.records import RolloutBatch, StepRecord, Trajectory

__all__ = [
    "StepRecord",
    "Trajectory",
    "RolloutBatch",
    "RolloutCollector",
    "play",
    "InProcessPool",
    "SubprocessPool",
    "RayPool",
    "WorkerCrashed",
    "make_pool",
    "shape_rewards",
    "to_advantage_batch",
    "env_metadata_keys",
]
