"""The schema of a result record as the leaderboard stores it: a pydantic model whose bounds are the
store's column sizes, so that anything the model accepts fits the database, on SQLite and PostgreSQL.

Why a schema and not hand-written checks: records arrive from files anyone can edit. Every value that
ends up in a typed column (a ``VARCHAR(n)``, a 32-bit ``INTEGER``) or is rendered later (plots, tables)
must have the type and size the code expects, or the submit (or a later ``render``) crashes with a
traceback instead of a rejection. The model states those types once, and pydantic reports every
violation with its location (``agent.label``, ``metrics.em.n``), which becomes the rejection message.

Rules that hold everywhere in a record (checked by the recursive :data:`JsonValue` type):

* strings hold valid Unicode text: no lone surrogates (they cannot be encoded to UTF-8, so neither a
  database nor a terminal can take them) and no NUL (PostgreSQL text cannot hold it);
* numbers are finite (the store writes strict JSON) and integers fit in 64 bits (SQLite's INTEGER);
* object keys are strings.

:data:`COLUMN_LENGTHS` and :data:`INT32_MAX` are what :mod:`stratagym.leaderboard.store` builds its
tables from, so the two cannot drift apart.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Optional, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    Tag,
    Discriminator,
    ValidationError,
)
from pydantic import TypeAdapter
from typing_extensions import TypeAliasType

__all__ = [
    "COLUMN_LENGTHS",
    "INT32_MAX",
    "INT64_MAX",
    "ResultRecord",
    "schema_problems",
]

#: ``VARCHAR`` sizes of the ``results`` and ``metrics`` columns (characters).
COLUMN_LENGTHS: dict[str, int] = {
    "record_id": 64,
    "schema": 64,
    "env_id": 200,
    "env_version": 32,
    "data_hash": 100,
    "split": 100,
    "agent_label": 300,
    "agent_kind": 32,
    "agent_hash": 100,
    "algorithm": 100,
    "created": 40,
    "submitted": 40,
    "stratagym_version": 40,
    "metric_name": 200,
}
#: Largest value of a SQL ``INTEGER`` column (32-bit on PostgreSQL).
INT32_MAX = 2**31 - 1
#: Largest integer SQLite (and JSON consumers using int64) can hold.
INT64_MAX = 2**63 - 1


def _clean_text(s: str) -> str:
    """Refuse text that no UTF-8 database or terminal can hold (lone surrogates, NUL)."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("holds a lone surrogate (not valid Unicode text)") from None
    if "\x00" in s:
        raise ValueError("holds a NUL character")
    return s


def _finite(x: float) -> float:
    if not math.isfinite(x):
        raise ValueError("must be a finite number")
    return x


Text = Annotated[str, Field(strict=True), AfterValidator(_clean_text)]
Int64 = Annotated[int, Field(strict=True, ge=-INT64_MAX - 1, le=INT64_MAX)]
Finite = Annotated[float, Field(strict=True), AfterValidator(_finite)]  # strict float takes ints, not bools
Count = Annotated[int, Field(strict=True, ge=1, le=INT32_MAX)]


def _col(name: str, *, min_length: int = 1) -> Any:
    """A string type bounded by column ``name``'s size."""
    return Annotated[str, Field(strict=True, min_length=min_length, max_length=COLUMN_LENGTHS[name]), AfterValidator(_clean_text)]


def _json_kind(v: Any) -> str | None:
    """The JSON type of ``v`` (pydantic then validates only that member, so errors are precise)."""
    if v is None:
        return "json-null"
    for typ, tag in ((bool, "json-bool"), (int, "json-int"), (float, "json-float"), (str, "json-str"),
                     (list, "json-list"), (dict, "json-object")):
        if isinstance(v, typ):
            return tag
    return None


#: Any JSON value with the rules of the module docstring (recursive).
JsonValue = TypeAliasType(
    "JsonValue",
    Annotated[
        Union[
            Annotated[None, Tag("json-null")],
            Annotated[StrictBool, Tag("json-bool")],
            Annotated[Int64, Tag("json-int")],
            Annotated[StrictFloat, AfterValidator(_finite), Tag("json-float")],
            Annotated[Text, Tag("json-str")],
            Annotated[list["JsonValue"], Tag("json-list")],  # type: ignore[misc]
            Annotated[dict[Text, "JsonValue"], Tag("json-object")],  # type: ignore[misc]
        ],
        Discriminator(_json_kind, custom_error_type="not_json", custom_error_message="must be a JSON value (null, bool, number, string, list or object)"),
    ],
)


