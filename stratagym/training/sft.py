"""Supervised fine-tuning on expert demonstrations with TRL's ``SFTTrainer``: the warm start for RL.

``stratagym sft --config recipes/cpu/sft-searchqa.yaml [--resume]`` runs four stages, each reusing its
output when resuming:

1. **demos** -- :func:`stratagym.training.demos.collect_demos` plays the scripted expert on the train
   split (``<output_dir>/demos.jsonl``; or ``demos.path`` names an existing file, checked line by line);
2. **base** -- a byte-level BPE tokenizer trained on the env's text (the demonstrations and
   ``tokenizer.extra_text`` files, e.g. the retrieval corpus) with the template's tags as single tokens,
   and a randomly initialised small Llama/Qwen2 (:mod:`stratagym.agents.small_lm`); or ``model.path``,
   an existing HF model folder (the GPU path: a real model from disk), whose tokenizer must hold the
   template's tags (refused with the fix otherwise);
3. **train** -- TRL's ``SFTTrainer`` on pre-tokenised examples with the loss on the expert's turns
   only (``completion_mask`` + ``completion_only_loss``), progress bars from the HF trainer, checkpoints
   every ``sft.save_steps`` that ``--resume`` continues from. A checkpoint counts only once the trainer
   finished writing it (a ``COMPLETE`` marker written after the save), so a checkpoint cut short by a
   full disk or a kill is never resumed from: the previous one is;
4. **export** -- the policy folder (``export`` or ``<output_dir>/final``) written by
   :meth:`LLMPolicy.save_pretrained` into a temporary folder and moved into place only when complete.
   ``stratagym train`` (``policy.model: <folder>``) and ``stratagym eval <folder>`` load it unchanged;
   ``sft_meta.json`` in it records the recipe, the demonstrations' sha256, steps, loss and wall times;
   ``training_data.json`` names the tasks the demonstrations played (:mod:`stratagym.provenance`), after the
   stages of the checkpoint it started from, so evals measure train/test overlap against them;
5. **eval** -- greedy primary metric on ``eval.n`` tasks of the eval split (``env.eval_kwargs``), played
   through the rollout loop the trainer uses.

Examples are built with the policy's own rendering (:meth:`LLMPolicy.render` of each turn's prompt, as
recorded by the demos), so training text equals RL text. Consecutive turns of an episode whose
prompts extend each other token for token (Search-R1's growing turn, ``memory_k`` >= episode length)
are merged into one sequence with several loss spans; the check is on token ids, so a merge never
changes what a turn's prompt tokenises to.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence


from stratagym.agents.env_fit import META_FILE, check_policy_for_env  # re-exported (their home is agents)
from stratagym.agents.llm import LLMConfig, LLMPolicy, _apply_lora
from stratagym.agents.prompts import template_for_env
from stratagym.agents.small_lm import (SmallLMConfig, build_model, check_tokenizer_for_template, save_model_atomic,
                                       template_tags, train_tokenizer)
from stratagym.atomic import atomic_write
from stratagym.errors import ConfigError
from stratagym.hub_kernels import load_kwargs
from stratagym.jsonl import read_jsonl
from stratagym.precision import resolve_dtype
from stratagym.provenance import inherited_stages, write_provenance
from stratagym.training.config import build_dataclass, read_yaml_mapping
from stratagym.training.demos import collect_demos, demos_digest, read_demos, write_demos
from stratagym.training.recipe import seed_everything, training_set_of
from stratagym.training.rollout import play

__all__ = [
    "SFTRecipe",
    "load_sft_recipe",
    "build_examples",
    "run_sft",
    "export_trainer_checkpoint",
    "collect_recipe_demos",
    "sft_provenance",
    "evaluate_checkpoint",
    "complete_checkpoints",
    "check_policy_for_env",
    "META_FILE",
]

_MARKER = "COMPLETE"


# ---- recipe -----------------------------------------------------------------------------------------


@dataclass
class SFTEnv:
    """``id`` and ``kwargs`` of the env the demonstrations come from (train split); ``eval_kwargs`` for
    the evaluation after training (e.g. ``split: test``)."""

    id: str = ""
    kwargs: dict[str, Any] = field(default_factory=dict)
    eval_kwargs: Optional[dict[str, Any]] = None


@dataclass
class SFTDemos:
    """Where the demonstrations come from: an existing ``path``, or collected with ``agent`` from the
    first ``n`` tasks of ``split`` (all when null), each played ``episodes_per_task`` times (reset seeds
    ``seed, seed + 1, ...``). ``keep_lost`` keeps the episodes the agent lost (off: cloning a failure
    teaches it; on for a demonstrator meant to lose, such as ValueCorridor's ``blind_doors``). ``reasons``:
    the think text of each turn is the expert's stated reason (``collect_demos(reasons=True)``), not a
    restatement of its action."""

    path: Optional[str] = None
    agent: str = "scripted:oracle"
    split: str = "train"
    n: Optional[int] = None
    seed: int = 0
    episodes_per_task: int = 1
    keep_lost: bool = False
    reasons: bool = False


@dataclass
class SFTTokenizer:
    """``vocab_size`` of the BPE; ``extra_text``: files whose text the BPE also learns (a ``.jsonl``
    contributes every string value of each record, other files their lines)."""

    vocab_size: int = 2048
    extra_text: list[str] = field(default_factory=list)


@dataclass
class SFTTrain:
    """Optimisation (HF ``TrainingArguments`` names where they exist). ``threads``: torch CPU threads.
    ``epochs`` or ``max_steps`` (> 0 wins) sets the budget. ``fused_lm_head``: TRL's chunked LM-head
    loss kernel (it also logs entropy and token accuracy); off by default: logits only at the labelled
    positions give the same loss for a fraction of the LM-head cost (see ``CompletionLogitsSFTTrainer``).
    ``gradient_checkpointing``: recompute each layer's activations in the backward pass instead of keeping
    them (TRL's ``SFTConfig`` default, kept here); off trades memory for a shorter step, with the same
    losses (the recomputation is the same arithmetic)."""

    lr: float = 2e-3
    batch_size: int = 16
    epochs: float = 6.0
    max_steps: int = -1
    warmup_steps: int = 30
    scheduler: str = "linear"
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    seed: int = 0
    threads: int = 1
    save_steps: int = 200
    keep_last: int = 2
    logging_steps: int = 20
    group_by_length: bool = True
    max_length: int = 2048
    fused_lm_head: bool = False
    gradient_checkpointing: bool = True


@dataclass
class SFTEval:
    """Greedy evaluation after training: the first ``n`` tasks of the eval split (0 = skip)."""

    n: int = 200
    batch_size: int = 64
    seed: int = 0


@dataclass
class SFTRecipe:
    """A whole SFT run (see the module docstring). ``policy``: :class:`~stratagym.agents.llm.LLMConfig`
    options saved with the checkpoint (``memory_k`` and ``template`` must match the demonstrations);
    ``model``: :class:`~stratagym.agents.small_lm.SmallLMConfig` options, or ``{path: <HF folder>}``."""

    name: str = "sft"
    env: SFTEnv = field(default_factory=SFTEnv)
    demos: SFTDemos = field(default_factory=SFTDemos)
    policy: dict[str, Any] = field(default_factory=dict)
    tokenizer: SFTTokenizer = field(default_factory=SFTTokenizer)
    model: dict[str, Any] = field(default_factory=dict)
    sft: SFTTrain = field(default_factory=SFTTrain)
    eval: SFTEval = field(default_factory=SFTEval)
    output_dir: str = "runs/sft"
    export: Optional[str] = None

    @property
    def export_dir(self) -> Path:
        return Path(self.export) if self.export else Path(self.output_dir) / "final"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def load_sft_recipe(path: str | Path, overrides: Optional[dict[str, Any]] = None) -> SFTRecipe:
    """Read an SFT recipe (``yaml.safe_load``), apply dotted ``overrides`` and validate it."""
    data = read_yaml_mapping(path, overrides, examples="recipes/cpu/sft-*.yaml")
    recipe = build_dataclass(SFTRecipe, data, root="the SFT recipe")
    return validate_recipe(recipe)


def validate_recipe(recipe: SFTRecipe) -> SFTRecipe:
    if not recipe.env.id:
        raise ConfigError("env.id is missing: e.g. env: {id: stratagym/SearchQA-v0, kwargs: {split: train}}")
    s = recipe.sft
    if s.lr <= 0:
        raise ConfigError(f"sft.lr must be > 0, got {s.lr}")
    for name in ("batch_size", "threads", "save_steps", "keep_last", "logging_steps", "max_length"):
        if getattr(s, name) < 1:
            raise ConfigError(f"sft.{name} must be >= 1, got {getattr(s, name)}")
    if s.max_steps <= 0 and s.epochs <= 0:
        raise ConfigError("set sft.epochs > 0 or sft.max_steps > 0")
    if s.scheduler not in ("linear", "cosine", "constant", "constant_with_warmup"):
        raise ConfigError(f"sft.scheduler must be linear, cosine, constant or constant_with_warmup, got {s.scheduler!r}")
    if recipe.demos.n is not None and recipe.demos.n < 1:
        raise ConfigError(f"demos.n must be >= 1 or null, got {recipe.demos.n}")
    if recipe.demos.episodes_per_task < 1:
        raise ConfigError(f"demos.episodes_per_task must be >= 1, got {recipe.demos.episodes_per_task}")
    if recipe.eval.n < 0:
        raise ConfigError(f"eval.n must be >= 0, got {recipe.eval.n}")
    if "model" in recipe.policy:
        raise ConfigError("policy.model is set by the SFT run (the export folder); remove it from the policy section")
    LLMConfig.from_dict({**recipe.policy, "model": "x"}).validate()
    if "path" not in recipe.model:
        SmallLMConfig.from_dict(recipe.model)
    else:
        extra = sorted(set(recipe.model) - {"path", "require_tag_tokens"})
        if extra:
            raise ConfigError(f"model.path loads an existing model; drop the size options {extra}")
    return recipe


# ---- examples -------------------------------------------------------------------------------------------


def build_examples(records: Sequence[dict[str, Any]], policy: Any) -> list[dict[str, list[int]]]:
    """Pre-tokenised SFT examples ``{"input_ids", "completion_mask"}`` from demonstration records.

    Each turn's prompt is rendered with ``policy.render`` (the chat template and the final-assistant
    continuation the policy uses in RL) and tokenised like the policy's prompts; the completion's
    tokens carry mask 1. A turn continues the previous turn's sequence when its prompt tokenises to
    exactly that sequence's ids followed by more; otherwise it starts a new example.
    """
    tok = policy.tokenizer

    def ids_of(text: str) -> list[int]:
        return list(tok(text, add_special_tokens=False)["input_ids"])

    examples: list[dict[str, list[int]]] = []
    for rec in records:
        cur_ids: list[int] = []
        cur_mask: list[int] = []
        cur_text: Optional[str] = None
        for turn in rec["turns"]:
            prompt_text = policy.render(turn["prompt"], rec.get("tools"))
            prompt_ids = ids_of(prompt_text)
            merged = False
            if cur_text is not None and prompt_text.startswith(cur_text) and prompt_ids[: len(cur_ids)] == cur_ids:
                rest = prompt_ids[len(cur_ids):]
                cur_ids = cur_ids + rest
                cur_mask = cur_mask + [0] * len(rest)
                merged = True
            if not merged:
                if cur_ids:
                    examples.append({"input_ids": cur_ids, "completion_mask": cur_mask})
                cur_ids, cur_mask = list(prompt_ids), [0] * len(prompt_ids)
            comp = ids_of(turn["completion"])
            cur_ids = cur_ids + comp
            cur_mask = cur_mask + [1] * len(comp)
            cur_text = prompt_text + turn["completion"]
        if cur_ids:
            examples.append({"input_ids": cur_ids, "completion_mask": cur_mask})
    return examples


def _tokenizer_texts(records: Sequence[dict[str, Any]], extra_files: Sequence[str]) -> list[str]:
    texts: list[str] = []
    for rec in records:
        if rec.get("tools"):  # the tools protocol's schemas are in every prompt
            texts.append(json.dumps(rec["tools"], ensure_ascii=False))
        for turn in rec["turns"]:
            texts.extend(m["content"] for m in turn["prompt"])
            texts.append(turn["completion"])
    for name in extra_files:
        path = Path(name)
        if not path.exists():
            raise ConfigError(f"tokenizer.extra_text file {name!r} does not exist")
        if path.suffix == ".jsonl":  # the string values of every object; other lines are not text to learn
            for line in read_jsonl(path, skip_bad=True):
                texts.extend(v for v in line.value.values() if isinstance(v, str))
            continue
        with open(path, encoding="utf-8") as fh:
            for text in fh:
                if text.strip():
                    texts.append(text.rstrip("\n"))
    return texts


# ---- checkpoints --------------------------------------------------------------------------------------


def complete_checkpoints(trainer_dir: str | Path) -> list[Path]:
    """HF trainer checkpoints (``checkpoint-N``) that were written completely, oldest first."""
    root = Path(trainer_dir)
    if not root.exists():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and p.name.startswith("checkpoint-") and (p / _MARKER).exists()]
    return sorted(found, key=lambda p: int(p.name.split("-")[-1]))


def _marker_callback() -> Any:
    from transformers import TrainerCallback

    class CompleteMarker(TrainerCallback):
        """Writes ``COMPLETE`` into a checkpoint once the trainer has saved all of it (``on_save`` runs
        after the save), flushing its files first; resumes only use marked checkpoints."""

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            ckpt = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if ckpt.exists():
                for p in ckpt.rglob("*"):
                    if p.is_file():
                        with open(p, "rb") as fh:
                            os.fsync(fh.fileno())
                atomic_write(ckpt / _MARKER, "ok\n")
            return control

    return CompleteMarker()


def _completion_logits_trainer() -> type:
    import torch
    from trl import SFTTrainer

    class CompletionLogitsSFTTrainer(SFTTrainer):
        """SFTTrainer (data preparation, completion-only labels, collator, checkpoints, resume) whose loss
        asks the model for logits only at the positions that predict a labelled token.

        Only the expert's turns carry labels (15% of the tokens on SearchQA, the rest is retrieved text),
        and for a small model the LM head is most of the cost, so this halves a training step on CPU.
        The loss is the usual token-mean cross-entropy over labelled tokens. The forward runs through
        ``model(...)`` (``logits_to_keep`` as a boolean mask), so DDP/accelerate wrappers still see it.
        """

        def compute_loss(self, model: Any, inputs: Any, return_outputs: bool = False, num_items_in_batch: Any = None) -> Any:
            labels = inputs["labels"]
            keep = torch.zeros_like(labels, dtype=torch.bool)
            keep[:, :-1] = labels[:, 1:] != -100
            out = model(input_ids=inputs["input_ids"], attention_mask=inputs.get("attention_mask"),
                        logits_to_keep=keep, use_cache=False)
            targets = labels[:, 1:][keep[:, :-1]]
            logits = out.logits.reshape(-1, out.logits.shape[-1]).float()
            denom = num_items_in_batch if num_items_in_batch is not None else targets.numel()
            loss = torch.nn.functional.cross_entropy(logits, targets, reduction="sum") / torch.as_tensor(denom).clamp(min=1).to(logits.device)
            if self.args.average_tokens_across_devices and num_items_in_batch is not None:
                loss = loss * self.accelerator.num_processes
            return (loss, out) if return_outputs else loss

    return CompletionLogitsSFTTrainer


# ---- the run -----------------------------------------------------------------------------------------------


def _policy_config(recipe: SFTRecipe, model_path: str, records: Sequence[dict[str, Any]]) -> Any:
    data = dict(recipe.policy)
    rec0 = records[0]
    demo_k = int(rec0.get("memory_k", data.get("memory_k", 2)))
    if "memory_k" in data and int(data["memory_k"]) != demo_k:
        raise ConfigError(
            f"policy.memory_k is {data['memory_k']} but the demonstrations were rendered with memory_k {demo_k}; "
            "collect them again with the policy's memory_k (the prompts must match what RL shows the model)"
        )
    data["memory_k"] = demo_k
    if data.get("template") and rec0.get("template") and data["template"] != rec0["template"]:
        raise ConfigError(f"policy.template is {data['template']!r} but the demonstrations use {rec0['template']!r}")
    return LLMConfig.from_dict({**data, "model": model_path})


def _stage(log: dict[str, float], name: str, t0: float) -> float:
    now = time.perf_counter()
    log[name] = round(now - t0, 2)
    return now


def collect_recipe_demos(recipe: SFTRecipe, *, progress: bool = False) -> list[dict[str, Any]]:
    """The demonstrations a recipe without ``demos.path`` collects (deterministic: the same recipe gives
    the same file, which is how provenance is back-filled for checkpoints that predate it)."""
    return collect_demos(recipe.env.id, recipe.demos.agent, split=recipe.demos.split, n=recipe.demos.n,
                         env_kwargs={k: v for k, v in recipe.env.kwargs.items() if k != "split"},
                         template=recipe.policy.get("template"), memory_k=int(recipe.policy.get("memory_k", 2)),
                         seed=recipe.demos.seed, episodes_per_task=recipe.demos.episodes_per_task,
                         only_won=not recipe.demos.keep_lost, progress=progress, reasons=recipe.demos.reasons)


def sft_provenance(recipe: SFTRecipe, records: Sequence[dict[str, Any]], demos_sha256: str) -> list[dict[str, Any]]:
    """The provenance of an SFT export: its start's stages, then the tasks the kept demonstrations played
    (one training set per split they came from)."""
    def split_of(r: dict[str, Any]) -> str:
        return str(r.get("split") or recipe.demos.split)

    return inherited_stages(recipe.model.get("path")) + [
        training_set_of("sft", recipe.env.id, recipe.env.kwargs, sp, [r["task_id"] for r in records if split_of(r) == sp],
                        demos_sha256=demos_sha256, recipe=recipe.name) for sp in sorted({split_of(r) for r in records})]


def run_sft(recipe: SFTRecipe, *, resume: bool = False, progress: bool = True, echo: Any = print) -> dict[str, Any]:
    """Run the stages of the module docstring; returns the summary also written to ``sft_meta.json``."""
    import torch

    from stratagym.training.allocator import return_freed_memory

    torch.set_num_threads(recipe.sft.threads)
    return_freed_memory()  # as the Trainer does: freed activations go back to the OS (allocator.py)
    out = Path(recipe.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    times: dict[str, float] = {}
    t = time.perf_counter()

    # 1. demonstrations
    demos_path = _demos_path(recipe)
    if not recipe.demos.path and not (resume and demos_path.exists()):
        echo(f"collecting demonstrations: {recipe.demos.agent} on {recipe.env.id} split {recipe.demos.split}")
        write_demos(collect_recipe_demos(recipe, progress=progress), demos_path)
    records = read_demos(demos_path)
    bad = [r["env_id"] for r in records if r["env_id"] != recipe.env.id]
    if bad:
        raise ConfigError(f"{demos_path} holds demonstrations of {bad[0]!r}, but the recipe trains for {recipe.env.id!r}")
    t = _stage(times, "demos_s", t)

    # 2. tokenizer + base model
    # Seeded here, not only by TRL's Trainer (which seeds when it is built, after the model): a from-scratch
    # model's initial weights and a LoRA adapter's A matrices are drawn from the global RNG, so without this
    # they depended on whatever ran earlier in the process (the first loss matched, since LoRA's B starts at
    # zero, and the second did not).
    seed_everything(recipe.sft.seed)
    compute, template = _compute_and_template(recipe)
    base = out / "base"
    if "path" in recipe.model:
        src = str(recipe.model["path"])
        tokenizer, model = _pretrained_base(recipe, compute)
        if recipe.model.get("require_tag_tokens", True):
            try:
                check_tokenizer_for_template(tokenizer, template, where=f"the tokenizer of {src}")
            except ConfigError as exc:
                raise ConfigError(f"{exc} For a pretrained model (it spells the tags in several tokens, which is "
                                  "fine for it), set model.require_tag_tokens: false in the recipe.") from None
    else:
        size = SmallLMConfig.from_dict(recipe.model)
        if not (resume and (base / "config.json").exists()):
            echo(f"training a {recipe.tokenizer.vocab_size}-token BPE on the env's text and building a {size.arch} model")
            tokenizer = train_tokenizer(_tokenizer_texts(records, recipe.tokenizer.extra_text),
                                        vocab_size=recipe.tokenizer.vocab_size, tags=template_tags(template))
            model = build_model(tokenizer, size)
            save_model_atomic(base, lambda d: (tokenizer.save_pretrained(d), model.save_pretrained(d)))
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(base)
        model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32, **load_kwargs())
        check_tokenizer_for_template(tokenizer, template, where=f"the tokenizer in {base}")
    n_params = sum(p.numel() for p in model.parameters())
    export = recipe.export_dir
    policy = LLMPolicy(model, tokenizer, _policy_config(recipe, str(export), records))
    if policy.config.lora:  # LoRA SFT (policy.lora): only the adapter trains; the export is the adapter alone
        model = policy.model = _apply_lora(model, policy.config.lora)
        n_trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        echo(f"LoRA {dict(policy.config.lora)}: {n_trainable / 1e6:.2f}M trainable parameters")
    examples = build_examples(records, policy)
    n_tokens = sum(len(e["input_ids"]) for e in examples)
    n_loss = sum(sum(e["completion_mask"]) for e in examples)
    echo(f"{len(records)} demonstrations -> {len(examples)} sequences, {n_tokens} tokens ({n_loss} with loss); model {n_params / 1e6:.2f}M parameters")
    t = _stage(times, "base_s", t)

    # 3. SFT with TRL
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    trainer_dir = out / "trainer"
    resume_from = None
    if resume:
        done = complete_checkpoints(trainer_dir)
        if done:
            resume_from = str(done[-1])
            echo(f"resuming from {resume_from}")
    elif trainer_dir.exists():
        shutil.rmtree(trainer_dir)
    if trainer_dir.exists():  # checkpoints cut short (no marker) are never resumed from, nor kept
        for p in trainer_dir.iterdir():
            if p.is_dir() and p.name.startswith("checkpoint-") and not (p / _MARKER).exists():
                shutil.rmtree(p, ignore_errors=True)
    s = recipe.sft
    args = SFTConfig(
        output_dir=str(trainer_dir),
        learning_rate=s.lr,
        per_device_train_batch_size=s.batch_size,
        num_train_epochs=s.epochs,
        max_steps=s.max_steps,
        warmup_steps=s.warmup_steps,
        lr_scheduler_type=s.scheduler,
        weight_decay=s.weight_decay,
        max_grad_norm=s.max_grad_norm,
        seed=s.seed,
        data_seed=s.seed,
        save_strategy="steps",
        save_steps=s.save_steps,
        save_total_limit=s.keep_last,
        logging_steps=s.logging_steps,
        report_to="none",
        use_cpu=not torch.cuda.is_available(),
        dataloader_pin_memory=False,
        disable_tqdm=not progress,
        train_sampling_strategy="group_by_length" if s.group_by_length else "random",
        max_length=s.max_length,
        completion_only_loss=True,
        gradient_checkpointing=s.gradient_checkpointing,
        dataset_num_proc=None,
        # SFTConfig defaults to bf16, which runs ~4x slower on CPUs without bf16 matmul units: the recipe's
        # policy.dtype decides. A fully trained model computes under autocast over its fp32 weights; a LoRA
        # base is already in the compute dtype (its fp32 adapters take their input upcast, as peft does)
        bf16=compute == torch.bfloat16 and not policy.config.lora,
        fp16=compute == torch.float16 and not policy.config.lora,
    )
    trainer_cls = SFTTrainer if s.fused_lm_head else _completion_logits_trainer()
    trainer = trainer_cls(model=model, args=args, train_dataset=Dataset.from_list(examples),
                         processing_class=tokenizer, callbacks=[_marker_callback()])
    result = trainer.train(resume_from_checkpoint=resume_from)
    t = _stage(times, "train_s", t)
    losses = [row["loss"] for row in trainer.state.log_history if "loss" in row]

    # 4. export
    model = trainer.model
    policy.model = model
    if compute != torch.float32 and not policy.config.lora:
        policy.autocast_dtype = compute  # trained under autocast: the export records its compute dtype
    meta = _export_meta(recipe, demos_path, records, template, examples=len(examples), tokens=n_tokens,
                        loss_tokens=n_loss, parameters=n_params, steps=trainer.state.global_step,
                        epochs=trainer.state.epoch, train_loss=float(result.training_loss), losses=losses)
    _write_export(recipe, policy, records, meta, times)
    t = _stage(times, "export_s", t)
    echo(f"SFT checkpoint: {export} ({meta['steps']} steps, {meta['epochs']:.2f} epochs, loss {meta['final_loss']})")

    # 5. evaluation
    if recipe.eval.n > 0:
        ev = evaluate_checkpoint(export, recipe.env.id, recipe.env.eval_kwargs or recipe.env.kwargs,
                                 n=recipe.eval.n, batch_size=recipe.eval.batch_size, seed=recipe.eval.seed)
        meta["eval"] = ev
        t = _stage(times, "eval_s", t)
        echo(f"greedy eval on {ev['n']} tasks of split {ev.get('split')}: score {ev['score']:.3f}, success {ev['success']:.3f}, well-formed turns {ev['format_ok']:.3f}")
    meta["times"] = times
    atomic_write(export / META_FILE, json.dumps(meta, indent=1, sort_keys=True))
    atomic_write(out / "sft_summary.json", json.dumps({k: v for k, v in meta.items() if k != "loss_curve"}, indent=1, sort_keys=True))
    return meta


def _demos_path(recipe: SFTRecipe) -> Path:
    """Where a recipe's demonstrations are: ``demos.path``, else the run's own ``<output_dir>/demos.jsonl``."""
    return Path(recipe.demos.path) if recipe.demos.path else Path(recipe.output_dir) / "demos.jsonl"


def _compute_and_template(recipe: SFTRecipe) -> tuple[Any, Any]:
    """The compute dtype on this machine (``policy.dtype``) and the prompt template the recipe trains with."""
    import torch

    compute = resolve_dtype(str(recipe.policy.get("dtype", "float32")), "cuda" if torch.cuda.is_available() else "cpu")
    template = template_for_env(recipe.env.id, {"protocol": recipe.env.kwargs.get("protocol", "tags")},
                                recipe.policy.get("template"))
    return compute, template


def _pretrained_base(recipe: SFTRecipe, compute: Any) -> tuple[Any, Any]:
    """Tokenizer and model of ``model.path``; a path that does not load is a :class:`ConfigError`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = str(recipe.model["path"])
    try:
        tokenizer = AutoTokenizer.from_pretrained(src)
        # a LoRA base is frozen: held in the compute dtype; a fully trained model keeps fp32 weights
        model = AutoModelForCausalLM.from_pretrained(src, dtype=compute if recipe.policy.get("lora") else torch.float32,
                                                     **load_kwargs())
    except OSError as exc:
        raise ConfigError(f"model.path {src!r} could not be loaded: {exc}") from exc
    return tokenizer, model


def _export_meta(recipe: SFTRecipe, demos_path: Path, records: Sequence[dict[str, Any]], template: Any, *,
                 examples: int, tokens: int, loss_tokens: int, parameters: int, steps: int, epochs: Optional[float],
                 train_loss: Optional[float], losses: list[float], **extra: Any) -> dict[str, Any]:
    """``sft_meta.json`` of an export (one schema for :func:`run_sft` and :func:`export_trainer_checkpoint`):
    the recipe, the demonstrations by content, sizes, steps, the loss curve, the template; ``extra`` adds keys."""
    return {
        "recipe": recipe.to_dict(),
        "demos": {"path": str(demos_path), "sha256": demos_digest(demos_path), "episodes": len(records)},
        "examples": examples, "tokens": tokens, "loss_tokens": loss_tokens, "parameters": parameters,
        "steps": int(steps), "epochs": float(epochs or 0.0), "train_loss": train_loss,
        "final_loss": losses[-1] if losses else None, "loss_curve": losses,
        "template": template.name, "template_tags": list(template_tags(template)), **extra,
    }


def _write_export(recipe: SFTRecipe, policy: Any, records: Sequence[dict[str, Any]], meta: dict[str, Any],
                  times: dict[str, float]) -> None:
    """The export stage: the policy folder, its ``sft_meta.json`` and ``training_data.json``, moved into place whole."""
    provenance = sft_provenance(recipe, records, meta["demos"]["sha256"])  # what the model was shown, by content

    def write(d: Path) -> None:
        policy.save_pretrained(d)
        (d / META_FILE).write_text(json.dumps({**meta, "times": times}, indent=1, sort_keys=True))
        write_provenance(d, provenance)

    save_model_atomic(recipe.export_dir, write)


def export_trainer_checkpoint(recipe: SFTRecipe, checkpoint: str | Path, *, echo: Any = print) -> dict[str, Any]:
    """Export the policy folder of a LoRA recipe from one of its trainer checkpoints, without training.

    For a run cut short (a leased GPU's time limit, a kill) whose last complete checkpoint is the result to
    keep, and for a run whose export was lost while its checkpoints were kept: the folder holds what
    :func:`run_sft` exports (adapter, tokenizer, policy options, ``training_data.json``), with the
    checkpoint's adapter weights unchanged. ``sft_meta.json`` says where it came from: ``exported_from``
    (the checkpoint), ``steps`` and ``epochs`` reached, ``planned_steps`` (the run's schedule, so a
    checkpoint taken before the end is not mistaken for the finished recipe) and the loss curve up to
    that step. The demonstrations must be the run's own (``<output_dir>/demos.jsonl`` or ``demos.path``)."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    ckpt = Path(checkpoint)
    if not recipe.policy.get("lora") or "path" not in recipe.model:
        raise ConfigError("exporting from a trainer checkpoint needs a LoRA recipe on a model.path base "
                          "(a fully trained model's checkpoint folder already loads with from_pretrained)")
    state_file, weights = ckpt / "trainer_state.json", ckpt / "adapter_model.safetensors"
    if not (state_file.is_file() and weights.is_file()):
        raise ConfigError(f"{ckpt} is not a trainer checkpoint of a LoRA run: it needs trainer_state.json and "
                          "adapter_model.safetensors (the folders under <output_dir>/trainer/)")
    demos_path = _demos_path(recipe)
    if not demos_path.is_file():
        raise ConfigError(f"{demos_path} not found: the export records the demonstrations the run trained on; "
                          "put that run's demos.jsonl there (or set demos.path)")
    records = read_demos(demos_path)
    compute, template = _compute_and_template(recipe)
    tokenizer, model = _pretrained_base(recipe, compute)
    n_params = sum(p.numel() for p in model.parameters())
    policy = LLMPolicy(model, tokenizer, _policy_config(recipe, str(recipe.export_dir), records))
    model = policy.model = _apply_lora(model, policy.config.lora)
    try:
        loaded = set_peft_model_state_dict(model, load_file(str(weights)))
    except RuntimeError as exc:  # a tensor of another shape: another r or other target modules
        raise ConfigError(f"{weights} does not fit the recipe's LoRA ({str(exc).splitlines()[0]}): "
                          "was it trained with another policy.lora?") from exc
    if getattr(loaded, "unexpected_keys", None):
        raise ConfigError(f"{weights} does not fit the recipe's LoRA ({len(loaded.unexpected_keys)} unexpected "
                          f"tensors, e.g. {loaded.unexpected_keys[0]}): was it trained with another policy.lora?")
    examples = build_examples(records, policy)
    state = json.loads(state_file.read_text())
    meta = _export_meta(recipe, demos_path, records, template, examples=len(examples),
                        tokens=sum(len(e["input_ids"]) for e in examples),
                        loss_tokens=sum(sum(e["completion_mask"]) for e in examples), parameters=n_params,
                        steps=state["global_step"], epochs=state.get("epoch"), train_loss=None,
                        losses=[row["loss"] for row in state.get("log_history", []) if "loss" in row],
                        planned_steps=state.get("max_steps"), exported_from=str(ckpt))
    _write_export(recipe, policy, records, meta, {})
    echo(f"exported {recipe.export_dir} from {ckpt} (step {meta['steps']} of {meta['planned_steps']}, "
         f"{meta['epochs']:.2f} epochs, loss {meta['final_loss']})")
    return meta


def evaluate_checkpoint(path: str | Path, env_id: str, env_kwargs: dict[str, Any], *, n: int = 200,
                        batch_size: int = 64, seed: int = 0) -> dict[str, Any]:
    """Greedy play of the checkpoint on the first ``n`` tasks of ``env_kwargs``' split.

    Returns mean ``score`` (EM for SearchQA), ``success``, the fraction of well-formed turns and the
    per-task scores (in task order, so two checkpoints can be compared pair by pair).
    """
    import gymnasium as gym

    policy = LLMPolicy.from_pretrained(str(path))
    check_policy_for_env(policy, env_id, env_kwargs)
    policy.eval()
    env = gym.make(env_id, **env_kwargs)
    try:
        ids = [str(t) for t in env.unwrapped.task_ids()][:n]
    finally:
        env.close()
    trajs = play(policy, [(t, seed) for t in ids], env_id=env_id, env_kwargs=env_kwargs, batch_size=batch_size, greedy=True)
    scores = [float(tr.score) for tr in trajs]
    steps = [s for tr in trajs for s in tr.steps]
    return {
        "n": len(trajs), "split": env_kwargs.get("split"), "score": sum(scores) / max(1, len(scores)),
        "success": sum(tr.won for tr in trajs) / max(1, len(trajs)),
        "format_ok": sum(s.format_ok for s in steps) / max(1, len(steps)),
        "task_ids": [tr.task_id for tr in trajs], "scores": scores,
    }
