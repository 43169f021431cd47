"""Every stratagym env under GEM's API: ``gem.make("stratagym/SearchQA-v0")`` (issue 30 item 4, one way).

GEM's env contract (gem/core.py, gem-llm 0.1.0): ``reset(seed=None) -> (observation, info)`` and
``step(action) -> (observation, reward, terminated, truncated, info)`` with text observations and actions,
``sample_random_action()`` and ``spawn()``; ``gem.make(id, **kwargs)`` calls the registered entry point
with the spec's kwargs and the caller's, and ``gem.make_vec`` passes each copy its own ``seed=`` that way.
:class:`StrataGemEnv` is that contract over ``gymnasium.make(env_id)``: the observation is the env's text,
``info`` is stratagym's whole info schema (task id, step, action validity, tool counts, state and context
hashes, won, score, admissible actions where listed), and ``reset`` also takes ``task_id`` (a keyword GEM
does not have) so every member of a group can start from one task; with only a seed, the task is the one
that seed picks, so G copies reset with one seed share their start too.
"""

from __future__ import annotations

from typing import Any, Sequence

import gymnasium

from stratagym.envs.episode import EpisodeKey
from stratagym.envs.registry import list_envs
from stratagym.interop.gem.compat import import_gem
from stratagym.envs.random_agent import RandomAgent

gem = import_gem()

__all__ = ["StrataGemEnv", "register_all", "GEM_EXCLUDED"]

#: Not offered to GEM: GEM-v0 is GEM's own envs seen from stratagym; under GEM again it is a loop.
GEM_EXCLUDED = frozenset({"stratagym/GEM-v0"})


class StrataGemEnv(gem.Env):
    """A registered stratagym env behind GEM's ``Env`` contract (see the module docstring)."""

    def __init__(self, strata_id: str, seed: int | None = None, **env_kwargs: Any):
        super().__init__()
        self.strata_id = strata_id
        self._kwargs = dict(env_kwargs)
        self._env = gymnasium.make(strata_id, **env_kwargs)
        self._next_seed = seed  # gem.make_vec hands each copy its seed at construction: used by the first reset
        self._agent = RandomAgent(self._env, seed=0 if seed is None else int(seed))
        self._info: dict[str, Any] = {}
        self._episode = EpisodeKey("", None)
        #: the current episode as (reset seed, reset options, actions so far): what spawn(same_state=True) replays
        self._replay: tuple[int | None, dict[str, Any] | None, list[str]] | None = None

    @property
    def strata_env(self) -> Any:
        """The stratagym env (a :class:`~stratagym.envs.core.TextEnv`) under gymnasium's wrappers."""
        return self._env.unwrapped

    def task_ids(self) -> Sequence[str]:
        """The task ids ``reset(task_id=...)`` accepts (the env's split)."""
        return self._env.unwrapped.task_ids()

    def reset(self, seed: int | None = None, task_id: str | None = None,
              task_index: int | None = None) -> tuple[str, dict[str, Any]]:
        """Start an episode: ``task_id`` (or ``task_index``) picks the task, else the seed does."""
        if seed is None and self._next_seed is not None:
            seed, self._next_seed = self._next_seed, None
        options = {"task_id": task_id} if task_id is not None else (
            {"task_index": task_index} if task_index is not None else None)
        observation, info = self._env.reset(seed=seed, options=options)
        self._info, self._episode = info, EpisodeKey(str(info["task_id"]), seed)
        self._replay = (seed, options, [])
        return observation, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """One turn of the stratagym env; bad agent text is an ordinary step with ``action_valid=False``."""
        observation, reward, terminated, truncated, info = self._env.step(action)
        self._info = info
        if self._replay is not None:
            self._replay[2].append(action)
        return observation, float(reward), bool(terminated), bool(truncated), info

    def sample_random_action(self) -> str:
        """A random action now: one of the admissible actions where the env lists them, else the env's own
        random action (stratagym's ``random`` scripted agent, seeded per episode)."""
        return self._agent.act([""], [self._info], [self._episode])[0]

    def spawn(self, same_state: bool = False, **kwargs: Any) -> "StrataGemEnv":
        """A new env with this one's configuration (``kwargs`` override it).

        ``same_state=True``: the new env is in this one's state, reached the way stratagym states are
        defined, by replaying the episode (the same reset, then its actions in order)
        rather than by copying live objects, which may hold processes, sockets or engines. stratagym envs
        are deterministic given the task, the seed and the actions, so the copy answers the next action
        as this env would. It needs an episode reset with a seed and the same configuration (no ``kwargs``)."""
        if not same_state:
            return StrataGemEnv(self.strata_id, **{**self._kwargs, **kwargs})
        if kwargs:
            raise ValueError(f"spawn(same_state=True) copies this env's state under its own configuration; "
                             f"drop the overrides {sorted(kwargs)} or spawn without same_state")
        if self._replay is None:  # no episode yet: there is no state beyond the configuration
            return StrataGemEnv(self.strata_id, **self._kwargs)
        seed, options, actions = self._replay
        if seed is None:
            raise ValueError("spawn(same_state=True) replays the episode, which needs its reset seed: "
                             "reset(seed=...) before spawning the same state")
        twin = StrataGemEnv(self.strata_id, **self._kwargs)
        _, info = twin._env.reset(seed=seed, options=options)  # the same reset (a task_id option or the seed's pick)
        for action in actions:
            info = twin._env.step(action)[-1]
        twin._info, twin._episode, twin._replay = info, self._episode, (seed, options, list(actions))
        return twin

    def close(self) -> None:
        """Close the stratagym env (GEM's base Env has no close; stratagym's envs may hold processes)."""
        self._env.close()


def register_all() -> list[str]:
    """Register every stratagym env id with ``gem.register`` (idempotent); returns the ids added now."""
    added = []
    for spec in list_envs():
        if spec.id in GEM_EXCLUDED:
            continue
        try:
            gem.register(spec.id, f"{__name__}:StrataGemEnv", strata_id=spec.id)  # GEM's own first parameter is env_id
        except ValueError:  # "Environment ... already registered."
            continue
        added.append(spec.id)
    return added
