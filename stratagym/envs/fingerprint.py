"""The protocol fingerprint: what an eval's number was measured under, computed by the env family.

Two results can be ranked side by side only if they were measured the same way: the same env behaviour,
the same task-changing kwargs (``topk``, ``max_turns``, the prompt, WebShop's observation mode, the
tool-calling ``protocol``...), the same tasks, the same data (corpus, index, games, catalog), the same
retriever settings, prompt template, reward and behaviour-relevant library versions. This module turns
an env (its :class:`~stratagym.envs.registry.EnvSpec` plus the instance the eval played) into those
fields and a hash of them. The eval harness calls :func:`protocol_of` and never guesses a field itself;
the leaderboard groups by the hash and names the fields that differ (:func:`protocol_diff`).

The fields (``docs/protocol.md`` documents each one):

``env_id``            the gymnasium id
``behaviour_version`` ``EnvSpec.behaviour_version``: bumped by every commit that changes what the env
                      does (a test pins transcripts of scripted episodes per family and fails when they
                      change and this did not)
``split``             the env's own (normalised) split name
``tasks``             the number of evaluated tasks and the sha256 over their ids, in order (the split's
                      membership as measured)
``task_kwargs``       every constructor kwarg, defaults filled in from the signature, minus those the
                      spec names as neutral (``neutral_kwargs``: timeouts, render mode...) or as data
                      locations (``data_kwargs``: paths, whose *content* ``data`` hashes); long texts
                      (a prompt) are kept as their sha256
``data``              the family's own content hashes and settings (``TextEnv.protocol_data``): corpus,
                      index and retriever settings for QA, game files for ALFWorld, catalog and search
                      backend for WebShop; ``{}`` for envs whose data is their code
``prompt_template``   the LLM prompt template by content: ``"<name> sha256:<hex>"``, the hash of what the template
                      renders and parses (``stratagym.agents.prompts.protocol_template``, passed in by the
                      eval, which knows the agent's template; the agents layer sits above this one); the
                      spec's template name alone where no caller passes one (records before content hashing)
``reward``            the reward function the spec names (``EnvSpec.reward``)
``libraries``         distribution -> installed version for the libraries that change behaviour
                      (``EnvSpec.libraries``, or the subset the env says it uses); ``null`` when absent
``dtype``             the compute dtype of a model agent (``bfloat16``, ``float16``) when it is not
                      ``float32``: a bf16 eval of a model is not the fp32 eval of it. Absent for float32,
                      scripted agents and every record before the dtype policy (all measured in float32),
                      so their fingerprints are unchanged

Everything here is pure standard library plus the registry, so the envs layer owns it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import inspect
import json
import os
from typing import Any, Iterable, Mapping, Sequence

from stratagym.envs.registry import get_spec
from stratagym.objects import load_object

__all__ = [
    "PROTOCOL_FIELDS",
    "DEFAULT_DTYPE",
    "LEGACY",
    "GLOBAL_NEUTRAL_KWARGS",
    "protocol_of",
    "fingerprint_of",
    "resolved_task_kwargs",
    "tasks_hash",
    "library_versions",
    "protocol_diff",
    "jsonable",
    "hash_files",
]

#: The fields of a protocol, in the order they are documented and shown.
PROTOCOL_FIELDS: tuple[str, ...] = (
    "env_id", "behaviour_version", "split", "tasks", "task_kwargs", "data", "prompt_template", "reward", "libraries",
)
#: The fingerprint of a record whose protocol cannot be recomputed (env unknown here, no stored config).
LEGACY = "legacy"
#: Kwargs no env's task depends on: how it is shown, how deep its HGPO context hashes go, the split name
#: (the record's ``split`` and ``tasks`` fields carry what was measured, whatever alias was typed).
GLOBAL_NEUTRAL_KWARGS: frozenset[str] = frozenset({"render_mode", "context_k", "split"})
#: Strings longer than this are kept as their sha256 (a prompt template, a long path).
_MAX_INLINE = 64


def _sha(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON for a fingerprint: long strings as their sha256, objects as their type name
    (an object passed as a kwarg, e.g. a Retriever instance, cannot be compared by value)."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return value if len(value) <= _MAX_INLINE else _sha(value)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, os.PathLike):
        return jsonable(os.fspath(value))
    return f"<{type(value).__module__}.{type(value).__qualname__}>"


def tasks_hash(task_ids: Iterable[str]) -> str:
    """``"<n> tasks sha256:<hex>"``: the count (so a difference reads "50 tasks vs 500 tasks") and the sha256
    over the task ids in order (one per line)."""
    ids = [str(t) for t in task_ids]
    return f"{len(ids)} tasks " + _sha("\n".join(ids))


def hash_files(paths: Iterable[str | os.PathLike[str]]) -> str:
    """sha256 over files' bytes in the given order (each preceded by its length): content, not location."""
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as fh:
            data = fh.read()
        h.update(str(len(data)).encode() + b"\0" + data)
    return "sha256:" + h.hexdigest()


