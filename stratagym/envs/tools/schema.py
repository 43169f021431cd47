"""A tool call's arguments checked against the tool's JSON Schema with the ``jsonschema`` library (Draft
2020-12): types, required, ``enum``, ``additionalProperties`` and every other keyword a schema may carry,
each failure turned into one short reason for the invalid turn.

Why a library: the schemas come from ``transformers.utils.get_json_schema`` (enums from ``Literal`` and
``(choices: [...])``, arrays, nested objects), and checking them by hand would cover a part of JSON Schema
and drift from it. Two adjustments, both stratagym's rules of a turn:

* a tool takes no arguments beyond its parameters (``additionalProperties: false`` unless the schema says
  otherwise);
* ``"nullable": true``, the OpenAPI spelling ``get_json_schema`` writes for ``Optional[...]``, is read as
  ``null`` being allowed (JSON Schema itself ignores the keyword).

Reasons never echo the model's text except plain-identifier names (:func:`~stratagym.envs.tools.calls.shown_name`):
values from the schema (types, enum members, bounds) are shown, the model's values only by their JSON kind.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Mapping

from stratagym.envs.tools.calls import shown_name
from stratagym.errors import ConfigError

__all__ = ["ArgumentChecker", "json_kind"]


def json_kind(value: Any) -> str:
    """The JSON type name of a decoded value (``integer`` for ``3``, ``boolean`` for ``True``...)."""
    for kind, types in (("boolean", (bool,)), ("integer", (int,)), ("number", (float,)), ("string", (str,)),
                        ("object", (dict,)), ("array", (list,))):
        if isinstance(value, types):
            return kind
    return "null" if value is None else type(value).__name__


def _nullable_to_null(schema: Any) -> None:
    """Rewrite ``{"type": T, "nullable": true}`` as ``{"type": [T, "null"]}`` everywhere in ``schema``."""
    if isinstance(schema, dict):
        if schema.pop("nullable", False) is True and isinstance(schema.get("type"), str):
            schema["type"] = [schema["type"], "null"]
        for value in schema.values():
            _nullable_to_null(value)
    elif isinstance(schema, list):
        for item in schema:
            _nullable_to_null(item)


def _where(path: list[Any]) -> str:
    """A path inside an argument, shown only through indices and plain identifiers (keys may be model text)."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{shown_name(p).strip(chr(39))}" for p in path)


def _expected(kind: Any) -> str:
    kinds = [kind] if isinstance(kind, str) else list(kind)
    return "a JSON " + " or ".join(str(k) for k in kinds)


class ArgumentChecker:
    """One tool's argument schema, compiled once; :meth:`problem` names why arguments do not fit it."""

    def __init__(self, name: str, parameters: Mapping[str, Any]):
        try:
            from jsonschema import Draft202012Validator
            from jsonschema.exceptions import SchemaError
        except ImportError as exc:  # pragma: no cover - jsonschema comes with the train extra
            raise ConfigError("the tools protocol checks arguments with jsonschema: pip install 'stratagym[train]'") from exc
        schema = copy.deepcopy(dict(parameters))
        _nullable_to_null(schema)
        schema.setdefault("type", "object")
        schema.setdefault("additionalProperties", False)
        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as exc:
            raise ConfigError(f"the JSON Schema of tool {name!r} is not valid: {exc.message}") from None
        self.name = name
        self.properties: tuple[str, ...] = tuple(schema.get("properties", {}))
        self.required: tuple[str, ...] = tuple(schema.get("required", ()))
        self._validator = Draft202012Validator(schema)

    def problem(self, arguments: Mapping[str, Any]) -> str | None:
        """Why ``arguments`` (a decoded JSON object) do not fit the schema, or None.

        The first problem by a fixed order: an argument the tool does not take, then a missing one, then the
        arguments in the order the call wrote them (shallowest failure first)."""
        for key in arguments:
            if key not in self.properties:
                return (f"{self.name} takes no argument {shown_name(key)}; its arguments are "
                        f"{', '.join(self.properties) or 'none'}")
        for key in self.required:
            if key not in arguments:
                return f"{self.name} needs the argument {key!r}"
        try:
            errors = list(self._validator.iter_errors(dict(arguments)))
        except RecursionError:
            return f"the arguments of {self.name} are nested too deeply"
        if not errors:
            return None
        whole = [e for e in errors if not e.absolute_path]  # a keyword on the whole object (minProperties...)
        if whole:
            err = min(whole, key=lambda e: str(e.validator))
            return (f"the arguments of {self.name} do not satisfy the schema's {err.validator} "
                    f"({json.dumps(err.validator_value)[:80]})")
        order = {k: i for i, k in enumerate(arguments)}
        err = min(errors, key=lambda e: (order.get(e.absolute_path[0], len(order)), len(e.absolute_path), str(e.validator)))
        key, rest = err.absolute_path[0], list(err.absolute_path)[1:]
        head = f"the argument {key!r} of {self.name}" + (f" (at {_where(rest)})" if rest else "")
        if err.validator == "type":
            return f"{head} must be {_expected(err.validator_value)}, got {json_kind(err.instance)}"
        if err.validator == "enum":
            return f"{head} must be one of {', '.join(json.dumps(v, ensure_ascii=False) for v in err.validator_value)}"
        if err.validator == "const":
            return f"{head} must be {json.dumps(err.validator_value, ensure_ascii=False)}"
        if err.validator == "additionalProperties":
            return f"{head} holds a key its schema does not allow"
        if err.validator == "required":
            return f"{head} lacks a required key ({', '.join(map(str, err.validator_value))})"
        return f"{head} does not satisfy the schema's {err.validator} ({json.dumps(err.validator_value)[:80]})"
