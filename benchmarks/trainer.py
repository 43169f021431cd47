"""stratagym's GRPO step vs TRL's GRPOTrainer on identical inputs (CPU, 1 thread).

Both train the same tiny local Qwen2 (``stratagym.agents.tiny_lm``) on the same 2 prompts x 8
generations (batch 16), at most 64 new tokens, temperature 1, beta (KL coef) 0.04 with a frozen
reference model, AdamW, one optimizer step per batch, the same reward function. A step = generation +
rewards + advantages + log-probs + loss + backward + optimizer step. Work is matched: neither computes
separate old log-probs (one update per batch: both use the detached current ones), both run a full
reference forward, both sample every token of every completion. TRL additionally computes token
entropies for its logs (inside its fused LM-head pass; no config turns it off); stratagym does not
unless ``entropy_coef > 0``. Completions that end with EOS before the others: transformers' ``generate``
keeps running their rows on pad tokens, stratagym drops them from decoding once a quarter of the rows
have ended (the same samples; most completions here run to the 64-token limit).

By default the two are INTERLEAVED: one stratagym step runs right after each TRL step (outside TRL's
timer), so both see the same machine load; per-step ratios are printed too. ``--sequential`` runs all
of one, then all of the other (sensitive to load drift on a shared machine). The first ``--warmup``
steps are dropped; medians of the rest are printed with the ratio, stratagym's rollout tokens/s and the
share of rollout time spent in envs.

Per-phase split (both sides, medians per step, with their ratio): generation, rewards/env, old
log-probs (zero on both sides here: one update per batch), the reference forward, the loss forward,
backward, clip + optimizer step, and ``other`` (the rest of the step). The phases are timed by wrapping
each trainer's own methods (:class:`PhaseClock`), so the split costs nothing when not benchmarking.

    OMP_NUM_THREADS=1 python benchmarks/trainer.py [--repeats 3] [--steps 8] [--hidden 64|256]
        [--model data/checkpoints/sft-searchqa] [--no-fused] [--no-shared-prompts] [--no-fused-scoring]
        [--no-retain-heap] [--cpu-time] [--dtype float32|bfloat16] [--lora]

``--dtype bfloat16`` runs both at bf16 the way each does it: stratagym with ``policy.dtype: bfloat16``
(fp32 master weights under autocast for a full model; a bf16 base under fp32 LoRA adapters), TRL with
``bf16=True`` (its autocast over fp32 weights) and, with ``--lora``, the base loaded in bf16. ``--lora``
trains a fresh LoRA (r 16, alpha 32, q/k/v/o, as the SmolLM2 recipes) on both sides (TRL through
``peft_config``); the reference is the base with the adapters off on both.

stratagym's Trainer keeps freed memory in the heap (``train.retain_heap``, glibc ``mallopt``): a
process-wide setting, so TRL, in the same process, runs with it too (``--no-retain-heap`` turns it off
for both).

Timings on a shared, loaded machine swing; compare the ratio, run it a few times. ``--cpu-time`` times
both trainers by this thread's CPU time instead of wall time (both run on it), which leaves out the
waits for a core when other jobs load the machine.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

PROMPTS = [
    "Write a short list of fruits and their colours.",
    "Describe the room: a cabinet, a fridge, a countertop and a microwave.",
]


def reward_text(text: str) -> float:
    """A deterministic reward both trainers share: fraction of letters among the characters."""
    return sum(c.isalpha() for c in text) / max(len(text), 1)


def _register_env() -> str:
    import gymnasium as gym

    from stratagym.envs.core import StepResult, TextEnv

    class PromptEnv(TextEnv):
        """One-turn env: the observation is a prompt, the reward scores the response."""

        def __init__(self, **kw):
            super().__init__(max_steps=1, **kw)

        def task_ids(self):
            return [f"p{i}" for i in range(len(PROMPTS))]

        def _reset_task(self, task_id):
            return PROMPTS[int(task_id[1:])], {}

        def _step(self, action):
            r = reward_text(action)
            return StepResult(observation="done", reward=r, terminated=True, score=r)

    env_id = "bench/Prompt-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=PromptEnv)
    return env_id


def make_stratagym(model_path: str, steps: int, warmup: int, max_new: int, fused: bool = True, shared: bool = True,
                   fused_scoring: bool = True, retain_heap: bool = True):
    from stratagym.training.config import RecipeConfig
    from stratagym.training.trainer import Trainer

    env_id = _register_env()
    cfg = RecipeConfig.from_dict({
        "name": "bench",
        "policy": {"model": model_path, "max_new_tokens": max_new, "memory_k": 0, "template": "plain", "temperature": 1.0,
                   "fused_decode": fused, "shared_prompt_scoring": shared, "fused_scoring": fused_scoring,
                   "dtype": _RUN["dtype"], "lora": _RUN["lora"]},
        "env": {"id": env_id},
        "rollout": {"group_size": 8, "tasks_per_step": 2},
        "algorithm": {"estimator": "grpo"},
        "loss": {"kl_coef": 0.04, "kl_type": "k3", "agg": "token-mean", "clip_low": 0.2},
        "optim": {"lr": 1.0e-5, "micro_batch_size": 16, "max_grad_norm": 1.0},
        "train": {"total_steps": steps + warmup, "seed": 0, "output_dir": tempfile.mkdtemp(prefix="bench-sg-"),
                  "save_every": 0, "progress": False, "tensorboard": False, "deterministic": False,
                  "retain_heap": retain_heap},
    })
    trainer = Trainer(cfg)
    # tasks_per_step=2 over 2 prompts: sample both prompts every step, like TRL's batch
    trainer._task_ids = list(trainer._task_ids)
    return trainer


#: the clock of every step and phase timing: wall time, or with ``--cpu-time`` this thread's CPU time
#: (both trainers run on this one thread; on a machine shared with other jobs, CPU time leaves out the
#: waits for a core, so the ratio swings less; cache and memory-bandwidth contention still count)
_CLOCK = {"now": time.perf_counter}
#: ``--dtype`` and ``--lora`` for both trainers
_RUN = {"dtype": "float32", "lora": None}
LORA = {"r": 16, "alpha": 32, "dropout": 0.0, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}


def clock_now() -> float:
    return _CLOCK["now"]()


PHASES = ("generation", "rewards/env", "old logprobs", "reference", "forward+loss", "backward", "optimizer", "other")


class PhaseClock:
    """Wall seconds per phase of one training step, for both trainers alike.

    :meth:`wrap` replaces a bound method by one that adds its duration to a phase (``phase`` may be a
    function of the call's arguments: TRL scores the reference and the old policy through one method).
    A wrapped call inside another wrapped call is not counted again (TRL's loss forward runs through
    the same scoring method as its reference forward). ``other`` is the step time the wrapped calls do
    not cover: advantages, padding, logging, data loading, callbacks. CPU only: on a GPU the timings
    would need a synchronisation per call.
    """

    def __init__(self) -> None:
        self.now: dict[str, float] = {}
        self.rows: list[dict[str, float]] = []
        self._depth = 0

    def wrap(self, obj: object, attr: str, phase) -> None:
        fn = getattr(obj, attr)

        @functools.wraps(fn)  # keeps markers such as the LR scheduler's on optimizer.step
        def timed(*args, **kwargs):
            if self._depth:
                return fn(*args, **kwargs)
            name = phase(*args, **kwargs) if callable(phase) else phase
            self._depth += 1
            t0 = clock_now()
            try:
                return fn(*args, **kwargs)
            finally:
                self._depth -= 1
                self.add(name, clock_now() - t0)

        setattr(obj, attr, timed)

    def add(self, phase: str, seconds: float) -> None:
        self.now[phase] = self.now.get(phase, 0.0) + seconds

    def start(self) -> None:
        self.now = {}

    def end(self, step_s: float) -> None:
        row = {k: self.now.get(k, 0.0) for k in PHASES if k != "other"}
        row["other"] = max(step_s - sum(row.values()), 0.0)
        self.rows.append(row)

    def medians(self, skip: int) -> dict[str, float]:
        rows = self.rows[skip:]
        return {k: statistics.median(r[k] for r in rows) for k in PHASES} if rows else {}


def instrument_stratagym(trainer) -> PhaseClock:
    """Time stratagym's phases: sampling (the policy's ``generate``), the detached scoring passes (old
    log-probs / reference), the loss forward, backward and clip + optimizer + scheduler step; env time
    comes from the rollout's own clock (``time/env``)."""
    clock = PhaseClock()
    clock.wrap(trainer.policy, "generate", "generation")
    clock.wrap(trainer, "_score_detached",
               lambda policy, payloads: "reference" if policy is trainer.reference else "old logprobs")
    clock.wrap(trainer, "_micro_loss", "forward+loss")
    clock.wrap(trainer.accelerator, "backward", "backward")
    clock.wrap(trainer.accelerator, "clip_grad_norm_", "optimizer")
    clock.wrap(trainer.optimizer, "step", "optimizer")
    clock.wrap(trainer.scheduler, "step", "optimizer")
    step = trainer.train_step

    def timed_step():
        clock.start()
        t0 = clock_now()
        row = step()
        dt = clock_now() - t0
        clock.add("rewards/env", row.get("time/env", 0.0))
        clock.end(dt)
        return row

    trainer.train_step = timed_step
    return clock


