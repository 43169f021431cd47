"""Agent specs for evaluation: what a user types after ``stratagym eval`` and how it becomes an agent.

=============================  =====================================================================
spec                           agent
=============================  =====================================================================
``scripted:<name>``            a scripted agent the env declares (``oracle``, ``random``, ...)
``<folder>``                   a checkpoint: a training run folder (its newest complete checkpoint),
                               ``<run>/checkpoints/latest``, ``<run>/checkpoints/step-N`` or
                               ``<run>/checkpoints/step-N/policy`` (or any ``save_pretrained`` folder)
``hf:<name or folder>``        a transformers model by hub name (needs the hub: fails offline)
``openai:<model>@<url>``       a model served behind an OpenAI-compatible HTTP API
=============================  =====================================================================

:func:`build_agent` is the one place that turns a spec into a policy the rollout loop plays
(:class:`~stratagym.agents.scripted.ScriptedPolicy` around a scripted agent, or an
:class:`~stratagym.agents.llm.LLMPolicy`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import gymnasium as gym

from stratagym.agents.env_fit import POLICY_CONFIG_FILE, check_policy_for_env
from stratagym.agents.scripted import ScriptedPolicy
from stratagym.envs.registry import agent_env_kwargs, make_agent
from stratagym.errors import UserError
from stratagym.eval.records import content_hash_path, content_hash_text

__all__ = ["AgentSpec", "AgentSpecError", "parse_agent_spec", "build_agent", "resolve_checkpoint"]


class AgentSpecError(UserError, ValueError):
    """An agent spec that cannot be parsed or loaded; the message says what to type instead."""


_HELP = "use scripted:<name>, a checkpoint folder, hf:<model name>, or openai:<model>@<base url>"


@dataclass(frozen=True)
class AgentSpec:
    """A parsed agent spec: ``kind`` in scripted/checkpoint/hf/openai, ``name`` (agent name, path, model)."""

    raw: str
    kind: str
    name: str
    url: str | None = None

    @property
    def label(self) -> str:
        if self.kind == "checkpoint":
            p = Path(self.name)
            if p.name == "policy" and p.parent.name.startswith("step-") and p.parent.parent.name == CHECKPOINT_DIR:
                return f"{p.parent.parent.parent.name}@{p.parent.name}"  # run@step-N, not "policy"
            return p.name or self.name
        return self.raw

    def content_hash(self) -> str:
        """sha256 of the checkpoint's files; for agents without local files, of the spec itself."""
        if self.kind == "checkpoint":
            return content_hash_path(self.name)
        if self.kind in ("hf", "policy") and Path(self.name).exists():
            return content_hash_path(self.name)
        return content_hash_text(self.raw)

    @property
    def is_scripted(self) -> bool:
        return self.kind == "scripted"

    def forced_template(self, options: Mapping[str, Any]) -> str | None:
        """The prompt template this agent is forced to use, if any: ``template`` in its options (``-P
        template=...``), else the one a saved policy folder's ``stratagym_policy.json`` names (a recipe's
        ``policy.template``); None: the env's own. Read without loading the model, so the protocol
        fingerprint names it even for an eval resumed with nothing left to play."""
        if options.get("template"):
            return str(options["template"])
        if self.kind not in ("checkpoint", "hf", "policy") or not Path(self.name).is_dir():
            return None
        try:
            saved = json.loads((Path(self.name) / POLICY_CONFIG_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        value = saved.get("template") if isinstance(saved, dict) else None
        return str(value) if isinstance(value, str) and value else None


    def compute_dtype(self, options: Mapping[str, Any]) -> str | None:
        """The dtype a model agent computes in (canonical name), read without loading the model: ``dtype``
        in its options (``-P dtype=bf16``; ``auto`` resolved on this machine), else the one its saved
        ``stratagym_policy.json`` records (``auto`` there predates the dtype policy and meant float32), else
        float32. None for agents without local weights (scripted, served)."""
        if self.kind not in ("checkpoint", "hf", "policy"):
            return None
        from stratagym.precision import canonical_dtype, dtype_name, resolve_dtype  # lazy: torch

        value = options.get("dtype")
        if value is None and Path(self.name).is_dir():
            try:
                saved = json.loads((Path(self.name) / POLICY_CONFIG_FILE).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                saved = {}
            value = saved.get("dtype") if isinstance(saved, dict) else None
            value = "float32" if value in (None, "auto") else value
        if value is None:
            return "float32"
        if canonical_dtype(str(value)) != "auto":
            return canonical_dtype(str(value))
        import torch

        device = str(options.get("device", "auto"))
        device = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
        return dtype_name(resolve_dtype("auto", device))


def parse_agent_spec(spec: str) -> AgentSpec:
    """Parse ``spec`` (see the module docstring); raise :class:`AgentSpecError` with a fix otherwise."""
    spec = spec.strip()
    if not spec:
        raise AgentSpecError(f"empty agent spec; {_HELP}")
    if spec.startswith("scripted:"):
        name = spec.split(":", 1)[1]
        if not name:
            raise AgentSpecError("scripted: needs an agent name, e.g. scripted:oracle or scripted:random")
        return AgentSpec(spec, "scripted", name)
    if spec.startswith("hf:"):
        name = spec[3:]
        if not name:
            raise AgentSpecError("hf: needs a model name, e.g. hf:Qwen/Qwen2.5-0.5B-Instruct")
        return AgentSpec(spec, "hf", name)
    if spec.startswith("openai:"):
        rest = spec[len("openai:"):]
        model, sep, url = rest.partition("@")
        if not sep or not model or not url.startswith(("http://", "https://")):
            raise AgentSpecError(f"bad openai spec {spec!r}; write openai:<model>@<base url>, e.g. openai:qwen@http://127.0.0.1:8000/v1")
        return AgentSpec(spec, "openai", model, url=url)
    path = Path(os.path.expanduser(spec))
    if path.exists():
        return AgentSpec(spec, "checkpoint", str(resolve_checkpoint(path)))
    raise AgentSpecError(f"unknown agent {spec!r}: not a folder and no known prefix; {_HELP}")


#: The layout training writes (:mod:`stratagym.training.checkpoint`): ``<run>/checkpoints/{latest,
#: step-N/{policy/, COMPLETE, ...}}``. Repeated here as names only, so parsing a spec imports no torch.
CHECKPOINT_DIR = "checkpoints"
_COMPLETE = "COMPLETE"
_FORMS = ("a run folder, <run>/checkpoints/latest, <run>/checkpoints/step-N, <run>/checkpoints/step-N/policy, "
          "or a folder written by save_pretrained (with config.json)")


def resolve_checkpoint(path: str | os.PathLike[str]) -> Path:
    """The policy folder (``save_pretrained`` output) that ``path`` names, for each form a user may type:

    * a folder with ``config.json`` or safetensors weights: that folder (``.../step-N/policy`` or any
      HF model folder);
    * ``.../step-N``: its ``policy/`` (refused without the ``COMPLETE`` marker: a half-written checkpoint);
    * ``.../checkpoints/latest`` (the pointer file training writes) or ``.../checkpoints``: the checkpoint
      the pointer names, else the highest complete step;
    * a run folder (holding ``checkpoints/``): its newest complete checkpoint.
    """
    p = Path(path)
    if p.is_file():
        if p.name == "latest" and p.parent.name == CHECKPOINT_DIR:
            return _newest(p.parent, str(path))
        raise AgentSpecError(f"{str(path)!r} is a file; a checkpoint is {_FORMS}")
    if (p / "config.json").is_file() or any(p.glob("*.safetensors")):
        return p  # a model folder (save_pretrained output)
    if (p / "policy").is_dir() and p.name.startswith("step-"):
        if not (p / _COMPLETE).exists():
            raise AgentSpecError(f"{str(path)!r} is an incomplete checkpoint (no {_COMPLETE} marker: its write was "
                                 "interrupted); use another step or the run folder")
        return _policy_of(p, str(path))
    if p.name == CHECKPOINT_DIR and any(p.glob("step-*")):
        return _newest(p, str(path))
    if (p / CHECKPOINT_DIR).is_dir():
        return _newest(p / CHECKPOINT_DIR, str(path))
    raise AgentSpecError(f"{str(path)!r} is not a checkpoint (no config.json and no checkpoints/ inside); give {_FORMS}")


def _newest(root: Path, typed: str) -> Path:
    """The newest complete checkpoint under ``<run>/checkpoints`` (the ``latest`` pointer if it names a
    complete one, else the highest complete ``step-N``), as its policy folder."""
    pointer = root / "latest"
    if pointer.is_file():
        named = root / pointer.read_text(encoding="utf-8", errors="replace").strip()
        if named.name.startswith("step-") and (named / _COMPLETE).exists():
            return _policy_of(named, typed)
    steps = []
    for d in root.glob("step-*"):
        try:
            steps.append((int(d.name.split("-", 1)[1]), d))
        except ValueError:
            continue
    complete = [d for _, d in sorted(steps) if (d / _COMPLETE).exists()]
    if not complete:
        raise AgentSpecError(f"{typed!r} holds no complete checkpoint yet (training writes one every train.save_every steps)")
    return _policy_of(complete[-1], typed)


def _policy_of(step_dir: Path, typed: str) -> Path:
    """``step_dir/policy``: a full model (``config.json``) or, for a LoRA run, its adapter
    (``adapter_config.json``, which names the base model the policy loader reads)."""
    policy = step_dir / "policy"
    if not any((policy / name).is_file() for name in ("config.json", "adapter_config.json")):
        raise AgentSpecError(f"{typed!r}: checkpoint {step_dir.name} has no policy/config.json "
                             "(nor policy/adapter_config.json for a LoRA run)")
    return policy


def scripted_env_kwargs(spec: AgentSpec, env_id: str) -> dict[str, Any]:
    """The ``gymnasium.make`` kwargs a scripted agent asks of its envs (none for LLM agents)."""
    if not spec.is_scripted:
        return {}
    try:
        return agent_env_kwargs(env_id, spec.name)
    except KeyError as exc:
        raise AgentSpecError(str(exc).strip('"')) from None


def build_agent(spec: AgentSpec, env_id: str, env: gym.Env, *, seed: int = 0, **options: Any) -> Any:
    """A policy for ``env_id`` that the rollout loop plays (``env`` is one of the eval's envs).

    Scripted agents come from the env's registry entry, wrapped in a ``ScriptedPolicy``; LLM agents
    (checkpoint/hf/openai) are ``LLMPolicy`` objects.
    """
    if spec.is_scripted:
        try:
            return ScriptedPolicy(make_agent(env_id, spec.name, env, seed=seed))
        except KeyError as exc:
            raise AgentSpecError(str(exc).strip('"')) from None
    return _llm_agent(spec, env_id, seed=seed, **options)


def _llm_agent(spec: AgentSpec, env_id: str, *, seed: int, **options: Any) -> Any:
    try:
        return _llm_policy(spec.raw, env_id=env_id, seed=seed, **options)
    except (OSError, ValueError) as exc:
        if spec.kind == "hf" and not Path(spec.name).exists():
            where = (
                "offline mode is on (HF_HUB_OFFLINE/TRANSFORMERS_OFFLINE) and it is not in the local cache"
                if _offline()
                else "the model hub could not be reached or has no such model"
            )
            raise AgentSpecError(
                f"{spec.raw}: cannot load {spec.name!r} by hub name: {where}. "
                f"Pass a local checkpoint folder instead. ({type(exc).__name__}: {str(exc)[:200]})"
            ) from exc
        raise AgentSpecError(f"could not load agent {spec.raw!r}: {exc}") from exc


def _llm_policy(raw: str, *, env_id: str, seed: int = 0, greedy: bool = True, **options: Any) -> Any:
    """An :class:`stratagym.agents.llm.LLMPolicy` from a spec; ``options`` are
    :class:`~stratagym.agents.llm.LLMConfig` fields (``greedy`` is the harness's: it plays greedily
    unless told otherwise)."""
    import torch

    from stratagym.agents.llm import LLMConfig, LLMPolicy  # lazy: torch, for model agents only

    spec = parse_agent_spec(raw)
    torch.manual_seed(seed)
    if spec.kind in ("checkpoint", "hf"):
        policy = LLMPolicy.from_pretrained(spec.name, **options)
        check_policy_for_env(policy, env_id)  # an SFT checkpoint built for another env: refused, with the fix
        return policy
    if spec.kind == "openai":
        openai = {"base_url": spec.url, "model": spec.name, **dict(options.pop("openai", {}) or {})}
        cfg = LLMConfig(model=options.pop("model", spec.name), backend="openai", openai=openai, **options)
        return LLMPolicy.from_config(cfg)
    raise AgentSpecError(f"{raw!r} is not an LLM agent spec")


def _offline() -> bool:
    return any(os.environ.get(v, "").lower() in ("1", "true", "yes") for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))
