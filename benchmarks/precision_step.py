"""The phases of a SmolLM2 LoRA GRPO + KL step on SearchQA, fp32 vs bf16 side by side, against the chip's limit.

One process, one thread count: for each dtype it builds the trainer of
``recipes/cpu/grpo-smollm2-lora-kl-searchqa.yaml`` (``policy.dtype`` set to that dtype, nothing saved,
no eval), runs ``--steps`` training steps and times each phase by wrapping the trainer's own methods (the
``PhaseClock`` of ``benchmarks/trainer.py``): generation, old log-probs (none here: one update per
rollout reuses the detached current ones), the reference forward, the loss forward, backward, optimizer,
weight sync (none with the ``hf`` backend: it samples from the training weights). Each phase is printed
as seconds, tokens/s and its share of the roofline: the bf16 matmul rate this script measures on this
machine at the same thread count (a SmolLM2 FFN-shaped matmul, 1024 x 576 @ 576 x 1536), against the
phase's matmul FLOPs (2 x parameters per token for a forward, 4 x for a LoRA backward, which computes
the activations' gradients through the frozen base; the LM head only where logits are taken). Peak
resident memory per phase comes from a sampler thread (every 20 ms).

    OMP_NUM_THREADS=1 python benchmarks/precision_step.py [--threads 1] [--steps 1] [--tasks 4]
        [--dtypes float32,bfloat16] [--json out.json] [--recipe R.yaml] [--set key=value ...]

Needs ``stratagym models import`` (SmolLM2) and ``python scripts/make_search_qa_worlds.py`` (its data).
A step at the recipe's settings is 4 tasks x 8 samples x up to 4 turns; its generation length follows
what the model samples, so the two dtypes sample different texts: compare tokens/s, not seconds alone.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import yaml  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes/cpu/grpo-smollm2-lora-kl-searchqa.yaml"
PHASES = ("generation", "old logprobs", "reference", "forward+loss", "backward", "optimizer", "weight sync", "other")


def _trainer_bench():
    spec = importlib.util.spec_from_file_location("_bench_trainer", REPO / "benchmarks/trainer.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def matmul_rate(dtype: torch.dtype, repeats: int = 30, budget_s: float = 1.0) -> float:
    """GFLOP/s of a SmolLM2 FFN-shaped matmul in ``dtype`` at the current thread count: ``repeats`` timed
    products, or fewer (at least 2) once ``budget_s`` has passed. Why the budget: on a CPU without bf16
    instructions torch emulates a bf16 product (1.5 s each on a 2-core AVX2 machine, against 0.02 s in fp32),
    and 33 of them were most of the smoke test's minute."""
    a, b = torch.randn(1024, 576, dtype=dtype), torch.randn(576, 1536, dtype=dtype)
    a @ b  # warm-up: oneDNN picks and caches its kernel
    done, t0 = 0, time.perf_counter()
    while done < repeats and (done < 2 or time.perf_counter() - t0 < budget_s):
        a @ b
        done += 1
    return 2 * 1024 * 576 * 1536 * done / (time.perf_counter() - t0) / 1e9


class PeakRSS:
    """Peak resident set size (GB) per phase, sampled from /proc every 20 ms by a daemon thread."""

    def __init__(self) -> None:
        self.phase = "other"
        self.peak: dict[str, float] = {}
        self._stop = False
        self._page = os.sysconf("SC_PAGE_SIZE")
        threading.Thread(target=self._run, daemon=True).start()

    def _rss(self) -> float:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self._page / 1e9

    def _run(self) -> None:
        while not self._stop:
            gb = self._rss()
            self.peak[self.phase] = max(self.peak.get(self.phase, 0.0), gb)
            time.sleep(0.02)

    def stop(self) -> None:
        self._stop = True


def run_dtype(dtype: str, args: argparse.Namespace, bench: object, rss: PeakRSS) -> dict:
    from stratagym.training.config import load_recipe
    from stratagym.training.trainer import Trainer

    out = tempfile.mkdtemp(prefix=f"precision-{dtype}-")
    extra = dict(kv.split("=", 1) for kv in args.set)
    recipe = load_recipe(args.recipe, overrides={
        **{k: yaml.safe_load(v) for k, v in extra.items()},
        "policy.dtype": dtype, "train.output_dir": out, "train.save_every": 0, "train.eval_every": 0,
        "train.progress": False, "train.tensorboard": False, "train.total_steps": args.steps,
        "rollout.tasks_per_step": args.tasks,
    })
    trainer = Trainer(recipe)
    clock = bench.instrument_stratagym(trainer)
    counts = {"generated": 0, "scored": 0, "response_tokens": 0}
    # token counts and the memory sampler's phase, by wrapping the same methods the clock wraps
    gen = trainer.policy.generate

    def counted_generate(requests, **kw):
        rss.phase = "generation"
        res = gen(requests, **kw)
        counts["generated"] += sum(int(g.num_tokens) for g in res)
        rss.phase = "other"
        return res

    trainer.policy.generate = counted_generate
    score = trainer._score_detached

    def counted_score(policy, payloads):
        rss.phase = "reference" if policy is trainer.reference else "old logprobs"
        if policy is trainer.reference or trainer.reference is None:  # the batch's tokens, counted once
            counts["scored"] += sum(int(p["prompt_ids"].numel() + p["response_ids"].numel()) for p in payloads)
            counts["response_tokens"] += sum(int(p["response_ids"].numel()) for p in payloads)
        try:
            return score(policy, payloads)
        finally:
            rss.phase = "other"

    trainer._score_detached = counted_score
    micro = trainer._micro_loss

    def counted_micro(chunk, *a, **kw):
        rss.phase = "forward+backward"
        return micro(chunk, *a, **kw)

    trainer._micro_loss = counted_micro
    opt_step = trainer.optimizer.step

    def counted_opt(*a, **kw):
        rss.phase = "optimizer"
        try:
            return opt_step(*a, **kw)
        finally:
            rss.phase = "other"

    trainer.optimizer.step = counted_opt
    t0 = time.perf_counter()
    try:
        trainer.train(max_steps=args.steps)
    finally:
        trainer.close()
    wall = time.perf_counter() - t0
    rows = [json.loads(x) for x in (Path(out) / "metrics.jsonl").read_text().splitlines() if x.strip()]
    phases = {k: sum(r.get(k, 0.0) for r in clock.rows) for k in bench.PHASES}
    phases["weight sync"] = sum(r.get("time/weight_sync", 0.0) for r in rows)
    steps = max(len(rows), 1)
    model = trainer.policy.model
    n_params = sum(p.numel() for n, p in model.named_parameters() if "embed_tokens" not in n and ".reference." not in n
                   and "lm_head" not in n)
    cfg = model.config
    head = int(cfg.hidden_size) * int(cfg.vocab_size)  # the LM head, applied where logits are taken
    return {
        "dtype": dtype, "steps": steps, "wall_s": wall, "phases_s": phases,
        "tokens": counts, "n_params_body": n_params, "head_params": head,
        "parity_max_abs": [r.get("parity/max_abs") for r in rows], "parity_mean_abs": [r.get("parity/mean_abs") for r in rows],
        "reward": [r.get("rollout/reward_mean", r.get("reward/mean")) for r in rows],
        "peak_rss_gb": dict(rss.peak),
    }