class _Open(BaseModel):
    """A JSON object with known fields plus any other JSON-valid ones (extras are validated too)."""

    model_config = ConfigDict(extra="allow", strict=True)
    __pydantic_extra__: dict[str, JsonValue] = Field(init=False)  # type: ignore[assignment]


class AgentInfo(_Open):
    spec: Text = Field(min_length=1)
    kind: _col("agent_kind")  # type: ignore[valid-type]
    label: _col("agent_label")  # type: ignore[valid-type]
    content_hash: _col("agent_hash")  # type: ignore[valid-type]
    algorithm: Optional[_col("algorithm")] = None  # type: ignore[valid-type]


class EnvInfo(_Open):
    id: _col("env_id")  # type: ignore[valid-type]
    version: _col("env_version")  # type: ignore[valid-type]
    data_hash: _col("data_hash")  # type: ignore[valid-type]
    kwargs: dict[Text, JsonValue] = Field(default_factory=dict)


class Metric(_Open):
    value: Finite
    n: Count
    ci_low: Finite
    ci_high: Finite
    method: Optional[Text] = None


class SeedSpread(_Open):
    """Across-seed spread of one metric; the store keeps mean, std and the seed count."""

    mean: Optional[Finite] = None
    std: Optional[Finite] = None
    min: Optional[Finite] = None
    max: Optional[Finite] = None
    n_seeds: Optional[Count] = None


class CurvePoint(_Open):
    step: Finite
    reward: Finite


#: One training run: ``[{step, reward, ...}]`` or ``[[step, reward]]``.
Curve = list[Union[CurvePoint, Annotated[list[Finite], Field(min_length=2, max_length=2)]]]


class Training(_Open):
    """Training provenance written by ``stratagym bench``; the renderer plots ``curve``."""

    algorithm: Optional[Text] = None
    curve: Optional[Union[Curve, dict[Text, Curve]]] = None


MetricName = _col("metric_name")


class ResultRecord(_Open):
    """A result record (schema ``stratagym.result/1``) as the leaderboard accepts it."""

    schema_: _col("schema") = Field(alias="schema")  # type: ignore[valid-type]
    record_id: Annotated[str, Field(strict=True, pattern=r"^[0-9a-f]{64}$")]
    created: _col("created")  # type: ignore[valid-type]
    stratagym_version: _col("stratagym_version")  # type: ignore[valid-type]
    agent: AgentInfo
    env: EnvInfo
    split: _col("split")  # type: ignore[valid-type]
    n_tasks: Count
    n_episodes: Count
    seeds: list[Int64] = Field(min_length=1)
    metrics: dict[MetricName, Metric] = Field(min_length=1)  # type: ignore[valid-type]
    across_seeds: dict[MetricName, SeedSpread] = Field(default_factory=dict)  # type: ignore[valid-type]
    episodes: list[JsonValue]
    config: dict[Text, JsonValue]
    training: Optional[Training] = None

    model_config = ConfigDict(extra="allow", strict=True, populate_by_name=True)


_RECORD = TypeAdapter(ResultRecord)


def _where(loc: tuple[Any, ...]) -> str:
    parts = []
    for p in loc:
        if isinstance(p, int):
            parts.append(f"[{p}]")
        else:
            text = str(p)
            # pydantic names the union member it tried (a JSON type tag, "function-after[...]"): not a place
            if text.startswith(("json-", "function-", "list[", "dict[", "union[", "CurvePoint", "[key]")):
                continue
            text = text.encode("utf-8", "backslashreplace").decode("utf-8")  # a surrogate in a key
            parts.append(("." if parts else "") + (text if len(text) <= 60 else text[:57] + "..."))
    return "".join(parts) or "record"


def schema_problems(record: Any) -> list[str]:
    """Everything the schema refuses in ``record``, one sentence per problem (empty: it fits).

    Messages never echo the offending value in full (it may be huge, or hold text that breaks a
    terminal); they name the field and the rule.
    """
    try:
        _RECORD.validate_python(record)
    except ValidationError as exc:
        seen: dict[str, str] = {}
        for err in exc.errors(include_url=False, include_input=False):
            where = _where(tuple(err.get("loc", ())))
            msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
            if err.get("type") == "missing":
                msg = "missing (a required field)"
            seen.setdefault(where, f"{where}: {msg}")
        return list(seen.values())
    return []
