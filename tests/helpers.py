"""Shared test helper: play episodes through the project's one rollout loop and get eval rows."""

from __future__ import annotations

from typing import Any, Sequence

from stratagym.agents.scripted import ScriptedPolicy
from stratagym.eval.episodes import EpisodeRecord
from stratagym.training.rollout import InProcessPool, play


def play_records(envs: Sequence[Any], agent: Any, episodes: Sequence[tuple[int | str, int | None]], *,
                 greedy: bool = True, info_keys: Sequence[str] = ()) -> list[EpisodeRecord]:
    """Play ``(task, seed)`` episodes (``task`` an id or an index into the env's task list) on ``envs``,
    ``len(envs)`` at a time. ``agent`` is a scripted agent (``act``) or a policy (``generate``)."""
    policy = agent if hasattr(agent, "generate") else ScriptedPolicy(agent)
    tasks = list(envs[0].unwrapped.task_ids())
    wanted = [(tasks[t % len(tasks)] if isinstance(t, int) else t, s) for t, s in episodes]
    spec_id = getattr(getattr(envs[0], "spec", None), "id", None)
    if not info_keys and spec_id:
        from stratagym.envs.registry import get_spec

        try:
            info_keys = get_spec(spec_id).record_info_keys
        except KeyError:
            info_keys = ()
    trajs = play(policy, wanted, env_id=spec_id or "", pool=InProcessPool.from_envs(envs), batch_size=len(envs), greedy=greedy)
    return [EpisodeRecord.from_trajectory(t, info_keys) for t in trajs]
