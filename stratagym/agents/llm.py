"""LLM policies: prompting + memory + action parsing around a transformers model and a backend.

:class:`LLMPolicy` implements the :class:`stratagym.agents.policy.Policy` protocol:

* ``generate`` builds one prompt per live env with the env family's template
  (:mod:`stratagym.agents.prompts`; the last ``memory_k`` turns of the episode), tokenises them with
  the model's chat template, samples all of them in ONE backend call, and parses each response into
  the env action. The payload of each sample is ``{"prompt_ids", "response_ids", "sampling_logprobs"}``
  (CPU tensors);
* ``sequence_log_probs`` re-scores payloads with the transformers model (with gradients): prompts and
  responses are concatenated and RIGHT-padded without an attention mask (causal attention alone is exact
  for the real tokens, and SDPA takes its causal fast path); the model computes logits only at the ``T``
  positions of each row that predict its response tokens (a per-row ``logits_to_keep``), and the result is
  left-aligned (column t = t-th response token) with a mask. Older transformers without per-row
  ``logits_to_keep`` get the left-padded, masked layout. When payloads share prompts (the G samples of a
  group), each distinct prompt runs once and its keys/values are reused by the rows that share it
  (``shared_prompt_scoring``; same maths, gradients flow back into the shared prompt pass);
* ``frozen_copy`` is a deep copy of the model without gradients -- or, for LoRA, a view that runs the
  same model with other adapter weights, no second copy of the base. The reference is the policy training
  starts from, as in verl and TRL: for a LoRA added to a base model, the base (adapters disabled); for a
  policy loaded from a saved adapter (RL from a LoRA SFT checkpoint), that adapter, loaded a second time
  as a frozen ``reference`` adapter (TRL's ``ref_adapter_name`` idea). Disabling the adapter there would
  make the KL term pull the policy back to the untuned base, not to the SFT policy;
* ``save_pretrained`` / ``from_pretrained`` write/read a normal HF folder (safetensors, tokenizer) plus
  ``stratagym_policy.json`` with the agent settings. LoRA policies save the adapter and the base model
  path; ``from_pretrained`` restores both.

Backends: ``hf`` samples with the same model (KV-cached loop, CPU or GPU); ``vllm`` samples in a
colocated vLLM engine that receives the weights after each optimizer step
(:meth:`LLMPolicy.after_optimizer_step`); ``openai`` sends requests to a served model (evaluation only).
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

import torch

from stratagym.agents.backends import HFGenerator, OpenAIGenerator, SamplingConfig, VLLMGenerator, vllm_dtype_name
from stratagym.agents.env_fit import POLICY_CONFIG_FILE  # re-exported (in __all__)
from stratagym.agents.policy import (
    Generation,
    GenerationRequest,
    Policy,
    SequenceLogProbs,
    unwrap_model,
)
from stratagym.agents.prompts import PromptTemplate, template_for_env
from stratagym.agents.tool_messages import chat_template_has_tools, fallback_messages, openai_messages
from stratagym.atomic import share_weights
from stratagym.errors import ConfigError
from stratagym.hub_kernels import load_kwargs
from stratagym.precision import canonical_dtype, dtype_name, resolve_dtype

__all__ = ["LLMConfig", "LLMPolicy", "POLICY_CONFIG_FILE"]

_BACKENDS = ("hf", "vllm", "openai")


@dataclass
class LLMConfig:
    """Settings of an LLM policy (the ``policy:`` section of a recipe).

    ``model``: a local HF folder or hub name (hub names need the network). ``template``: force a prompt
    template (``search_r1``, ``think_action``, ``plain``); default by env family. ``memory_k``: earlier
    turns kept in the prompt. ``max_prompt_tokens``: the most prompt tokens (also held within the model's context less
    ``max_new_tokens``); a longer prompt is cut by :meth:`LLMPolicy.fit_prompt`'s rule (oldest remembered turns
    first, then its first tokens), and the cut is recorded (``Generation.extra["prompt_cut"]``, the eval's
    ``prompt_cuts`` metric).
    ``lora``: peft LoRA settings (``r``, ``alpha``, ``dropout``, ``target_modules``) or None for full
    fine-tuning. ``fused_decode``: the ``hf`` backend samples Llama/Qwen2 models on CPU in float32 through the
    fused static-KV-cache forward (:mod:`stratagym.agents.inference.fused_decode`; exact, several times faster on small
    models); False always calls the transformers model per token; ``force`` also uses it on GPUs and in
    bf16/fp16, where it has not been checked. ``prefix_cache``: with fused decoding,
    a call's prompts that extend a row of the previous call (the next turn of a multi-turn rollout: the
    last prompt, its response, the new observation) run only their new tokens, reusing the previous
    call's keys and values while the weights are unchanged (:mod:`stratagym.agents.inference.prefix_cache`; the
    same maths up to float rounding); False prefills every prompt whole. ``shared_prompt_scoring``: re-scoring
    runs each distinct prompt once and the rows that share it continue from its key/value cache (a
    group's G samples share their prompt, so the scoring forward, the reference forward and the backward
    skip (G-1)/G of the prompt tokens); the same maths as scoring every row whole (equal up to float
    rounding, gradients included). Used on an unwrapped model only (not under DDP/FSDP, which expect one
    forward per backward) and not with gradient checkpointing; False always scores rows whole.
    ``shared_history_scoring``: with the fused scoring forward, a row whose prompt + response is the start
    of another row's (an earlier turn of a multi-turn trajectory whose history the prompt keeps verbatim)
    is read out of that row's forward instead of running its own (the same maths; rows of one trajectory
    must be in one scoring call, which the trainer's trajectory-ordered micro-batches mostly give); used
    when it skips at least a quarter of the tokens. ``fused_scoring``: re-scoring of Llama/Qwen2 models runs through the fused training forward
    (:mod:`stratagym.agents.inference.fused_score`: q/k/v and gate/up as one matmul each, rotary in one pass,
    one additive attention mask per pass; the same maths, log-probs and gradients equal to the transformers forward up to
    float rounding), for rows scored whole and shared prompts alike; used on an unwrapped model on CPU
    without gradient checkpointing, for batches whose attention mask fits in 256 MiB; other models (LoRA
    included), GPUs and longer batches use the transformers forward. False always calls the transformers
    model.
    ``dtype``: the compute dtype (:mod:`stratagym.precision`): ``float32`` (the default), ``bfloat16``,
    ``float16`` (CUDA), or ``auto`` (bf16 where the chip computes it natively, else fp32). Frozen weights
    (a LoRA base, the KL reference) are held in it; LoRA adapters stay fp32; a fully trained model keeps
    fp32 master weights and computes under ``torch.autocast`` (the trainer's
    :meth:`LLMPolicy.use_master_weights`). A saved policy records the dtype ``auto`` resolved to.
    ``vllm`` / ``openai``: keyword arguments of those backends.
    ``chat_template``: replace the tokenizer's chat template: a Jinja file, or ``trl:NAME`` for a template
    the installed TRL package ships (``trl:qwen2_5``: Qwen2.5's, with a tool section, for models whose own
    template has none, under the tools protocol); None keeps the model's.
    """

    model: str = ""
    backend: str = "hf"
    template: Optional[str] = None
    memory_k: int = 2
    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_prompt_tokens: int = 4096
    dtype: str = "float32"
    device: str = "auto"
    lora: Optional[dict[str, Any]] = None
    gradient_checkpointing: bool = False
    logprob_chunk: Optional[int] = None
    fused_decode: "bool | str" = True
    prefix_cache: bool = True
    shared_prompt_scoring: bool = True
    shared_history_scoring: bool = True
    fused_scoring: bool = True
    vllm: dict[str, Any] = field(default_factory=dict)
    openai: dict[str, Any] = field(default_factory=dict)
    chat_template: Optional[str] = None

    def validate(self) -> None:
        if self.backend not in _BACKENDS:
            raise ConfigError(f"policy.backend must be one of {_BACKENDS}, got {self.backend!r}")
        if not self.model and self.backend != "openai":
            raise ConfigError("policy.model is empty: give a local HF model folder (e.g. the tiny test model) or a hub name")
        canonical_dtype(self.dtype)  # ConfigError naming the choices
        if self.memory_k < 0:
            raise ConfigError(f"policy.memory_k must be >= 0, got {self.memory_k}")
        if self.fused_decode not in (True, False, "force"):
            raise ConfigError(f"policy.fused_decode must be true, false or force, got {self.fused_decode!r}")
        if self.max_prompt_tokens < 8:
            raise ConfigError(f"policy.max_prompt_tokens must be >= 8, got {self.max_prompt_tokens}")
        if self.lora is not None and not isinstance(self.lora, dict):
            raise ConfigError("policy.lora must be a mapping like {r: 16, alpha: 32, target_modules: [q_proj, v_proj]} or null")
        self.sampling().validate()

    def sampling(self) -> SamplingConfig:
        return SamplingConfig(self.temperature, self.top_p, self.top_k, self.max_new_tokens)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "LLMConfig":
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ConfigError(f"unknown policy option(s) {sorted(unknown)}; valid: {sorted(known)}")
        return cls(**data)


def load_chat_template(spec: str) -> str:
    """The Jinja text ``policy.chat_template`` names: a file, or ``trl:NAME`` (a template in TRL's package)."""
    if spec.startswith("trl:"):
        try:
            import trl
        except ImportError as exc:
            raise ConfigError(f"policy.chat_template {spec!r} needs the trl package (pip install trl)") from exc
        path = Path(trl.__file__).parent / "chat_templates" / f"{spec[4:]}.jinja"
        if not path.is_file():
            names = sorted(p.stem for p in path.parent.glob("*.jinja"))
            raise ConfigError(f"TRL ships no chat template {spec[4:]!r}; choose one of {names[:12]}...")
        return path.read_text()
    path = Path(spec)
    if not path.is_file():
        raise ConfigError(f"policy.chat_template {spec!r} is neither a Jinja file nor trl:NAME (e.g. trl:qwen2_5)")
    return path.read_text()


def _resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def _adapter_base_mismatch(tokenizer: Any, base: torch.nn.Module, base_path: str) -> Optional[str]:
    """Why a LoRA adapter saved with ``tokenizer`` cannot sit on the model ``base`` (loaded from
    ``base_path``), or None when nothing says so.

    peft loads an adapter onto any model whose adapted layers have the same shapes, so an adapter put
    on another model of the same width, or on a model with another vocabulary, would load silently and
    generate garbage. The adapter folder keeps the tokenizer it was trained with: the base's own
    tokenizer must give every token the same id, and the base's embedding must have a row for every
    token. (Shape mismatches are peft's own error, turned into the same message by the caller.)
    """
    from transformers import AutoTokenizer

    rows = base.get_input_embeddings().num_embeddings
    try:
        base_tok = AutoTokenizer.from_pretrained(base_path)
    except (OSError, ValueError):
        base_tok = None
    if base_tok is not None:
        mine = tokenizer.get_vocab()
        if any(mine.get(tok) != idx for tok, idx in base_tok.get_vocab().items()):
            return (f"the adapter's tokenizer has a {len(tokenizer)}-token vocabulary, the base model's "
                    f"tokenizer another one of {len(base_tok)} tokens")
    if len(tokenizer) > rows:
        return f"the adapter's tokenizer has {len(tokenizer)} tokens, the base model's embedding only {rows} rows"
    return None


class LLMPolicy(Policy):
    """A transformers causal LM acting in text envs (see the module docstring). It subclasses the
    :class:`~stratagym.agents.policy.Policy` protocol for its hooks, and overrides every one."""

    def __init__(self, model: torch.nn.Module, tokenizer: Any, config: LLMConfig):
        config.validate()
        self.config = config
        self.model = model
        self.tokenizer = tokenizer
        if tokenizer is not None and tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        if tokenizer is not None and config.chat_template:  # saved with the tokenizer by save_pretrained
            tokenizer.chat_template = load_chat_template(config.chat_template)
        self.sampling = config.sampling()
        self._backend: Any = None
        self._dirty = False
        self._reference_of: Optional[LLMPolicy] = None  # set on LoRA reference views
        self._initial_adapter: Optional[str] = None  # the adapter folder this policy was loaded from
        self._reference_adapter: Optional[str] = None  # on a LoRA reference view: the adapter it scores with
        #: set by :meth:`use_master_weights`: fp32 weights, forward passes under autocast in this dtype
        self.autocast_dtype: Optional[torch.dtype] = None

    # ---- construction ----------------------------------------------------------------------------
    @classmethod
    def from_config(cls, config: LLMConfig) -> "LLMPolicy":
        """Load ``config.model`` (a folder or hub name) and apply LoRA if configured."""
        config.validate()
        if config.backend == "openai" and not Path(config.model or "").joinpath("config.json").exists():
            tok = _maybe_tokenizer(config.model)
            return cls(None, tok, config)  # type: ignore[arg-type]
        return cls.from_pretrained(config.model, config=config)

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike[str], config: Optional[LLMConfig] = None, **overrides: Any) -> "LLMPolicy":
        """Load a policy saved by :meth:`save_pretrained` (or any HF causal-LM folder / hub name)."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        directory = str(directory)
        saved: dict[str, Any] = {}
        cfg_file = Path(directory) / POLICY_CONFIG_FILE
        if cfg_file.exists():
            saved = json.loads(cfg_file.read_text())
        if saved.get("dtype") == "auto":
            # written before the dtype policy, when "auto" loaded the weights as saved: float32 for every
            # stratagym checkpoint; "auto" now means "bf16 where the chip has it", so it is not read as that
            saved["dtype"] = "float32"
        if config is None:
            data = {**saved, **overrides}
            data["model"] = directory
            config = LLMConfig.from_dict(data)
        device = _resolve_device(config.device)
        try:
            dtype = resolve_dtype(config.dtype, device)
        except ConfigError as exc:
            if "dtype" not in saved or "dtype" in overrides or config.dtype != saved["dtype"]:
                raise
            # the dtype came from the checkpoint, not from the caller: say so, and how to choose another
            raise ConfigError(
                f"{directory} was saved in {config.dtype} ({POLICY_CONFIG_FILE}), and {exc} For this checkpoint: "
                "stratagym eval -P dtype=float32 (a float32 eval is another protocol than a "
                f"{config.dtype} one), policy.dtype in a recipe, or a machine that computes {config.dtype}.") from None
        adapter = Path(directory) / "adapter_config.json"
        try:
            if adapter.exists():
                from peft import PeftModel

                base_path = json.loads(adapter.read_text()).get("base_model_name_or_path")
                if not base_path:
                    raise ConfigError(f"the LoRA adapter {directory} names no base model (base_model_name_or_path in {adapter}); "
                                      "set it to the folder of the model the adapter was trained on")
                try:
                    base = AutoModelForCausalLM.from_pretrained(base_path, dtype=dtype, **load_kwargs())
                except OSError as exc:
                    hint = (" (a model `stratagym models import` writes: run it first)"
                            if Path(base_path).parts[:2] == ("build", "models") else "")
                    raise ConfigError(f"the LoRA adapter {directory} needs its base model {base_path!r}{hint}, which could not "
                                      f"be loaded ({str(exc).splitlines()[0]}); point base_model_name_or_path in {adapter} to it") from exc
                tokenizer = AutoTokenizer.from_pretrained(directory)
                # an adapter on another model or vocabulary: refused here, naming both, rather than loading
                # silently (same q/v shapes) or failing deep inside peft with a state-dict listing
                mismatch = _adapter_base_mismatch(tokenizer, base, base_path)
                if mismatch is None:
                    try:
                        model = PeftModel.from_pretrained(base, directory, is_trainable=True)
                    except (RuntimeError, ValueError, KeyError) as exc:
                        mismatch = str(exc).strip().splitlines()[-1].strip() or type(exc).__name__
                if mismatch is not None:
                    raise ConfigError(
                        f"the LoRA adapter {directory} does not match its base model {base_path} ({mismatch}); it was "
                        f"trained on another model or vocabulary: set base_model_name_or_path in {adapter} to that model"
                    )
            else:
                model = AutoModelForCausalLM.from_pretrained(directory, dtype=dtype, **load_kwargs())
                tokenizer = AutoTokenizer.from_pretrained(directory)
        except OSError as exc:
            raise ConfigError(
                f"could not load the model {directory!r}: {exc}. Give a local folder with config.json and "
                "safetensors weights (the hub is not reachable offline)."
            ) from exc
        tokenizer.padding_side = "left"
        model.to(device)
        if config.lora and not adapter.exists():
            model = _apply_lora(model, config.lora)
        if config.gradient_checkpointing:
            unwrap_model(model).gradient_checkpointing_enable()
            unwrap_model(model).config.use_cache = False
        policy = cls(model, tokenizer, config)
        policy._initial_adapter = directory if adapter.exists() else None
        return policy

    # ---- precision ----------------------------------------------------------------------------------------
    @property
    def compute_dtype(self) -> torch.dtype:
        """The dtype the model computes in: the autocast dtype over fp32 master weights, else the dtype
        of its frozen (base) weights."""
        if self.autocast_dtype is not None:
            return self.autocast_dtype
        if self.model is None:
            return torch.float32
        params = list(unwrap_model(self.model).parameters())
        frozen = [p for p in params if not p.requires_grad] or params
        return frozen[0].dtype if frozen else torch.float32

    def use_master_weights(self, mixed_precision: str = "no") -> bool:
        """Before training: fp32 weights for what trains (the optimizer's master copy), compute in the
        policy's dtype, as accelerate's and TRL's mixed precision do.

        A full model loaded in bf16/fp16 is upcast to fp32 and computes under ``torch.autocast`` in the
        loaded dtype from now on; LoRA adapters are fp32 already (peft upcasts them) and their frozen base
        stays in its dtype. ``mixed_precision`` (``train.mixed_precision``: ``bf16``/``fp16``) over an fp32
        policy puts it under autocast too, so that sampling and scoring run in one dtype (accelerate's own
        autocast wraps only the forward it prepared). Returns whether anything changed."""
        module = unwrap_model(self.model)
        if module is None:
            return False
        trainable = [p for p in module.parameters() if p.requires_grad]
        low = {p.dtype for p in trainable} - {torch.float32}
        if low and self.is_lora:  # adapters peft did not upcast (autocast_adapter_dtype off): upcast them alone
            for p in trainable:
                p.data = p.data.float()
            return True
        if low:
            self.autocast_dtype = next(iter(low))
            module.float()
        elif mixed_precision in ("bf16", "fp16") and self.compute_dtype == torch.float32:
            self.autocast_dtype = resolve_dtype(mixed_precision, self.device, option="train.mixed_precision")
        else:
            return False
        self.close()  # a backend built before samples from the fp32 weights under autocast from now on
        return True

    def compute_context(self) -> Any:
        """``torch.autocast`` in the compute dtype when this policy trains fp32 master weights, else nothing."""
        if self.autocast_dtype is None or self.model is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    def save_pretrained(self, directory: str | os.PathLike[str]) -> None:
        """Weights (safetensors) + tokenizer + ``stratagym_policy.json`` into ``directory``."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        module = unwrap_model(self.model)
        if _REFERENCE_ADAPTER in getattr(module, "peft_config", {}):  # the frozen KL reference is not saved
            module.save_pretrained(out, safe_serialization=True, selected_adapters=[module.active_adapter])
        else:
            module.save_pretrained(out, safe_serialization=True)
        if self.tokenizer is not None:
            self.tokenizer.save_pretrained(out)
        share_weights(out)  # save_pretrained writes them 0600; a checkpoint is read and committed
        data = asdict(self.config)
        data.pop("model", None)
        if self.model is not None:  # what "auto" resolved to here: the checkpoint records its dtype
            data["dtype"] = dtype_name(self.compute_dtype)
        if data.get("lora") is not None:
            data["lora"] = None  # the adapter is saved; from_pretrained re-attaches it
        (out / POLICY_CONFIG_FILE).write_text(json.dumps(data, indent=2, sort_keys=True))

    # ---- protocol: torch plumbing -----------------------------------------------------------------
    def parameters(self) -> Iterator[torch.nn.Parameter]:
        return (p for p in self.model.parameters() if p.requires_grad)

    def train(self) -> "LLMPolicy":
        self.model.train()
        return self

    def eval(self) -> "LLMPolicy":
        self.model.eval()
        return self

    @property
    def device(self) -> torch.device:
        return next(unwrap_model(self.model).parameters()).device

    @property
    def is_lora(self) -> bool:
        return hasattr(unwrap_model(self.model), "disable_adapter")

    def frozen_copy(self) -> "LLMPolicy":
        """The KL reference, the policy training starts from: a frozen deep copy; for LoRA the same model
        with the adapters disabled (a fresh LoRA on a base) or with the loaded adapter's initial weights as a
        frozen second adapter (a policy loaded from a saved adapter)."""
        if self.is_lora:
            ref = LLMPolicy.__new__(LLMPolicy)
            ref.__dict__.update(self.__dict__)
            ref._reference_of = self
            ref._backend = None
            if self._initial_adapter is not None:
                module = unwrap_model(self.model)
                if _REFERENCE_ADAPTER not in module.peft_config:
                    module.load_adapter(self._initial_adapter, adapter_name=_REFERENCE_ADAPTER, is_trainable=False)
                ref._reference_adapter = _REFERENCE_ADAPTER
            return ref
        model = copy.deepcopy(unwrap_model(self.model))
        model.eval()
        for p in model.parameters():
            p.requires_grad_(False)
        if self.autocast_dtype is not None:  # frozen weights are held in the compute dtype
            model.to(self.autocast_dtype)
        ref = LLMPolicy(model, self.tokenizer, copy.deepcopy(self.config))
        ref.config.backend = "hf"
        ref.autocast_dtype = self.autocast_dtype  # and run under the policy's autocast, as the policy does
        return ref

    # ---- backend ------------------------------------------------------------------------------------
    @property
    def backend(self) -> Any:
        if self._backend is None:
            kind = self.config.backend
            if kind == "hf":
                # fp32 master weights under autocast decode from a copy of the weights in the autocast dtype
                self._backend = HFGenerator(self.tokenizer, lambda: self.model, fused=self.config.fused_decode,
                                            prefix_cache=self.config.prefix_cache, compute_dtype=self.autocast_dtype)
            elif kind == "vllm":
                path, opts = self._vllm_model_and_options()
                self._backend = VLLMGenerator(path, **opts)
                self._dirty = True
            else:
                opts = dict(self.config.openai)
                if "base_url" not in opts:
                    raise ConfigError("policy.openai.base_url is required for backend 'openai' (e.g. http://127.0.0.1:8000/v1)")
                opts.setdefault("model", self.config.model or "default")
                self._backend = OpenAIGenerator(**opts)
        return self._backend

    def _vllm_model_and_options(self) -> tuple[str, dict[str, Any]]:
        """The folder the vLLM engine loads and its options, defaulted from this policy.

        The engine only needs the architecture from the folder: the first generation syncs the training
        weights into it. A LoRA policy saved by :meth:`save_pretrained` holds an adapter, which vLLM cannot
        load as a model, so the engine starts from the adapter's base model. The engine computes in the
        training model's dtype (log-prob parity with the trainer), and its context defaults to what this
        policy can ask for (prompt limit + new tokens) within the model's own.
        """
        opts = dict(self.config.vllm)
        path = str(self.config.model)
        adapter = Path(path) / "adapter_config.json"
        if adapter.exists():
            path = str(json.loads(adapter.read_text()).get("base_model_name_or_path") or path)
        base = unwrap_model(self.model) if self.model is not None else None
        if base is not None:
            opts.setdefault("dtype", vllm_dtype_name(self.compute_dtype))
            limit = getattr(getattr(base, "config", None), "max_position_embeddings", None)
            want = self.config.max_prompt_tokens + self.config.max_new_tokens
            opts.setdefault("max_model_len", min(want, int(limit)) if limit else want)
        return path, opts

    @property
    def weight_sync_seconds(self) -> Optional[float]:
        """Seconds this policy's vLLM engine spent loading new weights; None for backends that sample from
        the training model itself (nothing to sync)."""
        if self.config.backend != "vllm":
            return None
        return float(getattr(self._backend, "sync_seconds", 0.0))

    def prompt_reuse_stats(self) -> Optional[tuple[int, int]]:
        """(prompt tokens reused from the previous call, prompt tokens asked for) since this policy's
        backend was built, or None without a prefix cache (another backend, or ``prefix_cache: false``)."""
        cache = getattr(self._backend, "prefix_cache", None) if self.config.backend == "hf" else None
        if cache is None and self.config.backend == "hf" and self.config.prefix_cache:
            cache = self.backend.prefix_cache  # built lazily: build it now
        return None if cache is None else (cache.reused_tokens, cache.prompt_tokens)

    def close(self) -> None:
        """Shut down the backend (a vLLM engine's memory and process-wide state, an HTTP client); the
        next generation builds it again. vLLM keeps one engine per process at a time: close a vLLM policy
        before another one's engine starts."""
        backend, self._backend = self._backend, None
        if backend is not None and hasattr(backend, "close"):
            backend.close()
        self._dirty = True

    def release_generation_cache(self) -> None:
        """Drop the keys/values the ``hf`` backend keeps for prefix reuse (the trainer calls this when a
        rollout ends: the next generation runs on new weights)."""
        cache = getattr(self._backend, "prefix_cache", None)
        if cache is not None:
            cache.clear()

    def after_optimizer_step(self) -> None:
        """Called by the trainer after each optimizer step: the vLLM engine needs the new weights, and
        keys/values kept for prefix reuse are stale."""
        self._dirty = True
        self.release_generation_cache()

    # ---- prompting ------------------------------------------------------------------------------------
    def template_for(self, request: GenerationRequest) -> PromptTemplate:
        return template_for_env(request.env_id, request.info, self.config.template)

    def messages(self, request: GenerationRequest) -> list[dict[str, str]]:
        tmpl = self.template_for(request)
        return tmpl.build(request.observation, request.info, request.history, self.config.memory_k)

    def render(self, messages: list[dict[str, str]], tools: Optional[Sequence[Any]] = None) -> str:
        """Prompt text with the tokenizer's chat template (continuing a final assistant message).

        ``tools`` (the tools protocol's schemas) go to the chat template when it has a tool section;
        otherwise, and without a chat template, the documented fallback
        (:func:`stratagym.agents.tool_messages.fallback_messages`: the schemas in a system message)."""
        tok = self.tokenizer
        kwargs: dict[str, Any] = {}
        if tools:
            if tok is not None and chat_template_has_tools(tok):
                kwargs["tools"] = list(tools)
            else:
                messages = fallback_messages(messages, tools)
        if tok is not None and getattr(tok, "chat_template", None):
            if messages and messages[-1]["role"] == "assistant":
                return tok.apply_chat_template(messages, tokenize=False, continue_final_message=True, **kwargs)
            return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs)
        return "\n\n".join(m["content"] for m in messages) + "\n"

    def prompt_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of rendered prompts, each keeping its last :attr:`prompt_limit` tokens."""
        limit = self.prompt_limit
        return [ids[-limit:] if len(ids) > limit else ids for ids in self._encode(texts)]

    def _encode(self, texts: Sequence[str]) -> list[list[int]]:
        return self.tokenizer(list(texts), add_special_tokens=False)["input_ids"]

    @property
    def prompt_limit(self) -> int:
        """The most tokens a prompt may have: ``max_prompt_tokens``, and no more than the model's context
        (``max_position_embeddings``) leaves beside ``max_new_tokens`` (at least 8)."""
        limit = self.config.max_prompt_tokens
        context = getattr(getattr(unwrap_model(self.model), "config", None), "max_position_embeddings", None) \
            if self.model is not None else None
        if isinstance(context, int) and context > 0:
            limit = min(limit, max(context - self.config.max_new_tokens, 8))
        return limit

    def fit_prompt(self, request: GenerationRequest, tools: Optional[Sequence[Any]] = None) -> tuple[list[int], dict[str, int]]:
        """The prompt of ``request`` within :attr:`prompt_limit` tokens, and what was cut to fit.

        The rule, in order: the prompt with ``memory_k`` remembered turns; while it is too long, the
        oldest remembered turn is dropped (the task, the current observation and the admissible actions
        stay); if even the prompt with no remembered turn is too long, its last tokens are kept (the
        current observation, the actions and the instructions that close the prompt survive; the task's
        opening goes first). Returns the ids and ``{"turns": remembered turns dropped, "tokens": tokens
        cut after that}`` (both 0 when the prompt fits as built)."""
        template = self.template_for(request)
        limit = self.prompt_limit
        remembered = min(self.config.memory_k, len(request.history))
        for keep in range(remembered, -1, -1):
            messages = template.build(request.observation, request.info, request.history, keep)
            ids = self._encode([self.render(messages, tools)])[0]
            if len(ids) <= limit:
                return ids, {"turns": remembered - keep, "tokens": 0}
        return ids[-limit:], {"turns": remembered, "tokens": len(ids) - limit}

    # ---- protocol: acting -------------------------------------------------------------------------------
    def generate(self, requests: Sequence[GenerationRequest], *, greedy: bool = False) -> list[Generation]:
        if not requests:
            return []
        templates = [self.template_for(r) for r in requests]
        messages = [t.build(r.observation, r.info, r.history, self.config.memory_k) for t, r in zip(templates, requests)]
        # one backend call per distinct stop set (normally one per batch: all envs share a family)
        out: list[Optional[Generation]] = [None] * len(requests)
        by_stop: dict[tuple[str, ...], list[int]] = {}
        for i, t in enumerate(templates):
            by_stop.setdefault(t.stop, []).append(i)
        tools = [r.info.get("tool_schemas") if r.info.get("protocol") == "tools" else None for r in requests]
        for stop, idx in by_stop.items():
            if self.config.backend == "openai":
                gen = self.backend
                if gen.endpoint == "chat":
                    # the tools protocol: the server gets the schemas and a structured conversation, and
                    # answers with tool_calls (no stop string: its tool parser needs the closing tag)
                    prompts: list[Any] = [openai_messages(messages[i]) if tools[i] else messages[i] for i in idx]
                    if any(tools[i] for i in idx):
                        stop = ()
                else:
                    prompts = [self.render(messages[i], tools[i]) for i in idx]
                raws = gen.generate_prompts(prompts, stop, self.sampling, greedy=greedy,
                                            tools=[tools[i] for i in idx] if gen.endpoint == "chat" else None)
                for i, raw in zip(idx, raws):
                    parsed = templates[i].parse(raw.text)
                    extra: dict[str, Any] = {"finish_reason": raw.finish_reason}
                    if raw.tool_calls_error:
                        extra["tool_calls_error"] = raw.tool_calls_error
                    out[i] = Generation(parsed.action, {"text": raw.text}, raw.text,
                                        parsed.format_ok and not raw.tool_calls_error, 0, extra)
                continue
            # the G episodes of a group usually share their prompt: render and tokenise each distinct one once
            keys = [(tuple(tuple(sorted(m.items())) for m in messages[i]), bool(tools[i])) for i in idx]
            first: dict[Any, int] = {}
            for k, i in zip(keys, idx):
                first.setdefault(k, i)
            uniq = list(first)
            upids = self._encode([self.render(messages[first[k]], tools[first[k]]) for k in uniq])
            limit = self.prompt_limit
            cuts: dict[Any, dict[str, int]] = {}
            for j, k in enumerate(uniq):
                if len(upids[j]) > limit:  # too long: cut by the documented rule, and say so in the record
                    upids[j], cuts[k] = self.fit_prompt(requests[first[k]], tools[first[k]])
            slot = {k: j for j, k in enumerate(uniq)}
            pids = [upids[slot[k]] for k in keys]
            if self.config.backend == "vllm" and self._dirty:
                self.backend.sync_weights(self.model)
                self._dirty = False
            with self.compute_context():
                raws = self.backend.generate(pids, stop, self.sampling, greedy=greedy)
            for i, key, p, raw in zip(idx, keys, pids, raws):
                parsed = templates[i].parse(raw.text)
                payload = {
                    "prompt_ids": torch.tensor(p, dtype=torch.long),
                    "response_ids": torch.tensor(raw.response_ids or [], dtype=torch.long),
                    "sampling_logprobs": torch.tensor(raw.logprobs or [0.0] * len(raw.response_ids or []), dtype=torch.float32),
                }
                extra = {"finish_reason": raw.finish_reason}
                if key in cuts:
                    extra["prompt_cut"] = dict(cuts[key])
                out[i] = Generation(parsed.action, payload, raw.text, parsed.format_ok, len(raw.response_ids or []), extra)
        return [g for g in out if g is not None]

    # ---- protocol: scoring ---------------------------------------------------------------------------------
    def sequence_log_probs(self, payloads: Sequence[Any], *, with_entropy: bool = False) -> SequenceLogProbs:
        if self.model is None:
            raise ConfigError("this policy has no local model (backend 'openai' is for evaluation only); it cannot be trained")
        with self.compute_context():
            if self._reference_of is not None:
                with self._reference_weights():
                    return self.scoring.score(payloads, with_entropy)
            return self.scoring.score(payloads, with_entropy)

    @contextlib.contextmanager
    def _reference_weights(self) -> Iterator[None]:
        """Run the shared LoRA model as the reference: adapters off, or the frozen reference adapter active.

        peft's ``set_adapter`` changes which parameters require gradients; the flags are restored exactly,
        so the trainable adapter stays trainable and the reference stays frozen."""
        module = unwrap_model(self.model)
        if self._reference_adapter is None:
            with module.disable_adapter():
                yield
            return
        trained = module.active_adapter
        flags = [(p, p.requires_grad) for p in module.parameters()]
        module.set_adapter(self._reference_adapter, inference_mode=True)
        try:
            yield
        finally:
            module.set_adapter(trained)
            for param, flag in flags:
                param.requires_grad_(flag)

    @property
    def scoring(self) -> Any:
        """The scoring layouts over this policy's model (:class:`stratagym.agents.inference.scoring.LayoutScorer`:
        whole rows, shared prompts, history hosts, the fused forward); a light view, made per call, that
        reads the policy's model, tokenizer and config as they are now."""
        # lazy: the scoring layouts and their fused forward load only when a policy scores (a policy that
        # only samples, e.g. in eval, never does; tests/agents/test_inference_package.py)
        from stratagym.agents.inference.scoring import LayoutScorer

        return LayoutScorer(self)


#: Name of the frozen copy of a loaded adapter that serves as the KL reference (see :meth:`LLMPolicy.frozen_copy`).
_REFERENCE_ADAPTER = "reference"


def _apply_lora(model: torch.nn.Module, lora: dict[str, Any]) -> torch.nn.Module:
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as exc:
        raise ConfigError("policy.lora needs peft: pip install 'stratagym[train]'") from exc
    opts = dict(lora)
    cfg = LoraConfig(
        r=int(opts.pop("r", 16)),
        lora_alpha=int(opts.pop("alpha", opts.pop("lora_alpha", 32))),
        lora_dropout=float(opts.pop("dropout", opts.pop("lora_dropout", 0.0))),
        target_modules=opts.pop("target_modules", "all-linear"),
        task_type="CAUSAL_LM",
        **opts,
    )
    return get_peft_model(model, cfg)


def _maybe_tokenizer(name: str) -> Any:
    if not name:
        return None
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(name)
    except Exception:
        return None
