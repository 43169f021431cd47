"""The environment contract every stratagym env follows.

An env is a :class:`gymnasium.Env` whose observations and actions are text. Besides the observation it
reports, in ``info``, the *structure* of the trajectory that group-relative RL algorithms need:

=====================  ==========================================================================
key                    meaning
=====================  ==========================================================================
``task_id``            stable id of the task (prompt); group rollouts share it
``step``               0-based turn index (0 after ``reset``)
``action_valid``       the last action parsed and was admissible (``True`` after ``reset``)
``tool_calls``         dict tool -> count so far (``search`` for QA and WebShop)
``search_count``       ``tool_calls.get("search", 0)``: the Stratified GRPO stratum key
``state_hash``         63-bit hash of the current observation (GiGPO anchor state)
``context_hashes``     hashes of the last k+1 observations, k = 0..K (HGPO); shorter early on
``won`` / ``score``    success flag and task score in [0, 1] at episode end (False / 0.0 before)
``admissible_actions`` list of valid actions where the env knows them, else absent
=====================  ==========================================================================

Subclasses implement three small methods (see :class:`TextEnv`); the base class owns seeding, task
choice, action sanitising, step counting, tool counting, hashing and the ``info`` schema, so every env
reports the same keys with the same meaning. ``step`` never raises on agent text: whatever the agent
writes becomes a normal step, with ``action_valid=False`` when it does not parse or is not admissible.
"""

from __future__ import annotations

import abc
import re
import string
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from stratagym.envs import speedups
from stratagym.envs.episode import EpisodeKey, EpisodeRngs  # re-exported: the contract's names
from stratagym.envs.hashing import (  # re-exported: the contract's state hashes
    HASH_MASK,
    NO_CONTEXT,
    ContextTracker,
    combine_hashes,
    normalize_text,
    stable_hash,
)
from stratagym.errors import ConfigError  # re-exported: env code raises it for bad configuration

__all__ = [
    "INFO_KEYS",
    "ContextTracker",
    "EpisodeKey",
    "EpisodeRngs",
    "StepResult",
    "TextEnv",
    "TextSpace",
    "ConfigError",
    "sanitize_action",
    "stable_hash",
    "combine_hashes",
    "normalize_text",
    "HASH_MASK",
    "NO_CONTEXT",
    "register_protocol_builder",
]

#: Keys present in every ``info`` dict (``admissible_actions`` only where the env knows them).
INFO_KEYS: tuple[str, ...] = (
    "task_id",
    "step",
    "action_valid",
    "tool_calls",
    "search_count",
    "state_hash",
    "context_hashes",
    "won",
    "score",
)

_INFO_KEY_SET = frozenset(INFO_KEYS)


# Unicode category Cc (C0 and C1 controls) except newline and tab, as one precompiled class: a per-
# character unicodedata lookup cost ~10 us per step, this ~1 us.
_CONTROL_CHARS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_SAMPLE_CHARSET = string.ascii_letters + string.digits + string.punctuation + " "


# --------------------------------------------------------------------------------------------------
# Spaces and action sanitising
# --------------------------------------------------------------------------------------------------


class TextSpace(spaces.Text):
    """A :class:`gymnasium.spaces.Text` that contains any Unicode string within the length bounds.

    gymnasium's ``Text`` only contains strings over a fixed charset (alphanumerics by default), but
    env observations are free text (punctuation, newlines, any script). Samples are drawn from
    printable ASCII so random agents produce readable junk.
    """

    def __init__(self, max_length: int, *, min_length: int = 0, seed: int | None = None):
        super().__init__(max_length=max_length, min_length=min_length, charset=_SAMPLE_CHARSET, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"TextSpace({self.min_length}, {self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return (
            isinstance(other, TextSpace)
            and self.min_length == other.min_length
            and self.max_length == other.max_length
        )


# Any-Unicode text through gymnasium's async vector env shared memory (see stratagym.envs.vector).
from stratagym.envs.vector import register_text_space  # noqa: E402

register_text_space(TextSpace)


