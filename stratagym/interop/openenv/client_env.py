"""``stratagym/OpenEnv-v0``: any OpenEnv server as a stratagym env, over openenv-core's own client.

The server owns the task, the transitions, ``reward`` and ``done``; stratagym's :class:`TextEnv` base
owns what the algorithms need: step counting, tool counts, the state hash and the HGPO context hashes,
computed from the observations the server sends. So GiGPO and HGPO work on envs stratagym never saw.

* Tasks: ``tasks`` is a list of reset kwargs (a dict each, or a task id string meaning
  ``{"task_id": ...}``); a task's id is its ``task_id`` value, else its kwargs as canonical JSON. The
  reset seed is sent along, so G copies of a task reset with one seed start from the same state.
* Actions: the server's ``/schema`` says what an action is. One string field (``text``, ``message``,
  ``code``...): the agent's text goes there. Several fields: the agent writes a JSON object, checked
  against the schema's required fields and types; text that does not fit is an ordinary invalid step
  (``action_valid=False``), never sent.
* Observations: the text is the field ``observation_field`` (default: ``text``, else the only string
  field); a stratagym server (``stratagym serve env``) also sends its ``info`` schema, whose
  ``action_valid``, ``won``, ``score``, tool counts, state hash and env-specific keys are kept, so a
  served stratagym env reports here exactly what it reports in-process.
* Failures: a server that is down, does not answer within ``message_timeout_s``, answers malformed data,
  a non-finite reward or an observation stratagym cannot map raises :class:`OpenEnvError` with the reason.
  The rollout pools fail that episode only (their per-job ``except``); the next ``reset`` reconnects.

With no ``base_url``, the env serves ``serve_env_id`` (a stratagym env) on 127.0.0.1 itself, through
``stratagym serve env``'s app, one server per process: a loopback self-test of both directions.
"""

from __future__ import annotations

import json
import math
import threading
from typing import Any, Mapping, Sequence

from stratagym.envs.core import INFO_KEYS, ConfigError, StepResult, TextEnv
from stratagym.serving import serve_in_thread

__all__ = ["OpenEnvTextEnv", "OpenEnvError"]

_STANDARD = frozenset(INFO_KEYS) | {"admissible_actions"}
_JSON_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "object": dict, "array": list}
_SERVERS: dict[str, Any] = {}
_SERVERS_LOCK = threading.Lock()


class OpenEnvError(RuntimeError):
    """The OpenEnv server failed this episode (down, slow, malformed answer); the message says how."""


