"""Any registered stratagym env as an OpenEnv server, built with ``openenv-core``'s own ``create_app``.

Why openenv-core itself and not a look-alike: TRL, SkyRL, verifiers, NeMo Gym and ART talk to OpenEnv
servers with openenv-core's client, so only its server (routes, WebSocket session protocol, session
limits and idle reaping) is guaranteed to be what they expect.

What crosses the wire (measured with openenv-core 0.3.0): ``/reset`` and ``/step`` responses carry the
observation's *declared* fields, ``reward`` and ``done``, but never ``Observation.metadata``. So the
stratagym ``info`` schema travels in the declared field ``info``, the text in ``text``, the env's
admissible actions (where it lists them) in ``admissible_actions``, and gymnasium's truncation in
``truncated`` (OpenEnv has only ``done``). HTTP ``/reset`` and ``/step`` build a fresh env per request
(stateless), so episodes live in WebSocket sessions (``/ws``): one env per session, at most
``max_concurrent_envs`` sessions, sessions idle longer than ``idle_timeout_s`` reclaimed.

``reset`` takes ``seed`` and ``task_id`` (or ``task_index``) and calls the env's own
``reset(seed=, options={"task_id": ...})``, so G sessions reset with the same pair start from
byte-identical observations, in one server or several.

Every HTTP response carries ``X-Content-Type-Options: nosniff`` and a Content-Security-Policy.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Mapping, Optional

from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, ConcurrencyConfig, EnvironmentMetadata, Observation, State
from pydantic import Field

import stratagym  # registers the envs; get_spec and __version__ are read from it
from stratagym.serving import SecurityHeaders
from stratagym.errors import ConfigError

__all__ = [
    "StrataAction",
    "StrataObservation",
    "StrataState",
    "StrataEnvironment",
    "create_server_app",
]

#: HTML pages (FastAPI's /docs and /redoc, which load Swagger/ReDoc from jsDelivr; the optional Gradio UI):
#: scripts and styles only from this origin or that CDN, no plug-ins, no framing, forms back here only.
HTML_CSP = ("default-src 'self'; script-src 'self' 'unsafe-inline' https://cdn.jsdelivr.net; "
            "style-src 'self' 'unsafe-inline' https://cdn.jsdelivr.net; img-src 'self' data: https://fastapi.tiangolo.com; "
            "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'")


class StrataAction(Action):
    """One agent turn: the action text, exactly what ``env.step`` receives."""

    text: str = Field(..., description="The action text (the env decides whether it is valid)")


class StrataObservation(Observation):
    """A stratagym observation with its structure in declared (hence serialised) fields."""

    text: str = Field(..., description="The observation text")
    info: dict[str, Any] = Field(default_factory=dict, description="stratagym's info schema: task_id, step, "
                                 "action_valid, tool_calls, search_count, state_hash, context_hashes, won, score, ...")
    admissible_actions: Optional[list[str]] = Field(default=None, description="Valid actions now, where the env lists them")
    truncated: bool = Field(default=False, description="The episode ended by a step limit (gymnasium's truncated)")


class StrataState(State):
    """The session's env id and current task."""

    env_id: str = ""
    task_id: Optional[str] = None