def _without_controls(text: str) -> str:
    """``text`` without control characters other than newline and tab.

    Why not always the regex: agent text rarely holds one, and two C scans (``isprintable`` after
    taking newlines and tabs out, which returns the same object when there are none) answer that
    without running the regex engine, whose code the retriever has evicted from the cache by the time
    the next step runs.
    """
    if text.replace("\n", "").replace("\t", "").isprintable():
        return text
    return _CONTROL_CHARS.sub("", text)


def sanitize_action(action: Any, max_chars: int) -> tuple[str, str | None]:
    """Turn whatever an agent produced into clean text, or say why it cannot be used.

    Returns ``(text, problem)``: ``problem`` is None for usable text, else a short reason the step is
    invalid (not a string, too long). Invalid bytes become U+FFFD and lone surrogates '?', control
    characters other than newline/tab are dropped, so env parsers only ever see valid text. A plain
    ``str`` with an ``int`` limit goes to the C twin when the speed-ups are built.
    """
    if _sanitize_str is not None and type(action) is str and type(max_chars) is int:
        return _sanitize_str(action, max_chars)
    return _sanitize_action_py(action, max_chars)


_sanitize_str = None  # _speedups.sanitize_str once bound


def _sanitize_action_py(action: Any, max_chars: int) -> tuple[str, str | None]:
    """:func:`sanitize_action` in Python: the reference, and the path for anything but str and int."""
    if type(action) is str and action.isascii() and len(action) <= max_chars:  # the common case
        return _without_controls(action), None
    if action is None:
        return "", "the action was empty"
    if isinstance(action, (bytes, bytearray)):
        action = bytes(action).decode("utf-8", errors="replace")
    elif isinstance(action, np.str_):
        action = str(action)
    elif not isinstance(action, str):
        return "", f"the action must be text, got {type(action).__name__}"
    if len(action) > max_chars:
        return "", f"the action is too long ({len(action)} characters; at most {max_chars})"
    if not action.isascii():
        action = action.encode("utf-8", errors="replace").decode("utf-8")  # lone surrogates -> '?'
    return _without_controls(action), None


# --------------------------------------------------------------------------------------------------
# The base env
# --------------------------------------------------------------------------------------------------


_EPISODE_OVER = "The episode is over; call reset() to start a new one."


@dataclass(slots=True)
class StepResult:
    """What a subclass's ``_step`` returns; the base class turns it into gymnasium's 5-tuple.

    ``tool`` names a tool the action called (e.g. ``"search"``) so the base counts it. ``state_text``
    overrides the text hashed as the state (default: the observation). ``info`` adds env-specific
    keys (e.g. ``task_type``, ``f1``); it may not override the standard keys.
    """

    observation: str
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    action_valid: bool = True
    tool: str | None = None
    won: bool = False
    score: float = 0.0
    state_text: str | None = None
    info: dict[str, Any] = field(default_factory=dict)
    #: ``stable_hash`` of the state text, when the env already has it (precomputed pieces); must equal
    #: ``stable_hash(state_text or observation)`` -- the base class then skips normalising and hashing.
    state_hash: int | None = None


