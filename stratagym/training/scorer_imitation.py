"""Behaviour cloning of a scripted agent into a :class:`~stratagym.agents.scorer.ScorerPolicy`: the
scorer's warm start, as SFT is the LLM's.

A scorer trained from scratch on ALFWorld starts at random play, which wins ~2 % of 50-step episodes of
the two shortest task types and none of the others (docs/studies.md §10), so group-relative estimators
get almost no signal from it. Cloned from an expert that acts only on what the agent sees (ALFWorld's
``scripted:searcher``), it starts where groups mix wins and losses, which is where GiGPO and HGPO differ.

Two steps, so a study collects once and clones once per seed:

* :func:`collect_scorer_demos` plays the expert through the rollout loop (:func:`~stratagym.training.rollout.play`)
  and records, for each turn, the scorer's own features of the request it saw (context and candidates,
  exactly as :meth:`ScorerPolicy.generate` builds them) and which admissible action the expert chose.
  Demonstrations come from train splits only (:func:`~stratagym.training.demos.check_train_split`), and
  only from episodes the expert won unless told otherwise.
* :func:`imitate` minimises the cross-entropy of the expert's choices under the scorer's softmax with Adam,
  in shuffled mini batches drawn from a private generator: the same demonstrations and seed give the same
  weights, and the global random stream the trainer seeds is left alone.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch

from stratagym.agents.policy import Generation
from stratagym.agents.scorer import ScorerPayload, ScorerPolicy
from stratagym.agents.scripted import ScriptedPolicy
from stratagym.envs.registry import make_agent
from stratagym.errors import ConfigError
from stratagym.training.demos import check_train_split, demonstrator_setup
from stratagym.training.rollout import InProcessPool, play

__all__ = ["ScorerDemos", "collect_scorer_demos", "imitate"]


@dataclass
class ScorerDemos:
    """An expert's turns as the scorer sees them.

    ``payloads``: one per kept turn (features of the request and the index of the expert's action among
    the admissible ones). ``episodes`` / ``won``: episodes played and won. ``off_list``: turns whose action
    was not admissible (a scorer cannot choose them; they are dropped and counted, never guessed).
    ``task_ids``: the tasks the kept turns come from (a checkpoint's training data)."""

    payloads: list[ScorerPayload]
    episodes: int
    won: int
    off_list: int = 0
    task_ids: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """What a report records: sizes, and the tasks' content hash (which train tasks were cloned)."""
        digest = hashlib.sha256("\n".join(self.task_ids).encode("utf-8")).hexdigest()[:16]
        return {"turns": len(self.payloads), "episodes": self.episodes, "won": self.won,
                "off_list_turns": self.off_list, "tasks": len(self.task_ids), "tasks_sha256": digest}


class _RecordingExpert:
    """A scripted agent behind ``Policy.generate`` whose generations carry the scorer's payload of the
    expert's choice (None when the choice is not admissible)."""

    model = None

    def __init__(self, agent: Any, scorer: ScorerPolicy):
        self.scripted = ScriptedPolicy(agent)
        self.scorer = scorer

    def generate(self, requests: Sequence[Any], *, greedy: bool = False) -> list[Generation]:
        out = []
        for req, gen in zip(requests, self.scripted.generate(requests, greedy=greedy)):
            ctx, cands, actions = self.scorer._encode(req)
            payload = ScorerPayload(ctx, cands, actions.index(gen.action), 0.0) if gen.action in actions else None
            out.append(Generation(action=gen.action, payload=payload, text=gen.action, format_ok=True, num_tokens=1))
        return out

    def eval(self) -> "_RecordingExpert":
        return self

    def train(self, mode: bool = True) -> "_RecordingExpert":
        return self


def collect_scorer_demos(
    scorer: ScorerPolicy,
    env_id: str,
    agent: str,
    *,
    env_kwargs: dict[str, Any] | None = None,
    split: str = "train",
    n: int | None = None,
    episodes_per_task: int = 1,
    seed: int = 0,
    only_won: bool = True,
    batch_size: int = 16,
) -> ScorerDemos:
    """Play ``agent`` (``scripted:NAME``) on the first ``n`` tasks of ``split`` (all when None), each
    ``episodes_per_task`` times with reset seeds ``seed, seed + 1, ...``, and record its turns as
    ``scorer``'s features (which depend on its config, not its weights)."""
    import gymnasium as gym

    if episodes_per_task < 1:
        raise ConfigError(f"warm start episodes_per_task must be >= 1, got {episodes_per_task}")
    name, kwargs = demonstrator_setup(
        env_id, agent, env_kwargs, split,
        no_agent=f"warm start agent must be a scripted agent such as scripted:searcher, got {agent!r}",
        no_split=f"{env_id} has no splits; demonstrate on its tasks with split 'train'")
    env = gym.make(env_id, **kwargs)
    try:
        ids = [str(t) for t in env.unwrapped.task_ids()][:n]
        if not ids:
            raise ConfigError(f"{env_id} split {split!r} has no tasks to demonstrate")
        if "split" in kwargs:
            check_train_split(env_id, split, {k: v for k, v in kwargs.items() if k != "split"}, ids)
        try:
            expert = _RecordingExpert(make_agent(env_id, name, env, seed=seed), scorer)
        except KeyError as exc:
            raise ConfigError(str(exc).strip('"')) from None
        episodes = [(t, seed + j) for t in ids for j in range(episodes_per_task)]
        trajs = play(expert, episodes, env_id=env_id, pool=InProcessPool(env_id, kwargs), batch_size=batch_size,
                     greedy=True)
    finally:
        env.close()
    payloads: list[ScorerPayload] = []
    off_list = won = 0
    tasks: list[str] = []
    for traj in trajs:
        won += bool(traj.won)
        if traj.failed or not traj.steps or (only_won and not traj.won):
            continue
        tasks.append(traj.task_id)
        for step in traj.steps:
            if step.payload is None:
                off_list += 1
            else:
                payloads.append(step.payload)
    if not payloads:
        raise ConfigError(f"{agent} left no demonstration turns on {env_id} split {split!r} "
                          f"({won} of {len(trajs)} episodes won); check the agent and the env kwargs")
    return ScorerDemos(payloads, len(trajs), won, off_list, sorted(set(tasks)))


def imitate(
    scorer: ScorerPolicy, demos: ScorerDemos, *, epochs: int, lr: float, batch_size: int = 256, seed: int = 0,
) -> list[dict[str, float]]:
    """Fit ``scorer`` to the expert's choices (cross-entropy, Adam), in place; one row per epoch with the
    mean loss and the share of turns where the scorer's greedy choice is the expert's (before that
    epoch's updates: the first row is the untrained policy)."""
    if epochs < 0 or batch_size < 1 or lr <= 0:
        raise ConfigError(f"imitation needs epochs >= 0, batch_size >= 1 and lr > 0; got {epochs}, {batch_size}, {lr}")
    rows = demos.payloads
    optim = torch.optim.Adam(list(scorer.parameters()), lr=lr)
    gen = torch.Generator().manual_seed(int(seed))
    history = []
    scorer.train()
    for _ in range(epochs):
        order = torch.randperm(len(rows), generator=gen).tolist()
        losses, hits = [], 0
        for start in range(0, len(rows), batch_size):
            batch = [rows[i] for i in order[start:start + batch_size]]
            logp = torch.log_softmax(scorer._scores(scorer.model, [p.context for p in batch],
                                                    [p.candidates for p in batch]), -1)
            chosen = torch.tensor([p.chosen for p in batch], dtype=torch.long)
            hits += int((logp.argmax(-1) == chosen).sum())
            loss = -logp.gather(1, chosen[:, None]).mean()
            optim.zero_grad()
            loss.backward()
            optim.step()
            losses.append(float(loss.detach()) * len(batch))
        history.append({"loss": float(np.sum(losses) / len(rows)), "accuracy": hits / len(rows)})
    return history
