"""The protocol of a stored record, as the board compares them (docs/protocol.md).

A record of schema ``stratagym.result/2`` carries the protocol its env family computed at eval time
(``source: measured``); :func:`protocol_problems` checks it at submit. A record written before
fingerprints (schema 1) gets one recomputed here from what it stores (``source: recomputed``): env id,
split, task ids, task-changing kwargs, prompt template and reward; the behaviour version, data hashes and
library versions it was measured under cannot be known after the fact and are ``None``, so such a record
ranks only with records whose stored configs agree, never with measured ones. A record of an env this
stratagym does not know is ``legacy``: its own table, nothing compared.
"""

from __future__ import annotations

from typing import Any, Mapping

from stratagym.envs.registry import get_spec  # get_spec registers built-in and plug-in envs first
from stratagym.eval.transcripts import record_task_ids  # re-exported: the board's readers import it from here
from stratagym.envs.fingerprint import (
    LEGACY,
    PROTOCOL_FIELDS,
    fingerprint_of,
    protocol_diff,
    resolved_task_kwargs,
    tasks_hash,
)

__all__ = ["protocol_for", "protocol_problems", "record_task_ids", "compare_records"]


def _spec(env_id: Any) -> Any:
    try:
        return get_spec(str(env_id))
    except KeyError:
        return None


def protocol_for(record: Mapping[str, Any]) -> dict[str, Any]:
    """``{"fingerprint", "source", "fields"}`` of ``record``: its own (schema 2), else recomputed from its
    stored config, else ``legacy`` (fields ``None``)."""
    own = record.get("protocol")
    if isinstance(own, Mapping) and isinstance(own.get("fields"), Mapping):
        return {"fingerprint": str(own.get("fingerprint")), "source": str(own.get("source") or "measured"),
                "fields": dict(own["fields"])}
    env = record.get("env") if isinstance(record.get("env"), Mapping) else {}
    spec = _spec(env.get("id"))
    kwargs = env.get("kwargs")
    if spec is None or not isinstance(kwargs, Mapping):
        return {"fingerprint": LEGACY, "source": "legacy", "fields": None}
    fields = {
        "env_id": spec.id,
        "behaviour_version": None,
        "split": str(record.get("split")),
        "tasks": tasks_hash(record_task_ids(record)),
        "task_kwargs": resolved_task_kwargs(spec, kwargs),
        "data": None,
        "prompt_template": spec.prompt_template,
        "reward": spec.reward,
        "libraries": None,
    }
    return {"fingerprint": fingerprint_of(fields), "source": "recomputed", "fields": fields}


def protocol_problems(record: Mapping[str, Any]) -> list[str]:
    """What is wrong with a schema-2 record's protocol, each naming the field (empty: it is sound).

    Checked: every field is present; the behaviour version is one this stratagym knows for the env; the
    fingerprint is the hash of the fields; and the fields agree with the record's own config (env id,
    split, the task ids of its episodes, the task-changing kwargs it stores).
    """
    proto = record.get("protocol")
    if not isinstance(proto, Mapping):
        return ["protocol: missing (schema stratagym.result/2 requires the env's protocol fingerprint)"]
    fields = proto.get("fields")
    if not isinstance(fields, Mapping):
        return ["protocol.fields: missing"]
    problems = [f"protocol.fields.{name}: missing" for name in PROTOCOL_FIELDS if name not in fields]
    if not isinstance(proto.get("fingerprint"), str):
        problems.append("protocol.fingerprint: missing")
    if problems:
        return problems
    env = record.get("env") or {}
    if fields["env_id"] != env.get("id"):
        problems.append("protocol.fields.env_id: does not match the record's env.id")
    spec = _spec(env.get("id"))
    version = fields["behaviour_version"]
    if spec is not None:
        known = int(spec.behaviour_version)
        if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= known:
            problems.append(f"protocol.fields.behaviour_version: unknown env version for {spec.id} "
                            f"(this stratagym knows 1 to {known}); a newer stratagym wrote it, or it was edited")
        elif isinstance(env.get("kwargs"), Mapping) and not _kwargs_agree(spec, env["kwargs"], fields["task_kwargs"],
                                                                            defaults=version == known):
            problems.append("protocol.fields.task_kwargs: does not match the record's env.kwargs")
    if fields["split"] != record.get("split"):
        problems.append("protocol.fields.split: does not match the record's split")
    if fields["tasks"] != tasks_hash(record_task_ids(record)):
        problems.append("protocol.fields.tasks: does not match the task ids of the record's episodes")
    if proto["fingerprint"] != fingerprint_of(fields):
        problems.append("protocol.fingerprint: does not match the protocol's fields (edited after the eval?)")
    return problems


def _kwargs_agree(spec: Any, kwargs: Mapping[str, Any], task_kwargs: Any, *, defaults: bool) -> bool:
    """The fingerprint's task kwargs agree with the record's: every kwarg it stores explicitly, and with
    ``defaults`` (the record is of the env's current behaviour version, so today's defaults were its
    defaults) every default the fingerprint lists too. A kwarg the env gained since the eval (absent from
    the fingerprint, its default keeping the old behaviour) does not make a sound record look forged; a
    default that changed came with a version bump, and is then not re-derived."""
    if not isinstance(task_kwargs, Mapping):
        return False
    now = resolved_task_kwargs(spec, kwargs)
    for k, v in now.items():
        stored = k in kwargs or k in spec.kwargs
        if (stored and (k not in task_kwargs or task_kwargs[k] != v)) or (defaults and k in task_kwargs and task_kwargs[k] != v):
            return False
    return True


def compare_records(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """Why records ``a`` and ``b`` cannot be ranked together, field by field (empty: they can). A
    different env or split is named first; then every protocol field that differs."""
    pa, pb = protocol_for(a), protocol_for(b)
    out = []
    for key, va, vb in (("env", (a.get("env") or {}).get("id"), (b.get("env") or {}).get("id")),
                        ("split", a.get("split"), b.get("split"))):
        if va != vb:
            out.append(f"{key}: {va} vs {vb}")
    if pa["source"] == "legacy" or pb["source"] == "legacy":
        return out + [f"protocol: {pa['source']} vs {pb['source']} (a legacy record's protocol is unknown: "
                      "it is compared with nothing)"]
    return out + [d for d in protocol_diff(pa["fields"], pb["fields"]) if not d.startswith(("env_id:", "split:"))]
