"""stratagym: gymnasium environments for LLM agents that report the structure of every trajectory,
and group-relative RL algorithms (GRPO, Dr.GRPO, RLOO, Stratified GRPO, HA-DW, GiGPO, HGPO) that use it.

``import stratagym`` registers every built-in env (``stratagym/SearchQA-v0``, ``stratagym/ALFWorld-v0``,
``stratagym/WebShop-v0``, ``stratagym/WebShopBrowser-v0``, synthetic envs) and every env that an installed
package declares in the ``stratagym.envs`` entry-point group. Importing is light: env modules load only
when an env is made.
"""

from __future__ import annotations

__version__ = "0.1.0"

from stratagym import deprecation

deprecation.install()  # old module paths (issue 49's moves) import, with a DeprecationWarning, for one release

from stratagym.envs.core import INFO_KEYS, StepResult, TextEnv, stable_hash
from stratagym.errors import ConfigError
from stratagym.envs.registry import EnvSpec, get_spec, list_envs, make_agent, register_all, register_env

register_all()

__all__ = [
    "__version__",
    "INFO_KEYS",
    "ConfigError",
    "EnvSpec",
    "StepResult",
    "TextEnv",
    "get_spec",
    "list_envs",
    "make_agent",
    "register_env",
    "stable_hash",
]