def instrument_trl(trainer, clock: PhaseClock) -> None:
    """Time TRL's phases: ``_generate`` (tokenising + sampling + decoding), ``_calculate_rewards``, the
    no-grad scoring passes (reference / old log-probs, one method), ``compute_loss`` (its forward + loss),
    ``accelerator.backward``, and clip + optimizer step (the optimizer is wrapped at train begin)."""
    clock.wrap(trainer, "_generate", "generation")
    clock.wrap(trainer, "_calculate_rewards", "rewards/env")
    clock.wrap(trainer, "_get_per_token_logps_and_entropies",
               lambda model, *a, **k: "reference" if model is trainer.ref_model else "old logprobs")
    clock.wrap(trainer, "compute_loss", "forward+loss")
    clock.wrap(trainer.accelerator, "backward", "backward")
    clock.wrap(trainer, "_clip_grad_norm", "optimizer")


def summarise_stratagym(rows: list[dict], times: list[float]) -> dict:
    return {
        "step_s": statistics.median(times),
        "tokens": statistics.mean(r["rollout/tokens"] for r in rows),
        "tokens_per_s": statistics.median(r["time/tokens_per_s"] for r in rows),
        "env_share": statistics.median(r["time/env_share"] for r in rows),
        "rollout_s": statistics.median(r["time/rollout"] for r in rows),
    }