class TextEnv(gym.Env[str, str], metaclass=abc.ABCMeta):
    """Base class for text environments that report trajectory structure.

    Subclasses implement:

    * :meth:`task_ids` -- the ordered task ids of the configured split;
    * :meth:`_reset_task` -- start ``task_id``; return ``(observation, extra_info)``;
    * :meth:`_step` -- apply a sanitised action; return a :class:`StepResult`;
    * optionally :meth:`admissible_actions` -- the valid actions now, or None when unknown.

    Task choice on ``reset``: ``options={"task_id": id}`` picks that task, ``options={"task_index":
    i}`` the i-th of the split (an integer; other values, or options that are not a dict, raise
    ``TypeError``/``ValueError`` naming the option), otherwise the env's ``np_random`` chooses, so ``reset(seed=s)``
    is deterministic. Episodes are truncated after ``max_steps`` turns.
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi", "human"], "render_fps": 4}

    #: Subclasses set: the default upper bound on observation and action lengths (characters).
    max_observation_chars: int = 1 << 20
    max_action_chars: int = 16_384

    def __init__(
        self,
        *,
        max_steps: int = 50,
        context_k: int = 4,
        render_mode: str | None = None,
        max_action_chars: int | None = None,
        protocol: str = "tags",
        tool_parser: str = "hermes",
    ):
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ConfigError(
                f"render_mode={render_mode!r} is not supported; use one of {self.metadata['render_modes']} or None"
            )
        if isinstance(max_steps, bool) or not isinstance(max_steps, (int, np.integer)) or max_steps < 1:
            raise ConfigError(f"max_steps must be an integer >= 1, got {max_steps!r}")
        self.render_mode = render_mode
        self.max_steps = int(max_steps)
        if max_action_chars is not None:
            self.max_action_chars = int(max_action_chars)
        self.observation_space = TextSpace(self.max_observation_chars)
        self.action_space = TextSpace(self.max_action_chars)
        self._context = ContextTracker(context_k)
        self._task_id: str | None = None
        self._task_id_set: tuple[Sequence[str], frozenset[str]] | None = None  # cache of has_task
        self._step_index = 0
        self._tool_calls: Counter[str] = Counter()
        self._last_observation = ""
        self._done = False
        self.protocol = protocol
        self._tools = _build_protocol(self, protocol, tool_parser)

    # ---- subclass API ---------------------------------------------------------------------------
    @abc.abstractmethod
    def task_ids(self) -> Sequence[str]:
        """The ordered task ids of the configured split."""

    @abc.abstractmethod
    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        """Start ``task_id``; return the first observation and env-specific info keys."""

    @abc.abstractmethod
    def _step(self, action: str) -> StepResult:
        """Apply a sanitised action (valid UTF-8 text within ``max_action_chars``)."""

    def admissible_actions(self) -> list[str] | None:
        """Valid actions in the current state, or None where the env does not know them."""
        return None

    def protocol_data(self) -> dict[str, Any]:
        """Content hashes and settings of the data this env plays on (corpus, index, games, catalog,
        retriever settings), for the protocol fingerprint of eval records (:mod:`stratagym.envs.fingerprint`).

        The default is empty: an env whose tasks are its code is described by its behaviour version and
        kwargs alone. A family whose data lives in files overrides this with hashes of their *content*
        (never their paths, so the same data on two machines is one protocol); it may add
        ``"libraries"``, the distributions it actually uses, to narrow its spec's list.
        """
        return {}

    def invalid_action_result(self, problem: str) -> StepResult:
        """The step an unusable action (wrong type, too long) produces; subclasses may reword it."""
        return StepResult(observation=f"Invalid action: {problem}.", action_valid=False)

    # ---- the tools protocol (stratagym.envs.tools) ---------------------------------------------------
    #: ``"module:attr"`` of the family's :class:`~stratagym.envs.tools.ToolSet`; None: no tools protocol.
    tool_set: str | None = None

    def tools_observation(self, observation: str) -> str:
        """The first observation as the tools protocol shows it (a family whose prompt teaches its tags,
        like SearchQA, rewords it); the tag protocol's text stays the hashed state, so both protocols
        report the same hashes."""
        return observation

    def _call_tool(self, call: Any) -> StepResult:
        """Run a checked tool call: by default the tool's function writes the env's own action text."""
        text, problem = sanitize_action(self._tools.tools.action(call), self.max_action_chars)
        return self._step(text) if problem is None else self._tool_invalid(problem)

    def _tool_invalid(self, problem: str) -> StepResult:
        """An invalid tool turn: the env's own invalid step (its state, so the same hash as under the tag
        protocol, and its end-of-episode info), shown as the reason and the tools to call."""
        result = self.invalid_action_result(problem)
        if result.state_hash is None and result.state_text is None:
            result.state_text = result.observation
        result.observation = (f"Invalid tool call: {problem}. Call one of the tools ({self._tools.tools.signature()}) as "
                              '<tool_call>{"name": ..., "arguments": {...}}</tool_call>.')
        result.action_valid = False
        result.info = {**result.info, "invalid_reason": problem}
        return result

    def _tool_step(self, text: str) -> StepResult:
        turn = self._tools.resolve(text)
        result = self._call_tool(turn.call) if turn.call is not None else self._tool_invalid(str(turn.problem))
        extra = {"tool_call": turn.call.name} if turn.call is not None else {}
        if turn.ignored:
            extra["ignored_tool_calls"] = turn.ignored
        result.info = {**result.info, **extra, **self._tools.info}
        return result

    # ---- gymnasium API --------------------------------------------------------------------------
    @property
    def task_id(self) -> str | None:
        return self._task_id

    def choose_task(self, options: dict[str, Any] | None) -> str:
        ids = self.task_ids()
        if not ids:
            raise ConfigError(f"{type(self).__name__} has no tasks in this split; check its data path and split")
        if options is None:
            options = {}
        elif not isinstance(options, Mapping):
            raise TypeError(f"reset(options=...) must be a dict such as {{'task_id': ...}} or None, got {type(options).__name__}")
        if options.get("task_id") is not None:
            task_id = str(options["task_id"])
            if not self.has_task(task_id):
                raise ValueError(
                    f"unknown task_id {task_id!r} for {type(self).__name__}; "
                    f"{len(ids)} tasks in this split, e.g. {list(ids[:3])}"
                )
            return task_id
        if options.get("task_index") is not None:
            index = _task_index(options["task_index"])
            if not 0 <= index < len(ids):
                raise ValueError(f"task_index {index} out of range: this split has {len(ids)} tasks")
            return ids[index]
        return ids[int(self.np_random.integers(len(ids)))]

    def has_task(self, task_id: str) -> bool:
        """Whether ``task_id`` is in this split, in O(1): the id set is built once per sequence object
        that :meth:`task_ids` returns (return a new sequence when the tasks change)."""
        ids = self.task_ids()
        if self._task_id_set is None or self._task_id_set[0] is not ids:
            self._task_id_set = (ids, frozenset(ids))
        return task_id in self._task_id_set[1]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        task_id = self.choose_task(options)
        observation, extra = self._reset_task(task_id)
        observation = state = self._fit(observation)
        if self._tools is not None:
            observation = self._fit(self.tools_observation(observation))
            extra = {**extra, **self._tools.info}
        self._task_id = task_id
        self._step_index = 0
        self._tool_calls = Counter()
        self._done = False
        self._last_observation = observation
        self._context.reset(state)
        return observation, self._info(action_valid=True, won=False, score=0.0, extra=extra)

    def step(self, action: str):
        if self._task_id is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        if self._done:
            result = StepResult(observation=_EPISODE_OVER, action_valid=False, terminated=True)
        else:
            text, problem = sanitize_action(action, self.max_action_chars)
            if self._tools is not None:
                result = self._tool_step(text) if problem is None else self._tool_invalid(problem)
                if problem is not None:
                    result.info = {**result.info, **self._tools.info}
            else:
                result = self._step(text) if problem is None else self.invalid_action_result(problem)
        return self._finish_step(result)

    def _finish_step(self, result: StepResult):
        """The bookkeeping after a step's :class:`StepResult`: tool counts, the step index, the end of the
        episode, the state hashes and ``info``; returns gymnasium's 5-tuple."""
        if result.tool is not None and result.action_valid:
            self._tool_calls[result.tool] += 1
        observation = result.observation
        if len(observation) > self.max_observation_chars:
            result.observation = observation = self._fit(observation)
        self._step_index += 1
        terminated = bool(result.terminated)
        truncated = bool(result.truncated) or (not terminated and self._step_index >= self.max_steps)
        self._done = self._done or terminated or truncated
        self._last_observation = observation
        if result.state_hash is not None:
            self._context.push_hash(result.state_hash)
        else:
            self._context.push(result.state_text if result.state_text is not None else observation)
        info = self._info(action_valid=result.action_valid, won=result.won, score=result.score, extra=result.info)
        return observation, float(result.reward), terminated, truncated, info

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self._last_observation
        if self.render_mode == "human":
            print(self._last_observation)
        return None

    # ---- helpers --------------------------------------------------------------------------------
    def _fit(self, observation: str) -> str:
        """Cut an observation to ``max_observation_chars`` so it always lies in the observation space."""
        return observation if len(observation) <= self.max_observation_chars else observation[: self.max_observation_chars]

    def _info(self, *, action_valid: bool, won: bool, score: float, extra: dict[str, Any]) -> dict[str, Any]:
        """The ``info`` dict of a reset or step: the standard keys, then ``admissible_actions`` where the
        env knows them, then ``extra``. The C twin builds it when the env reports no admissible actions and
        nothing is unusual (a plain dict of extras, the stock tracker, no clash with a standard key)."""
        if (_make_info is not None and type(extra) is dict and type(self._context) is ContextTracker
                and type(self).admissible_actions is TextEnv.admissible_actions and _INFO_KEY_SET.isdisjoint(extra)):
            return _make_info(self._task_id, self._step_index, action_valid, self._tool_calls,
                              self._context._levels, won, score, extra)
        return self._info_py(action_valid=action_valid, won=won, score=score, extra=extra)

    def _info_py(self, *, action_valid: bool, won: bool, score: float, extra: dict[str, Any]) -> dict[str, Any]:
        """:meth:`_info` in Python: the reference of ``_speedups.make_info``, and the general path."""
        if not _INFO_KEY_SET.isdisjoint(extra):
            clash = set(extra) & _INFO_KEY_SET
            raise RuntimeError(f"{type(self).__name__} tried to override standard info keys {sorted(clash)}")
        tools = self._tool_calls
        info: dict[str, Any] = {
            "task_id": self._task_id,
            "step": self._step_index,
            "action_valid": bool(action_valid),
            "tool_calls": dict(tools),
            "search_count": int(tools.get("search", 0)),
            "state_hash": self._context.state_hash,
            "context_hashes": self._context.context_hashes(),
            "won": bool(won),
            "score": float(score),
        }
        if type(self).admissible_actions is not TextEnv.admissible_actions:  # the base's always says None
            admissible = self.admissible_actions()
            if admissible is not None:
                info["admissible_actions"] = list(admissible)
        if extra:
            info.update(extra)
        return info