def _constructor_defaults(entry_point: Any) -> dict[str, Any]:
    """The keyword defaults of an env class's ``__init__`` (empty when it cannot be imported here)."""
    try:
        cls = load_object(entry_point) if isinstance(entry_point, str) else entry_point
        sig = inspect.signature(cls.__init__ if inspect.isclass(cls) else cls)
    except Exception:  # an env whose extra is missing: only the given kwargs are known
        return {}
    return {name: p.default for name, p in sig.parameters.items()
            if p.default is not inspect.Parameter.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def resolved_task_kwargs(spec: Any, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Every kwarg that changes the task: the constructor's defaults, then the spec's kwargs, then
    ``kwargs``, minus the neutral and data-location ones, as plain JSON.

    Defaults are filled in so that ``topk=3`` typed and ``topk`` left at its default 3 are one protocol;
    a kwarg an env gains later (issue 31's ``protocol``) joins the fingerprint with no change here.
    """
    merged = {**_constructor_defaults(spec.entry_point), **dict(spec.kwargs), **dict(kwargs)}
    drop = GLOBAL_NEUTRAL_KWARGS | set(spec.neutral_kwargs) | set(spec.data_kwargs)
    unset = {k for k in getattr(spec, "set_only_kwargs", ()) if merged.get(k) is None}
    return {k: jsonable(v) for k, v in sorted(merged.items()) if k not in drop | unset}


def library_versions(names: Iterable[str]) -> dict[str, str | None]:
    """Installed version of each distribution (``None`` where it is not installed)."""
    out: dict[str, str | None] = {}
    for name in sorted(set(names)):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


#: The compute dtype every record before the dtype policy was measured in; a protocol names only another one.
DEFAULT_DTYPE = "float32"


def _dtype_field(value: Any) -> Any:
    return None if value in (None, DEFAULT_DTYPE) else value


def fingerprint_of(fields: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of the protocol fields (the board groups records by it); ``dtype`` counts
    only when it is not float32, so records from before the dtype policy keep their fingerprints."""
    core = {k: fields.get(k) for k in PROTOCOL_FIELDS}
    dtype = _dtype_field(fields.get("dtype"))
    if dtype is not None:
        core["dtype"] = dtype
    return _sha(_canonical(core))


_SPEC_NAME: Any = object()


def protocol_of(env: Any, env_id: str, kwargs: Mapping[str, Any], task_ids: Sequence[str], split: str, *,
                prompt_template: str | None = _SPEC_NAME, dtype: str | None = None) -> dict[str, Any]:
    """The protocol of an eval of ``env`` (the instance played, or its wrapper) on ``task_ids``.

    Returns ``{"fingerprint": ..., "source": "measured", "fields": {...}}``, what a result record keeps
    under ``protocol``. ``kwargs`` are the kwargs the env was made with (``gymnasium.make``'s).
    ``prompt_template``: the content fingerprint of the template the agent prompts with
    (``stratagym.agents.prompts.protocol_template``); not given, the spec's template name alone.
    ``dtype``: the model agent's compute dtype (canonical name); recorded when it is not float32.
    """
    spec = get_spec(env_id)
    base = getattr(env, "unwrapped", env)
    own = getattr(base, "protocol_data", None)
    data = dict(own()) if callable(own) else {}
    libs = data.pop("libraries", None)
    fields = {
        "env_id": env_id,
        "behaviour_version": int(spec.behaviour_version),
        "split": str(split),
        "tasks": tasks_hash(task_ids),
        "task_kwargs": resolved_task_kwargs(spec, kwargs),
        "data": jsonable(data),
        "prompt_template": spec.prompt_template if prompt_template is _SPEC_NAME else prompt_template,
        "reward": spec.reward,
        "libraries": library_versions(spec.libraries if libs is None else libs),
    }
    if _dtype_field(dtype) is not None:
        fields["dtype"] = str(dtype)
    return {"fingerprint": fingerprint_of(fields), "source": "measured", "fields": fields}


def _flat(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, Mapping) and value:
        for k in sorted(value, key=str):
            _flat(f"{prefix}.{k}" if prefix else str(k), value[k], out)
    else:
        out[prefix] = value


_ABSENT = object()


def _show(v: Any, *, kwarg: bool = False) -> str:
    if v is _ABSENT:
        return "absent"
    if v is None:
        return "None" if kwarg else "unknown"
    if isinstance(v, str):
        at = v.find("sha256:")
        return v[:at + 15] if at >= 0 else v
    return json.dumps(v, sort_keys=True, ensure_ascii=False)


def protocol_diff(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> list[str]:
    """Why protocols ``a`` and ``b`` (their ``fields``) differ, one ``"name: A vs B"`` per leaf field
    (``task_kwargs.topk: 1 vs 3``); task-changing kwargs are named by their kwarg alone (``topk 1 vs 3``).
    Empty: the two are comparable. ``None`` stands for a legacy record whose protocol is unknown."""
    if a is None or b is None:
        return [] if a is None and b is None else ["protocol: unknown (legacy record) vs known"
                                                   if a is None else "protocol: known vs unknown (legacy record)"]
    fa: dict[str, Any] = {}
    fb: dict[str, Any] = {}
    for name in PROTOCOL_FIELDS:
        _flat(name, a.get(name), fa)
        _flat(name, b.get(name), fb)
    out = []
    da, db = _dtype_field(a.get("dtype")), _dtype_field(b.get("dtype"))
    if da != db:
        out.append(f"dtype: {da or DEFAULT_DTYPE} vs {db or DEFAULT_DTYPE}")
    for key in sorted(set(fa) | set(fb), key=lambda k: (PROTOCOL_FIELDS.index(k.split(".")[0]) if k.split(".")[0] in PROTOCOL_FIELDS else 99, k)):
        va, vb = fa.get(key, _ABSENT), fb.get(key, _ABSENT)
        if va != vb:
            if key.startswith("task_kwargs."):  # a kwarg reads as people write it: "topk 1 vs 3"
                out.append(f"{key.removeprefix('task_kwargs.')} {_show(va, kwarg=True)} vs {_show(vb, kwarg=True)}")
            else:
                out.append(f"{key}: {_show(va)} vs {_show(vb)}")
    return out