def bench_stratagym(model_path: str, steps: int, warmup: int, max_new: int, fused: bool = True,
                    shared: bool = True, fused_scoring: bool = True, retain_heap: bool = True) -> dict:
    trainer = make_stratagym(model_path, steps, warmup, max_new, fused, shared, fused_scoring, retain_heap)
    clock = instrument_stratagym(trainer)
    rows, times = [], []
    for i in range(steps + warmup):
        t0 = clock_now()
        row = trainer.train_step()
        dt = clock_now() - t0
        if i >= warmup:
            rows.append(row)
            times.append(dt)
    trainer.close()
    return {**summarise_stratagym(rows, times), "phases": clock.medians(warmup)}


def bench_trl(model_path: str, steps: int, warmup: int, max_new: int, cache: str | None = None,
              paired: object = None, paired_clock: PhaseClock | None = None) -> dict:
    """TRL's step times; with ``paired`` (a stratagym Trainer) one stratagym step runs right after each
    TRL step (outside TRL's timer), so both see the same machine load step by step."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    import torch

    tok = AutoTokenizer.from_pretrained(model_path)
    bf16 = _RUN["dtype"] == "bfloat16"
    # a LoRA base is frozen: held in bf16; a fully trained model keeps fp32 weights under TRL's autocast
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.bfloat16 if bf16 and _RUN["lora"] else torch.float32)
    peft_config = None
    if _RUN["lora"]:
        from peft import LoraConfig

        lo = _RUN["lora"]
        peft_config = LoraConfig(r=lo["r"], lora_alpha=lo["alpha"], lora_dropout=lo["dropout"],
                                 target_modules=lo["target_modules"], task_type="CAUSAL_LM")
    n = (steps + warmup) * 2
    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": PROMPTS[i % 2]}]} for i in range(n)])

    def reward(completions, **kw):
        return [reward_text(c[0]["content"] if isinstance(c, list) else c) for c in completions]

    times: list[float] = []
    lengths: list[float] = []
    ours: list[tuple[float, dict]] = []
    clock = PhaseClock()

    class Timer(TrainerCallback):
        def on_train_begin(self, args, state, control, optimizer=None, **kw):
            clock.wrap(trainer.optimizer, "step", "optimizer")

        def on_step_begin(self, args, state, control, **kw):
            clock.start()
            self.t0 = clock_now()

        def on_step_end(self, args, state, control, **kw):
            times.append(clock_now() - self.t0)
            clock.end(times[-1])
            if paired is not None:
                t0 = clock_now()
                row = paired.train_step()
                ours.append((clock_now() - t0, row))

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "completions/mean_length" in logs:
                lengths.append(logs["completions/mean_length"])

    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="bench-trl-"), per_device_train_batch_size=16, num_generations=8,
        max_completion_length=max_new, temperature=1.0, beta=0.04, learning_rate=1e-5, max_steps=steps + warmup,
        logging_steps=1, report_to=[], save_strategy="no", use_cpu=True, bf16=bf16, use_vllm=False,
        dataloader_num_workers=0, gradient_accumulation_steps=1, shuffle_dataset=False, seed=0, disable_tqdm=True,
        cache_implementation=cache,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=ds, processing_class=tok,
                          callbacks=[Timer()], peft_config=peft_config)
    instrument_trl(trainer, clock)
    trainer.train()
    kept = times[warmup:]
    out = {"step_s": statistics.median(kept), "tokens": 16 * statistics.mean(lengths[warmup:]) if lengths else float("nan"),
           "phases": clock.medians(warmup)}
    if paired is not None:
        out["paired"] = summarise_stratagym([r for _, r in ours[warmup:]], [t for t, _ in ours[warmup:]])
        if paired_clock is not None:
            out["paired"]["phases"] = paired_clock.medians(warmup)
        out["step_ratios"] = [t / k for (t, _), k in zip(ours[warmup:], kept)]
    return out


def print_phases(tag: str, ours: dict | None, theirs: dict | None) -> None:
    """One line per phase: stratagym's and TRL's median ms and their ratio (medians of each phase need not
    add up to the median step)."""
    a, b = (ours or {}).get("phases") or {}, (theirs or {}).get("phases") or {}
    if not a and not b:
        return
    print(f"{tag}per-phase medians (ms):   {'stratagym':>10} {'TRL':>10}  ratio", flush=True)
    for k in PHASES:
        x, y = a.get(k), b.get(k)
        xs = f"{x * 1000:10.1f}" if x is not None else f"{'-':>10}"
        ys = f"{y * 1000:10.1f}" if y is not None else f"{'-':>10}"
        r = f"{x / y:6.2f}x" if x is not None and y and y > 1e-4 else ""
        print(f"{tag}  {k:<22} {xs} {ys}  {r}", flush=True)


def model_path(hidden: int, model: str | None) -> str:
    """``--model`` as given (any local Llama/Qwen2 HF folder, e.g. an SFT checkpoint), else the tiny
    Qwen2 of width ``hidden`` (64: the 2-layer default, 0.12M parameters; otherwise 4 layers, 2.55M at 256)."""
    if model:
        return model
    from stratagym.agents.tiny_lm import TinyLMConfig, tiny_lm_path

    cfg = TinyLMConfig() if hidden == 64 else TinyLMConfig(hidden_size=hidden, intermediate_size=2 * hidden,
                                                         num_hidden_layers=4)
    return str(tiny_lm_path(cfg))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=64, help="tiny model width (64: 2 layers, 0.12M params; otherwise 4 layers: 256 -> 2.55M)")
    ap.add_argument("--model", default=None,
                    help="a local HF model folder instead of the tiny model (e.g. data/checkpoints/sft-searchqa)")
    ap.add_argument("--only", choices=["stratagym", "trl"], default=None)
    ap.add_argument("--repeats", type=int, default=1,
                    help="run stratagym and TRL back to back this many times (alternating) and print the ratio range")
    ap.add_argument("--no-fused", action="store_true", help="stratagym samples through the transformers forward")
    ap.add_argument("--no-shared-prompts", action="store_true",
                    help="stratagym re-scores every row whole (policy.shared_prompt_scoring: false)")
    ap.add_argument("--no-fused-scoring", action="store_true",
                    help="stratagym re-scores through the transformers forward (policy.fused_scoring: false)")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time steps and phases by this thread's CPU time instead of wall time (steadier on a "
                         "loaded machine; both trainers run on this thread)")
    ap.add_argument("--no-retain-heap", action="store_true",
                    help="train.retain_heap: false (glibc's default trimming; process-wide: TRL runs in this "
                         "process, so it applies to both trainers either way)")
    ap.add_argument("--trl-cache", default=None, help="TRL's generation cache_implementation (e.g. static)")
    ap.add_argument("--sequential", action="store_true",
                    help="all stratagym steps, then all TRL steps (default: one stratagym step after each TRL step, "
                         "so both see the same load)")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                    help="both trainers compute in this dtype (see the module docstring)")
    ap.add_argument("--lora", action="store_true", help="both train a fresh LoRA (r 16, q/k/v/o) instead of all weights")
    args = ap.parse_args(argv)
    _CLOCK["now"] = time.thread_time if args.cpu_time else time.perf_counter
    _RUN.update(dtype=args.dtype, lora=dict(LORA) if args.lora else None)
    path = model_path(args.hidden, args.model)
    from transformers import AutoConfig

    n_params = _count_params(path)
    print(f"model {path} ({n_params / 1e6:.2f}M parameters, {AutoConfig.from_pretrained(path).model_type}); batch 2 "
          f"prompts x 8 generations, <= {args.max_new} new tokens, beta 0.04, {args.dtype}{', LoRA' if args.lora else ''}, "
          f"{torch.get_num_threads()} thread(s); median of {args.steps} steps "
          f"after {args.warmup} warm-up", flush=True)
    ratios: list[float] = []
    phase_ratios: dict[str, list[float]] = {}
    for rep in range(args.repeats):
        tag = f"[{rep + 1}/{args.repeats}] " if args.repeats > 1 else ""
        ours = theirs = None
        if args.only is None and not args.sequential:
            trainer = make_stratagym(path, args.steps, args.warmup, args.max_new, fused=not args.no_fused,
                                     shared=not args.no_shared_prompts, fused_scoring=not args.no_fused_scoring,
                                     retain_heap=not args.no_retain_heap)
            clock = instrument_stratagym(trainer)
            theirs = bench_trl(path, args.steps, args.warmup, args.max_new, cache=args.trl_cache, paired=trainer,
                               paired_clock=clock)
            trainer.close()
            ours = theirs["paired"]
            print(f"{tag}stratagym GRPO step: {ours['step_s'] * 1000:8.1f} ms  ({ours['tokens']:.0f} tokens/step; rollout "
                  f"{ours['rollout_s'] * 1000:.1f} ms, {ours['tokens_per_s']:.0f} generated tokens/s, "
                  f"env share of rollout {ours['env_share'] * 100:.2f}%)", flush=True)
            print(f"{tag}TRL GRPOTrainer step:  {theirs['step_s'] * 1000:8.1f} ms  ({theirs['tokens']:.0f} tokens/step)",
                  flush=True)
            print(f"{tag}per-step ratios (interleaved): median {statistics.median(theirs['step_ratios']):.2f}x, "
                  f"{min(theirs['step_ratios']):.2f}x .. {max(theirs['step_ratios']):.2f}x", flush=True)
        elif args.only in (None, "stratagym"):
            ours = bench_stratagym(path, args.steps, args.warmup, args.max_new, fused=not args.no_fused,
                                   shared=not args.no_shared_prompts, fused_scoring=not args.no_fused_scoring,
                                   retain_heap=not args.no_retain_heap)
            print(f"{tag}stratagym GRPO step: {ours['step_s'] * 1000:8.1f} ms  ({ours['tokens']:.0f} tokens/step; rollout "
                  f"{ours['rollout_s'] * 1000:.1f} ms, {ours['tokens_per_s']:.0f} generated tokens/s, "
                  f"env share of rollout {ours['env_share'] * 100:.2f}%)", flush=True)
        if args.only == "trl" or (args.only is None and args.sequential):
            theirs = bench_trl(path, args.steps, args.warmup, args.max_new, cache=args.trl_cache)
            print(f"{tag}TRL GRPOTrainer step:  {theirs['step_s'] * 1000:8.1f} ms  ({theirs['tokens']:.0f} tokens/step)",
                  flush=True)
        print_phases(tag, ours, theirs)
        if ours and theirs:
            ratios.append(ours["step_s"] / theirs["step_s"])
            print(f"{tag}ratio stratagym / TRL: {ratios[-1]:.2f}x  (goal <= 0.5x)", flush=True)
            for k in PHASES:
                x, y = ours.get("phases", {}).get(k), theirs.get("phases", {}).get(k)
                if x is not None and y and y > 1e-4:
                    phase_ratios.setdefault(k, []).append(x / y)
    if len(ratios) > 1:
        print(f"ratio over {len(ratios)} runs: {min(ratios):.2f}x .. {max(ratios):.2f}x (median {statistics.median(ratios):.2f}x)")
        for k, rs in phase_ratios.items():
            print(f"  {k:<22} ratio over {len(rs)} runs: {min(rs):.2f}x .. {max(rs):.2f}x (median {statistics.median(rs):.2f}x)")


def _count_params(path: str) -> int:
    from transformers import AutoModelForCausalLM

    return sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(path).parameters())


if __name__ == "__main__":
    sys.exit(main())