def report(results: list[dict], rate: dict[str, float], threads: int) -> str:
    lines = [f"threads {threads}; matmul roofline: fp32 {rate['float32']:.0f} GFLOP/s, bf16 {rate['bfloat16']:.0f} GFLOP/s "
             f"(ratio {rate['bfloat16'] / rate['float32']:.2f})", ""]
    head = f"{'phase':<14}" + "".join(f"{r['dtype']:>34}" for r in results) + ("     bf16/fp32 speed" if len(results) == 2 else "")
    lines.append(head)
    lines.append(f"{'':<14}" + "".join(f"{'s':>10}{'tok/s':>10}{'roofline':>14}" for _ in results))
    for ph in PHASES:
        cells, speeds = [], []
        for r in results:
            s = r["phases_s"].get(ph, 0.0) / r["steps"]
            t = r["tokens"]
            if ph == "generation":
                tok, flop = t["generated"], 2 * (r["n_params_body"] + r["head_params"]) * t["generated"]
            elif ph in ("reference", "old logprobs"):
                tok, flop = t["scored"], 2 * r["n_params_body"] * t["scored"] + 2 * r["head_params"] * t["response_tokens"]
            elif ph == "forward+loss":
                tok, flop = t["scored"], 2 * r["n_params_body"] * t["scored"] + 2 * r["head_params"] * t["response_tokens"]
            elif ph == "backward":
                tok, flop = t["scored"], 4 * r["n_params_body"] * t["scored"] + 4 * r["head_params"] * t["response_tokens"]
            else:
                tok, flop = 0, 0
            tok, flop = tok / r["steps"], flop / r["steps"]
            tps = tok / s if s > 0 and tok else 0.0
            share = flop / s / 1e9 / rate["bfloat16"] if s > 0 and flop else 0.0
            cells.append(f"{s:>10.2f}{tps:>10.0f}{share:>13.0%} " if tok else f"{s:>10.2f}{'-':>10}{'-':>14}")
            speeds.append(s)
        ratio = f"{speeds[0] / speeds[1]:>10.2f}x" if len(speeds) == 2 and speeds[1] > 0 and speeds[0] > 0 else ""
        lines.append(f"{ph:<14}" + "".join(cells) + ratio)
    tot = [sum(r["phases_s"].values()) / r["steps"] for r in results]
    lines.append(f"{'step':<14}" + "".join(f"{t:>10.2f}{'':>24}" for t in tot)
                 + (f"{tot[0] / tot[1]:>10.2f}x" if len(tot) == 2 else ""))
    lines.append("")
    for r in results:
        t = r["tokens"]
        lines.append(f"{r['dtype']}: {t['generated'] / r['steps']:.0f} sampled and {t['scored'] / r['steps']:.0f} scored tokens "
                     f"a step; parity max_abs {r['parity_max_abs']}, mean_abs {r['parity_mean_abs']}; peak RSS GB "
                     + ", ".join(f"{k} {v:.2f}" for k, v in sorted(r["peak_rss_gb"].items())))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "1")))
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--tasks", type=int, default=4, help="rollout.tasks_per_step (the recipe's: 4)")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--recipe", default=str(RECIPE), help="another training recipe (the smoke test's tiny one)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a recipe override (repeatable)")
    ap.add_argument("--json", default=None, help="also write the figures here")
    args = ap.parse_args()
    bench = _trainer_bench()
    torch.set_num_threads(args.threads)  # after benchmarks/trainer.py, which sets 1 on import
    os.chdir(REPO)
    rate = {"float32": matmul_rate(torch.float32), "bfloat16": matmul_rate(torch.bfloat16)}
    rss = PeakRSS()
    results = []
    for dtype in args.dtypes.split(","):
        rss.peak = {}
        results.append(run_dtype(dtype, args, bench, rss))
        print(f"{dtype}: done in {results[-1]['wall_s']:.0f} s", file=sys.stderr, flush=True)
    rss.stop()
    text = report(results, rate, args.threads)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps({"threads": args.threads, "matmul_gflops": rate, "results": results,
                                               "report": text}, indent=1))


if __name__ == "__main__":
    main()