_make_info = None  # _speedups.make_info once bound


#: Builds an env's protocol object from ``(env, protocol, tool_parser)``: None for the tag protocol.
#: :mod:`stratagym.envs.tools.protocol` registers the tools protocol's builder when imported (``import
#: stratagym.envs`` does), so the contract names no tools module; until then only ``"tags"`` is known.
_protocol_builder: Callable[["TextEnv", str, str], Any] | None = None


def register_protocol_builder(builder: Callable[["TextEnv", str, str], Any]) -> None:
    """Install the builder :class:`TextEnv` calls with its ``protocol`` and ``tool_parser`` kwargs."""
    global _protocol_builder
    _protocol_builder = builder


def _build_protocol(env: "TextEnv", protocol: str, parser_name: str) -> Any:
    if _protocol_builder is None:  # stratagym.envs.tools not imported (it always is through stratagym.envs)
        if protocol != "tags":
            raise ConfigError(f"protocol {protocol!r} needs stratagym.envs.tools; import stratagym.envs first")
        return None
    return _protocol_builder(env, protocol, parser_name)


def _bind_speedups(module: Any) -> None:
    """Point this module's hot-path names at the C twins in ``module``, or at the Python references."""
    global _sanitize_str, _make_info
    c = module is not None
    _sanitize_str = module.sanitize_str if c else None
    _make_info = module.make_info if c else None


speedups.bind(_bind_speedups)


def _task_index(value: Any) -> int:
    """``options["task_index"]`` as an int: an integer, or a float with an integral value; anything else
    (``inf``, ``nan``, ``2.5``, a string, a bool) is a clear error naming the option, not an
    ``OverflowError`` from deep inside ``int()``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"options['task_index'] must be an integer, got {type(value).__name__}")
    if isinstance(value, (float, np.floating)) and not (np.isfinite(value) and float(value).is_integer()):
        raise ValueError(f"options['task_index'] must be a whole number, got {value!r}")
    return int(value)
