"""The one schema for "train these arms, evaluate there": what bench suites (``suites/*.yaml``,
:mod:`stratagym.eval.suite`) and studies (``suites/studies/*.yaml``, :mod:`stratagym.studies.definitions`)
share, checked by one validator.

Both files name their arms the same way: an :class:`Arm` is a display ``label``, an estimator registry
name and its options (``estimator_kwargs``), this arm's training env kwargs (``env_kwargs``: HGPO's K is
the env's ``context_k``) and, in suites only, trainer recipe overrides (``recipe``). Both check fields with
the same rules (:data:`CHECKS`), report unknown keys the same way, and check an arm's estimator name and
options against the registry at load time, the check the trainer would make hours later. Every message
names the file, the field and what it must be; the caller picks the error class (suites:
``SuiteError``, studies: ``ConfigError``), both :class:`~stratagym.errors.UserError`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from stratagym.errors import ConfigError

__all__ = ["Arm", "Check", "CHECKS", "check_keys", "check_values", "arm_from", "arms_from"]

#: A field check: ``None`` when the value is fine, else what it must be ("a positive integer").
Check = Callable[[Any], "str | None"]


@dataclass(frozen=True)
class Arm:
    """One trained arm of a suite or a study (see the module docstring)."""

    label: str
    estimator: str
    estimator_kwargs: dict[str, Any] = field(default_factory=dict)
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    #: trainer recipe overrides (suites only; never ``env``: the suite's envs are used)
    recipe: dict[str, Any] = field(default_factory=dict)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _positive_int(v: Any) -> str | None:
    return None if _is_int(v) and v >= 1 else "a positive integer"


def _optional_positive_int(v: Any) -> str | None:
    return None if v is None else _positive_int(v)


def _natural(v: Any) -> str | None:
    return None if _is_int(v) and v >= 0 else "an integer >= 0"


def _positive_float(v: Any) -> str | None:
    ok = (isinstance(v, float) or _is_int(v)) and math.isfinite(v) and v > 0
    return None if ok else "a positive number"


def _text(v: Any) -> str | None:
    return None if isinstance(v, str) and v.strip() else "a non-empty string"


def _optional_text(v: Any) -> str | None:
    return None if v is None or isinstance(v, str) else "a string or null"


def _any_text(v: Any) -> str | None:
    return None if isinstance(v, str) else "a string"


def _bool(v: Any) -> str | None:
    return None if isinstance(v, bool) else "true or false"


def _mapping(v: Any) -> str | None:
    return None if isinstance(v, dict) and all(isinstance(k, str) for k in v) else "a mapping with string keys"


def _texts(v: Any) -> str | None:
    ok = isinstance(v, list) and all(isinstance(x, str) and x for x in v)
    return None if ok else "a list of strings"


#: The field rules both file kinds use, by name.
CHECKS: dict[str, Check] = {
    "positive_int": _positive_int, "optional_positive_int": _optional_positive_int, "natural": _natural,
    "positive_float": _positive_float, "text": _text, "optional_text": _optional_text, "any_text": _any_text,
    "bool": _bool, "mapping": _mapping, "texts": _texts,
}

#: An arm's fields and their rules (``recipe`` only where the caller allows it).
_ARM_CHECKS: dict[str, Check] = {
    "estimator": _text, "label": _text, "estimator_kwargs": _mapping, "env_kwargs": _mapping, "recipe": _mapping,
}


def check_keys(data: Mapping[str, Any], valid: Iterable[str], where: str, *, error: type[Exception] = ConfigError) -> None:
    """Raise ``error`` naming every key of ``data`` outside ``valid``, and the valid keys."""
    valid = set(valid)
    extra = [k for k in data if k not in valid]
    if extra:
        raise error(f"{where}: unknown key(s) {', '.join(map(repr, map(str, extra)))}; "
                    f"valid keys: {', '.join(sorted(valid))}")


def check_values(data: Mapping[str, Any], checks: Mapping[str, Check], where: str, *,
                 error: type[Exception] = ConfigError) -> None:
    """Raise ``error`` for the first field of ``data`` that fails its check in ``checks``, saying what it
    must be and what it is."""
    for key, check in checks.items():
        if key in data:
            problem = check(data[key])
            if problem:
                raise error(f"{where}: {key} must be {problem}, got {data[key]!r}")


def arm_from(raw: Any, where: str, *, recipe: bool = False, error: type[Exception] = ConfigError) -> Arm:
    """Check one arm (an estimator name, or a mapping with ``estimator`` and optionally ``label``,
    ``estimator_kwargs``, ``env_kwargs`` and, when ``recipe`` is allowed, ``recipe``) and build it. The
    estimator name and options are checked against the registry."""
    allowed = dict(_ARM_CHECKS) if recipe else {k: v for k, v in _ARM_CHECKS.items() if k != "recipe"}
    if isinstance(raw, str) and raw.strip():
        raw = {"estimator": raw}
    if not isinstance(raw, dict):
        raise error(f"{where} must be an estimator name or a mapping with 'estimator' "
                    f"(and {', '.join(k for k in allowed if k != 'estimator')}), got {raw!r}")
    check_keys(raw, allowed, where, error=error)
    if "estimator" not in raw:
        raise error(f"{where}: missing 'estimator' (a registry name such as grpo)")
    raw = {"label": raw["estimator"], **raw}
    check_values(raw, allowed, where, error=error)
    if "env" in raw.get("recipe", {}):
        raise error(f"{where}.recipe may not set 'env' (the suite's envs are used)")
    from stratagym.algorithms.registry import get_estimator  # lazy: torch; a suite without training needs none

    try:  # the same check the trainer makes, hours earlier
        get_estimator(raw["estimator"], **raw.get("estimator_kwargs", {}))
    except (ConfigError, TypeError, ValueError) as exc:  # names and options; bad values (a ValueError)
        why = exc.args[0] if exc.args else exc
        raise error(f"{where}: {why}") from None
    return Arm(label=str(raw["label"]), estimator=raw["estimator"], estimator_kwargs=dict(raw.get("estimator_kwargs", {})),
               env_kwargs=dict(raw.get("env_kwargs", {})), recipe=dict(raw.get("recipe", {})))


def arms_from(raw: Any, where: str, *, recipe: bool = False, error: type[Exception] = ConfigError) -> tuple[Arm, ...]:
    """Check a non-empty list of arms (:func:`arm_from`, each named ``where[i]``) with distinct labels."""
    if not isinstance(raw, list) or not raw:
        raise error(f"{where} must be a non-empty list of estimator names or mappings with 'estimator'")
    arms = tuple(arm_from(a, f"{where}[{i}]", recipe=recipe, error=error) for i, a in enumerate(raw))
    labels = [a.label for a in arms]
    if len(set(labels)) != len(labels):
        raise error(f"{where}: labels must be distinct, got {labels}")
    return arms
