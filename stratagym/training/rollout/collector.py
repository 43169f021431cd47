"""The one rollout loop: :class:`RolloutCollector` plays groups of episodes with a policy.

Training collects ``group_size`` copies of each task; evaluation is the same loop with group size 1
(:func:`play`). Every turn sends ONE ``Policy.generate`` call covering every live episode, with each
episode's :class:`~stratagym.envs.core.EpisodeKey` and history, so no policy or scripted agent has to
guess which live episode is which.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional, Sequence

import torch

from stratagym.agents.policy import Generation, GenerationRequest, Policy, Turn
from stratagym.envs.episode import EpisodeKey
from stratagym.errors import ConfigError
from stratagym.training.rollout.pools import InProcessPool
from stratagym.training.rollout.records import DROP_INFO, RolloutBatch, StepRecord, Trajectory

__all__ = ["RolloutCollector"]


class RolloutCollector:
    """Plays group rollouts with a :class:`Policy` on one env id."""

    def __init__(self, env_id: str, policy: Policy, *, group_size: int, pool: Any = None,
                 env_kwargs: dict[str, Any] | None = None, max_turns: int = 1000):
        if group_size < 1:
            raise ConfigError(f"group_size must be >= 1, got {group_size}")
        self.env_id = env_id
        self.policy = policy
        self.group_size = int(group_size)
        self.pool = pool if pool is not None else InProcessPool(env_id, env_kwargs)
        self.max_turns = int(max_turns)

    def task_ids(self) -> list[str]:
        return self.pool.task_ids()

    def collect(self, task_ids: Sequence[str], seeds: Sequence[int], *, greedy: bool = False,
                baseline: bool = False, on_turn: Optional[Callable[[int, int], None]] = None,
                on_episode: Optional[Callable[[Trajectory], None]] = None) -> RolloutBatch:
        """Play ``group_size`` episodes of each task (episode j of task i has seed ``seeds[i]``).

        ``baseline``: also play ONE greedy episode per task (same task and seed) after the group, and
        link it from each of the task's trajectories as ``Trajectory.baseline`` (ReMax's baseline,
        arXiv 2310.10505 Algorithm 1: the greedy response's reward; it is not trained on, as in verl's
        ``compute_remax_outcome_advantage``). Its time and tokens count in the batch's totals.
        ``on_turn(turn, live)`` is called after every turn; ``on_episode(trajectory)`` as each episode
        ends (resumable evals save progress there); neither sees the greedy episodes.
        """
        if len(seeds) != len(task_ids):
            raise ValueError("one seed per task")
        batch = self._play(task_ids, seeds, self.group_size, greedy, on_turn, on_episode)
        if baseline:
            ref = self._play(task_ids, seeds, 1, True, None, None)
            for t in batch.trajectories:
                t.baseline = ref.trajectories[t.group]
            batch.generate_seconds += ref.generate_seconds
            batch.env_seconds += ref.env_seconds
            batch.total_seconds += ref.total_seconds
            batch.generated_tokens += ref.generated_tokens
        return batch

    def _play(self, task_ids: Sequence[str], seeds: Sequence[int], G: int, greedy: bool,
              on_turn: Optional[Callable[[int, int], None]],
              on_episode: Optional[Callable[[Trajectory], None]]) -> RolloutBatch:
        """``G`` episodes of each task, all turns batched (the loop behind :meth:`collect`)."""
        t_start = time.perf_counter()
        trajs = [Trajectory(traj=i * G + j, group=i, task_id=str(t), seed=None if seeds[i] is None else int(seeds[i]))
                 for i, t in enumerate(task_ids) for j in range(G)]
        n = len(trajs)
        obs: list[str] = [""] * n
        infos: list[dict[str, Any]] = [{} for _ in range(n)]
        history: list[list[Turn]] = [[] for _ in range(n)]
        keys = [EpisodeKey(t.task_id, t.seed, t.traj % G) for t in trajs]
        env_s = gen_s = 0.0
        tokens = turns = 0

        t0 = time.perf_counter()
        results = self.pool.reset([(k, trajs[k].seed, {"task_id": trajs[k].task_id}) for k in range(n)])
        env_s += time.perf_counter() - t0
        live: list[int] = []
        for k, res in enumerate(results):
            if isinstance(res, BaseException):
                trajs[k].failed, trajs[k].error = True, f"reset: {res}"
            else:
                obs[k], infos[k] = res
                live.append(k)

        while live and turns < self.max_turns:
            requests = [GenerationRequest(obs[k], infos[k], tuple(history[k]), self.env_id, keys[k]) for k in live]
            t0 = time.perf_counter()
            with torch.no_grad():
                gens: list[Generation] = self.policy.generate(requests, greedy=greedy)
            gen_s += time.perf_counter() - t0
            if len(gens) != len(live):
                raise RuntimeError(f"policy returned {len(gens)} generations for {len(live)} requests")
            t0 = time.perf_counter()
            results = self.pool.step([(k, g.action) for k, g in zip(live, gens)])
            env_s += time.perf_counter() - t0
            still: list[int] = []
            for k, g, res in zip(live, gens, results):
                tokens += int(g.num_tokens)
                if isinstance(res, BaseException):
                    trajs[k].failed, trajs[k].error = True, f"step {len(trajs[k].steps)}: {res}"
                    continue
                o, r, term, trunc, info = res
                before = infos[k]
                trajs[k].steps.append(StepRecord(
                    step=len(trajs[k].steps), payload=g.payload, action=g.action, text=g.text,
                    format_ok=bool(g.format_ok), num_tokens=int(g.num_tokens), reward=float(r),
                    action_valid=bool(info.get("action_valid", True)),
                    state_hash=int(before.get("state_hash", -1)),
                    context=[int(h) for h in before.get("context_hashes", [])],
                    search_count=int(info.get("search_count", 0)),
                    info={key: v for key, v in info.items() if key not in DROP_INFO},
                    observation=obs[k], prompt_cut=bool(g.extra.get("prompt_cut")),
                ))
                history[k].append(Turn(obs[k], g.action))
                obs[k], infos[k] = o, info
                trajs[k].final_observation = o
                if term or trunc:
                    trajs[k].terminated, trajs[k].truncated = bool(term), bool(trunc)
                    trajs[k].won, trajs[k].score = bool(info.get("won", False)), float(info.get("score", 0.0))
                    if on_episode is not None:
                        on_episode(trajs[k])
                else:
                    still.append(k)
            live = still
            turns += 1
            if on_turn is not None:
                on_turn(turns, len(live))
        for k in live:  # hit max_turns
            trajs[k].truncated = True
            trajs[k].won, trajs[k].score = bool(infos[k].get("won", False)), float(infos[k].get("score", 0.0))
            if on_episode is not None:
                on_episode(trajs[k])
        return RolloutBatch(trajs, gen_s, env_s, time.perf_counter() - t_start, tokens, turns)

    def close(self) -> None:
        self.pool.close()


def play(policy: Policy, episodes: Sequence[tuple[str, int]], *, env_id: str = "", pool: Any = None,
         env_kwargs: dict[str, Any] | None = None, batch_size: int = 8, greedy: bool = True,
         on_episode: Optional[Callable[[Trajectory], None]] = None) -> list[Trajectory]:
    """Play one episode per ``(task_id, seed)`` with the collector at group size 1, ``batch_size`` at a time.

    This is evaluation's loop. Results come back in the order of ``episodes`` and do not depend on
    ``batch_size``: each episode is reset with its own seed and task, and the policy sees its
    :class:`EpisodeKey`. ``pool`` (or a fresh :class:`InProcessPool` of ``env_id``) hosts the envs.
    """
    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
    own_pool = pool is None
    if own_pool:
        pool = InProcessPool(env_id, env_kwargs)
    collector = RolloutCollector(env_id or getattr(pool, "env_id", ""), policy, group_size=1, pool=pool)
    out: list[Trajectory] = []
    try:
        for start in range(0, len(episodes), batch_size):
            chunk = list(episodes[start:start + batch_size])
            batch = collector.collect([t for t, _ in chunk], [s for _, s in chunk], greedy=greedy, on_episode=on_episode)
            out.extend(batch.trajectories)
    finally:
        if own_pool:
            collector.close()
    return out