class OpenEnvTextEnv(TextEnv):
    """A stratagym env whose transitions come from an OpenEnv server (see the module docstring)."""

    max_observation_chars = 1 << 20

    def __init__(
        self,
        *,
        base_url: str | None = None,
        tasks: Sequence[Mapping[str, Any] | str] | None = None,
        observation_field: str | None = None,
        action_field: str | None = None,
        connect_timeout_s: float = 10.0,
        message_timeout_s: float = 60.0,
        serve_env_id: str = "stratagym/SearchStrata-v0",
        serve_kwargs: Mapping[str, Any] | None = None,
        max_steps: int = 200,
        context_k: int = 4,
        render_mode: str | None = None,
        max_action_chars: int | None = None,
    ):
        super().__init__(max_steps=max_steps, context_k=context_k, render_mode=render_mode, max_action_chars=max_action_chars)
        for name, value in (("connect_timeout_s", connect_timeout_s), ("message_timeout_s", message_timeout_s)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value < math.inf):
                raise ConfigError(f"{name} must be a positive number of seconds, got {value!r}")
        self.connect_timeout_s, self.message_timeout_s = float(connect_timeout_s), float(message_timeout_s)
        self.observation_field, self.action_field = observation_field, action_field
        if base_url is None:
            base_url, served_tasks = _loopback_server(serve_env_id, dict(serve_kwargs or {}))
            if tasks is None:
                tasks = served_tasks
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://", "ws://", "wss://")):
            raise ConfigError(f"base_url must be an http(s):// or ws(s):// URL of an OpenEnv server, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self._tasks = _task_table(tasks if tasks is not None else [{}])
        self._task_list = tuple(self._tasks)
        self._client: Any = None
        self._schema: dict[str, Any] | None = None
        self._admissible: list[str] | None = None
        self._tool_counts: dict[str, int] = {}
        self._reset_seed: int | None = None

    # ---- TextEnv API ------------------------------------------------------------------------------
    def task_ids(self) -> Sequence[str]:
        return self._task_list

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        # the server gets the caller's seed, or one drawn from this env's generator (deterministic after
        # a seeded reset, as gymnasium's checker wants)
        self._reset_seed = seed
        return super().reset(seed=seed, options=options)

    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        # gymnasium has checked the caller's seed by now (an int >= 0, a bool among them): sent as the int it is
        seed = int(self._reset_seed) if self._reset_seed is not None else int(self.np_random.integers(2**31 - 1))
        kwargs = {"seed": seed, **self._tasks[task_id]}
        payload = self._call("reset", lambda c: c.reset(**kwargs))
        text, info, reward, done, _ = self._parse(payload, "reset")
        self._action_schema()  # read once, at the first reset, so a step never waits on a second request
        self._tool_counts = dict(info.get("tool_calls") or {}) if isinstance(info.get("tool_calls"), dict) else {}
        return text, _extras(info)

    def _step(self, action: str) -> StepResult:
        message, problem = self._action_payload(action)
        if problem is not None:
            return StepResult(observation=f"Invalid action: {problem}.", action_valid=False)
        payload = self._call("step", lambda c: c.step(message))
        text, info, reward, done, truncated = self._parse(payload, "step")
        tool = None
        counts = info.get("tool_calls")
        if isinstance(counts, dict):
            grown = [k for k, v in counts.items() if isinstance(v, int) and v > int(self._tool_counts.get(k, 0))]
            tool = grown[0] if grown else None
            self._tool_counts = dict(counts)
        state_hash = info.get("state_hash")
        if isinstance(state_hash, bool) or not isinstance(state_hash, int) or not 0 <= state_hash < 2**63:
            state_hash = None  # not a stratagym server: the base class hashes the observation
        return StepResult(
            observation=text, reward=reward, terminated=done and not truncated, truncated=done and truncated,
            action_valid=bool(info.get("action_valid", True)), tool=tool, won=bool(info.get("won", False)),
            score=_score(info.get("score", 0.0)), info=_extras(info), state_hash=state_hash,
        )

    def admissible_actions(self) -> list[str] | None:
        return self._admissible

    def close(self) -> None:
        self._disconnect()
        super().close()

    # ---- the wire -----------------------------------------------------------------------------------
    def _connect(self) -> Any:
        if self._client is None:
            from openenv.core.generic_client import GenericEnvClient

            client = GenericEnvClient(base_url=self.base_url, connect_timeout_s=self.connect_timeout_s,
                                      message_timeout_s=self.message_timeout_s).sync()
            try:
                client.connect()
            except Exception as exc:
                _close_quietly(client)
                raise OpenEnvError(f"OpenEnv server {self.base_url} is unreachable: {_reason(exc)}") from None
            self._client = client
        return self._client

    def _disconnect(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            _close_quietly(client)

    def _call(self, what: str, fn: Any) -> Any:
        client = self._connect()
        try:
            return fn(client)
        except Exception as exc:  # timeouts, closed sockets, malformed JSON, server-side errors
            self._disconnect()  # the session is in an unknown state: the next reset opens a new one
            raise OpenEnvError(f"OpenEnv server {self.base_url}: {what} failed: {_reason(exc)}") from None

    def _parse(self, result: Any, what: str) -> tuple[str, dict[str, Any], float, bool, bool]:
        obs = getattr(result, "observation", None)
        if not isinstance(obs, dict):
            self._disconnect()
            raise OpenEnvError(f"OpenEnv server {self.base_url}: {what} answered no observation object")
        reward = result.reward if result.reward is not None else 0.0
        if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
            self._disconnect()
            raise OpenEnvError(f"OpenEnv server {self.base_url}: {what} answered a non-finite or non-numeric reward {reward!r}")
        done = result.done
        if not isinstance(done, bool):
            self._disconnect()
            raise OpenEnvError(f"OpenEnv server {self.base_url}: {what} answered done={done!r}, not a boolean")
        text = self._text(obs, what)
        info = obs.get("info") if isinstance(obs.get("info"), dict) else {}
        admissible = obs.get("admissible_actions")
        self._admissible = [a for a in admissible if isinstance(a, str)] if isinstance(admissible, list) else None
        return text, info, float(reward), done, obs.get("truncated") is True

    def _text(self, obs: dict[str, Any], what: str) -> str:
        field = self.observation_field
        if field is None:
            strings = [k for k, v in obs.items() if isinstance(v, str) and k not in ("reward", "done")]
            field = "text" if isinstance(obs.get("text"), str) else (strings[0] if len(strings) == 1 else None)
            if field is None:
                self._disconnect()
                raise OpenEnvError(
                    f"OpenEnv server {self.base_url}: cannot tell which observation field is the text "
                    f"(fields {sorted(obs)}); set observation_field")
        value = obs.get(field)
        if not isinstance(value, str):
            self._disconnect()
            raise OpenEnvError(f"OpenEnv server {self.base_url}: {what} observation has no text field {field!r} "
                               f"(fields {sorted(obs)}); set observation_field to one of them")
        return value

    def _action_schema(self) -> dict[str, Any]:
        if self._schema is None:
            import requests

            url = self.base_url.replace("ws://", "http://", 1).replace("wss://", "https://", 1) + "/schema"
            try:
                response = requests.get(url, timeout=(self.connect_timeout_s, self.message_timeout_s))
                response.raise_for_status()
                schema = response.json().get("action")
            except Exception as exc:
                raise OpenEnvError(f"OpenEnv server {self.base_url}: GET /schema failed: {_reason(exc)}") from None
            if not isinstance(schema, dict) or not isinstance(schema.get("properties", {}), dict):
                raise OpenEnvError(f"OpenEnv server {self.base_url}: /schema has no action object schema")
            self._schema = schema
        return self._schema

    def _action_payload(self, action: str) -> tuple[dict[str, Any], str | None]:
        """The action message for the server, or why the agent's text does not fit the server's schema."""
        schema = self._action_schema()
        props = {k: v for k, v in schema.get("properties", {}).items() if k != "metadata"}
        if self.action_field is not None:
            return {self.action_field: action}, None
        strings = [k for k, v in props.items() if isinstance(v, dict) and v.get("type") == "string"]
        if len(props) == 1 and len(strings) == 1:
            return {strings[0]: action}, None
        try:
            data = json.loads(action)
        except ValueError:
            return {}, f"this env takes a JSON object with fields {sorted(props)}"
        if not isinstance(data, dict):
            return {}, f"this env takes a JSON object with fields {sorted(props)}"
        missing = [k for k in schema.get("required", []) if k not in data]
        unknown = [k for k in data if k not in props]
        if missing or unknown:
            return {}, f"fields missing {missing}, unknown {unknown}; the action fields are {sorted(props)}"
        for k, v in data.items():
            want = _JSON_TYPES.get(props[k].get("type")) if isinstance(props[k], dict) else None
            if want is not None and (not isinstance(v, want) or (want is not bool and isinstance(v, bool))):
                return {}, f"field {k!r} must be of JSON type {props[k].get('type')}"
        return data, None


def _task_table(tasks: Sequence[Mapping[str, Any] | str]) -> dict[str, dict[str, Any]]:
    if isinstance(tasks, (str, bytes, Mapping)) or not isinstance(tasks, Sequence):
        raise ConfigError("tasks must be a list of reset kwargs (dicts) or task ids (strings)")
    table: dict[str, dict[str, Any]] = {}
    for i, task in enumerate(tasks):
        kwargs = {"task_id": task} if isinstance(task, str) else task
        if not isinstance(kwargs, Mapping) or "seed" in kwargs:
            raise ConfigError(f"tasks[{i}] must be a dict of reset kwargs without 'seed' (the reset seed is sent), got {task!r}")
        try:
            key = str(kwargs["task_id"]) if "task_id" in kwargs else json.dumps(dict(kwargs), sort_keys=True)
        except TypeError:
            raise ConfigError(f"tasks[{i}] must hold JSON values, got {task!r}") from None
        if key in table:
            raise ConfigError(f"tasks[{i}] repeats task {key!r}")
        table[key] = dict(kwargs)
    if not table:
        raise ConfigError("tasks is empty; give at least one dict of reset kwargs ({} for the server's default)")
    return table


def _extras(info: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in info.items() if k not in _STANDARD}


def _score(value: Any) -> float:
    try:
        score = float(value)
    except (TypeError, ValueError):
        return 0.0
    return min(1.0, max(0.0, score)) if math.isfinite(score) else 0.0


def _reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:500]


def _close_quietly(client: Any) -> None:
    """Close a sync client without waiting on a dead server for long (its close sends a message)."""
    closer = threading.Thread(target=lambda: _try(client.close), daemon=True)
    closer.start()
    closer.join(timeout=5.0)


def _try(fn: Any) -> None:
    try:
        fn()
    except Exception:
        pass


def _loopback_server(env_id: str, kwargs: dict[str, Any]) -> tuple[str, list[str]]:
    """One OpenEnv server per (env id, kwargs) per process, on 127.0.0.1, and the served env's task ids."""
    key = json.dumps([env_id, kwargs], sort_keys=True, default=str)
    with _SERVERS_LOCK:
        if key not in _SERVERS:
            import gymnasium as gym

            from stratagym.interop.openenv.server import create_server_app  # optional: openenv-core (the openenv extra)

            probe = gym.make(env_id, **kwargs)
            try:
                task_ids = list(probe.unwrapped.task_ids())
            finally:
                probe.close()
            app = create_server_app(env_id, kwargs, max_concurrent_envs=256, idle_timeout_s=600.0)
            _SERVERS[key] = (serve_in_thread(app, name="openenv-server"), task_ids)
        server, task_ids = _SERVERS[key]
        return server.url, task_ids