class StrataEnvironment(Environment):
    """One stratagym env behind openenv-core's ``Environment`` interface (one per WebSocket session).

    The gymnasium env is built on first use, not in ``__init__``: openenv-core calls the factory for
    every ``/metadata`` and ``/state`` request, which must not load an index or a catalog.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True  # each session owns its env; nothing mutable is shared

    def __init__(self, env_id: str, env_kwargs: Mapping[str, Any] | None = None):
        super().__init__()
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs or {})
        self._env: Any = None
        self._episode_id: Optional[str] = None
        self._steps = 0

    def _gym_env(self) -> Any:
        if self._env is None:
            import gymnasium as gym

            self._env = gym.make(self.env_id, **self.env_kwargs)
        return self._env

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None, task_id: Optional[str] = None,
              task_index: Optional[int] = None, **kwargs: Any) -> StrataObservation:
        if kwargs:
            raise ValueError(f"unknown reset arguments {sorted(kwargs)}; this server takes seed, task_id, task_index, episode_id")
        # the seeds gymnasium takes (an int >= 0; a bool is one), so a served env answers as its local twin
        if seed is not None and (not isinstance(seed, int) or seed < 0):
            raise ValueError("seed must be a non-negative integer")
        seed = None if seed is None else int(seed)
        options: dict[str, Any] = {}
        if task_id is not None:
            options["task_id"] = task_id
        if task_index is not None:
            options["task_index"] = task_index
        obs, info = self._gym_env().reset(seed=seed, options=options or None)
        self._episode_id, self._steps = episode_id, 0
        return self._observation(obs, None, False, False, info)

    def step(self, action: StrataAction, timeout_s: Optional[float] = None, **kwargs: Any) -> StrataObservation:
        import gymnasium as gym

        env = self._gym_env()
        try:
            obs, reward, terminated, truncated, info = env.step(action.text)
        except gym.error.ResetNeeded:
            raise ResetFirst("call reset before step; over HTTP every request gets a fresh env, so play "
                             "episodes in a WebSocket session (/ws, openenv-core's EnvClient)") from None
        self._steps += 1
        return self._observation(obs, reward, terminated, truncated, info)

    def _observation(self, obs: str, reward: float | None, terminated: bool, truncated: bool,
                     info: dict[str, Any]) -> StrataObservation:
        if reward is not None and not math.isfinite(float(reward)):
            raise RuntimeError(f"{self.env_id} returned a non-finite reward {reward!r}")
        info = dict(info)
        admissible = info.pop("admissible_actions", None)
        return StrataObservation(text=obs, info=_jsonable(info), admissible_actions=admissible,
                                 truncated=bool(truncated), done=bool(terminated or truncated),
                                 reward=None if reward is None else float(reward))

    @property
    def state(self) -> StrataState:
        task = getattr(self._env.unwrapped, "task_id", None) if self._env is not None else None
        return StrataState(episode_id=self._episode_id, step_count=self._steps, env_id=self.env_id, task_id=task)

    def get_metadata(self) -> EnvironmentMetadata:
        spec = stratagym.get_spec(self.env_id)
        return EnvironmentMetadata(name=self.env_id, description=spec.description,
                                   version=getattr(stratagym, "__version__", None), author="stratagym")

    def close(self) -> None:
        if self._env is not None:
            env, self._env = self._env, None
            env.close()


class ResetFirst(RuntimeError):
    """A step with no episode (HTTP ``/step`` without a session); answered with 409, not 500."""


def _jsonable(value: Any) -> Any:
    """``info`` as plain JSON data (numpy scalars and tuples become numbers and lists)."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, bool, int, float)) or value is None:
        return value
    item = getattr(value, "item", None)  # numpy scalar
    if callable(item):
        return item()
    return str(value)


def create_server_app(env_id: str, env_kwargs: Mapping[str, Any] | None = None, *, max_concurrent_envs: int = 8,
                      idle_timeout_s: float | None = 600.0) -> Any:
    """The FastAPI app (openenv-core's ``create_app``) serving ``env_id``, one env per WebSocket session.

    The env is built once here so a bad id or bad kwargs fail now, with the fix, not in every session.
    """
    import gymnasium as gym

    if max_concurrent_envs < 1:
        raise ConfigError(f"--max-concurrent-envs must be >= 1, got {max_concurrent_envs}")
    if idle_timeout_s is not None and not (idle_timeout_s > 0 and math.isfinite(idle_timeout_s)):
        raise ConfigError(f"--idle-timeout must be a positive number of seconds (0 turns reaping off), got {idle_timeout_s}")
    try:
        spec = stratagym.get_spec(env_id)
    except KeyError as exc:
        raise ConfigError(str(exc.args[0]) + "; `stratagym envs list` shows them") from None
    if not spec.available:
        raise ConfigError(f"{env_id} is not available here: {spec.availability()}")
    probe = gym.make(env_id, **dict(env_kwargs or {}))
    probe.close()

    factory = functools.partial(StrataEnvironment, env_id, dict(env_kwargs or {}))
    config = ConcurrencyConfig(max_concurrent_envs=int(max_concurrent_envs), session_timeout=idle_timeout_s)
    app = create_app(factory, StrataAction, StrataObservation, env_name=env_id, concurrency_config=config)
    _add_error_handlers(app)
    app.add_middleware(SecurityHeaders, html_csp=HTML_CSP)
    return app


def _add_error_handlers(app: Any) -> None:
    """Bad requests over HTTP get a 4xx with the reason (JSON, so escaped), not openenv-core's bare 500."""
    from fastapi.responses import JSONResponse

    async def bad_request(_request: Any, exc: Exception) -> JSONResponse:
        return JSONResponse(status_code=400, content={"detail": _clean(str(exc))})

    async def conflict(_request: Any, exc: Exception) -> JSONResponse:
        return JSONResponse(status_code=409, content={"detail": _clean(str(exc))})

    app.add_exception_handler(ValueError, bad_request)
    app.add_exception_handler(TypeError, bad_request)
    app.add_exception_handler(ResetFirst, conflict)


def _clean(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")[:500]
