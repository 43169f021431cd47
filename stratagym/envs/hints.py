"""Messages that tell a user how to fix a bad env id or env keyword argument.

gymnasium's own errors say what is wrong but not what would be right: ``NameNotFound`` suggests at most
one name, and an unknown keyword argument surfaces as the constructor's ``TypeError``, which gymnasium
re-raises as ``"... got an unexpected keyword argument 'x' was raised from the environment creator
for <id> with kwargs (...)"``. These helpers turn both into a sentence that lists the candidates.
"""

from __future__ import annotations

import difflib
import inspect
import re
from typing import Any

from stratagym.envs.registry import register_all

__all__ = ["unknown_env_message", "env_kwarg_message", "valid_env_kwargs"]

_CREATOR = re.compile(r"unexpected keyword argument '([^']+)' was raised from the environment creator for (\S+) with kwargs")
_BARE = re.compile(r"unexpected keyword argument '([^']+)'")


def _registered_ids() -> list[str]:
    import gymnasium as gym

    register_all()  # stratagym's envs and entry-point plug-ins
    return sorted(gym.registry)


def unknown_env_message(text: str) -> str:
    """A message for an env id that is not registered (``text``: the id, or gymnasium's ``NameNotFound``
    message): the close matches among registered ids (stratagym's first) and where to see them all."""
    m = re.search(r"Environment `([^`]+)` doesn't exist(?: in namespace ([^.\s]+))?", text)
    env_id = (f"{m.group(2)}/{m.group(1)}" if m.group(2) else m.group(1)) if m else text
    name = env_id.split("/")[-1]
    ids = _registered_ids()
    ours = [i for i in ids if i.startswith("stratagym/")]
    by_name = {i.split("/")[-1].rsplit("-v", 1)[0].lower(): i for i in ours}
    close = difflib.get_close_matches(name.rsplit("-v", 1)[0].lower(), list(by_name), n=5, cutoff=0.6)
    matches = [by_name[c] for c in close] or difflib.get_close_matches(env_id, ids, n=5, cutoff=0.5)
    hint = f"did you mean {', '.join(matches)}?" if matches else f"registered stratagym envs: {', '.join(ours)}."
    return f"unknown stratagym env {env_id!r}; {hint} (`stratagym envs list` shows every env)"


def valid_env_kwargs(env_id: str) -> list[str] | None:
    """The keyword arguments ``gymnasium.make(env_id, ...)`` accepts (the constructor's named
    parameters), or None when they cannot be read (``**kwargs`` constructors, unknown ids)."""
    import gymnasium as gym

    try:
        spec = gym.spec(env_id)
        creator: Any = spec.entry_point
        if isinstance(creator, str):
            from gymnasium.envs.registration import load_env_creator

            creator = load_env_creator(creator)
        target = creator.__init__ if inspect.isclass(creator) else creator
        params = inspect.signature(target).parameters.values()
    except Exception:  # an env whose module cannot be imported: no list, the plain message stays
        return None
    params = list(params)
    if any(p.kind == p.VAR_KEYWORD for p in params):
        return None  # it takes **kwargs: any name may be valid
    names = [p.name for p in params if p.name != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    return sorted(names) if names else None


def env_kwarg_message(exc: BaseException, env_id: str | None = None) -> str | None:
    """For the ``TypeError`` of an unknown env keyword argument: which one, and the valid ones.
    None for any other exception (a TypeError from inside an env is a bug, not a user error)."""
    if not isinstance(exc, TypeError):
        return None
    text = str(exc)
    m = _CREATOR.search(text)
    if m:
        bad, env_id = m.group(1), m.group(2)
    else:
        b = _BARE.search(text)
        if b is None or env_id is None:
            return None
        bad = b.group(1)
    valid = valid_env_kwargs(env_id)
    listing = f"valid ones: {', '.join(valid)}" if valid else "see the env's documentation for its arguments"
    close = difflib.get_close_matches(bad, valid or [], n=1)
    maybe = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{env_id} has no argument {bad!r}{maybe}; {listing}"
