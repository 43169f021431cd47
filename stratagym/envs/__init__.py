"""Environment families. Each sub-package lists its gymnasium specs in ``ENV_SPECS`` (see registry)."""

from stratagym.envs.core import INFO_KEYS, ConfigError, ContextTracker, StepResult, TextEnv, stable_hash
from stratagym.envs.registry import EnvSpec, get_spec, list_envs, register_env
from stratagym.envs import tools  # noqa: E402,F401  (the tools protocol plugs into the contract on import)

__all__ = [
    "INFO_KEYS",
    "ConfigError",
    "ContextTracker",
    "EnvSpec",
    "StepResult",
    "TextEnv",
    "get_spec",
    "list_envs",
    "register_env",
    "stable_hash",
]
