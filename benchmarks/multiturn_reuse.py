#!/usr/bin/env python3
"""Multi-turn GRPO steps with and without the work-skipping of generation and scoring: prefix reuse in
generation (``policy.prefix_cache``), dropping finished rows from decoding, and history sharing in
scoring (``policy.shared_history_scoring``).

    OMP_NUM_THREADS=1 python benchmarks/multiturn_reuse.py [--recipe recipes/cpu/grpo-tiny-searchqa.yaml]
        [--model data/checkpoints/sft-searchqa-4m] [--steps 4] [--warmup 1]

Two trainers built from the same recipe, one with both settings off (every turn's prompt prefilled and
scored whole, and finished rows decoded to the end of the batch: the behaviour before them) and one with
all on (the defaults), step ALTERNATELY in one process on the same machine load. Before each pair of steps the global torch RNG is set to the same state for both, so
they sample the same tokens (the reuse is exact up to float rounding), and before each pair the
trainer without the savings takes the other's weights, optimizer state and task sampler state: the
script checks that their rollouts (tokens, returns) agree and reports the largest loss difference; a
sample flipped by rounding (a uniform draw within ~1e-6 of a boundary) makes one step's rollouts part,
which it reports (the next step starts from the same state again). Printed per step and as
medians with ranges: the step, generation and update (scoring + backward + optimizer) times, their
ratios (on / off), and how much of the prompts the generator reused.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
REPO = Path(__file__).resolve().parents[1]
# not benchmarks/ itself (python puts the script's folder first): benchmarks/alfworld.py would shadow the
# alfworld package the ALFWorld env imports
sys.path[:] = [str(REPO)] + [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import torch  # noqa: E402

torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


def build(recipe: Path, model: str | None, reuse: bool, *, smoke: bool = False):
    from stratagym.training.config import load_recipe
    from stratagym.training.trainer import Trainer

    cfg = load_recipe(str(recipe))
    if model:
        cfg.policy["model"] = model
    if smoke:  # the test suite's smoke run: the same code path on 2 tasks x 2 episodes of a few tokens
        cfg.rollout.group_size = 2
        cfg.rollout.tasks_per_step = 2
        cfg.rollout.filter_groups = False
        cfg.policy["max_new_tokens"] = 8
    cfg.policy["prefix_cache"] = reuse
    cfg.policy["shared_history_scoring"] = reuse
    cfg.train.output_dir = tempfile.mkdtemp(prefix=f"bench-reuse-{'on' if reuse else 'off'}-")
    cfg.train.eval_every = 0
    cfg.train.save_every = 0
    cfg.train.progress = False
    cfg.train.tensorboard = False
    trainer = Trainer(cfg)
    trainer.policy.backend.drop_finished_rows = reuse
    return trainer


def sync(off, on) -> None:
    """Start ``off``'s next step from ``on``'s state (weights, optimizer, schedule, task sampler), so
    that a sample flipped by float rounding in one step does not make every later step differ."""
    off.policy.model.load_state_dict(on.policy.model.state_dict())
    off.optimizer.load_state_dict(on.optimizer.state_dict())
    if getattr(on, "scheduler", None) is not None:
        off.scheduler.load_state_dict(on.scheduler.state_dict())
    off.rng.bit_generator.state = on.rng.bit_generator.state


def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}-{fmt.format(max(values))}]"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--recipe", type=Path, default=REPO / "recipes/cpu/grpo-tiny-searchqa.yaml")
    ap.add_argument("--model", default=None, help="override the recipe's policy.model (e.g. data/checkpoints/sft-searchqa-4m)")
    ap.add_argument("--steps", type=int, default=4, help="measured steps (after --warmup)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--smoke", action="store_true",
                    help="2 tasks x 2 episodes, <= 8 new tokens: checks the script runs (tests), figures meaningless")
    args = ap.parse_args(argv)
    if args.model and not Path(args.model).exists():
        print(f"error: --model {args.model} does not exist (build it with stratagym sft, see recipes/cpu/)", file=sys.stderr)
        return 2
    off, on = (build(args.recipe, args.model, False, smoke=args.smoke),
               build(args.recipe, args.model, True, smoke=args.smoke))
    rows = []
    worst_loss = 0.0
    parted: list[int] = []
    for k in range(args.warmup + args.steps):
        sync(off, on)
        state = torch.get_rng_state()
        m_off = off.train_step()
        torch.set_rng_state(state)
        m_on = on.train_step()
        same = all(m_off.get(key) == m_on.get(key) for key in ("rollout/tokens", "rollout/return", "rollout/episodes"))
        if same:
            worst_loss = max(worst_loss, abs(m_off["loss/loss"] - m_on["loss/loss"]))
        else:
            # float rounding differs between the layouts: a uniform draw within ~1e-6 of a token's CDF
            # boundary flips that sample, and the two rollouts part from there (sync() re-joins them)
            parted.append(k)
            print(f"[step {k}] the rollouts parted (tokens {int(m_off['rollout/tokens'])} vs "
                  f"{int(m_on['rollout/tokens'])}): a sample flipped by float rounding", flush=True)
        row = {name: (m_off[f"time/{name}"], m_on[f"time/{name}"]) for name in ("step", "generate", "update")}
        tag = "warm-up" if k < args.warmup else "step"
        print(f"[{tag} {k}] tokens {int(m_on['rollout/tokens'])}  " + "  ".join(
            f"{name} {a:.2f} -> {b:.2f} s ({b / a:.2f}x)" for name, (a, b) in row.items()), flush=True)
        if k >= args.warmup:
            rows.append(row)
    cache = on.policy.backend.prefix_cache
    print(f"\nmodel {on.config.policy['model']}, {args.steps} steps after {args.warmup} warm-up, alternating, "
          f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}")
    print(f"rollouts identical in tokens and returns in {args.warmup + args.steps - len(parted)} of "
          f"{args.warmup + args.steps} steps (parted by a flipped sample: {parted or 'none'}); "
          f"largest |loss difference| where identical {worst_loss:.2e}")
    print(f"prompt tokens the generator reused: {cache.reused_tokens} of {cache.prompt_tokens} "
          f"({cache.reused_tokens / max(cache.prompt_tokens, 1):.0%}; warm-up included)")
    print(f"{'seconds per step':<18}{'off':>22}{'on':>22}{'on / off':>24}")
    for name in ("step", "generate", "update"):
        a = [r[name][0] for r in rows]
        b = [r[name][1] for r in rows]
        print(f"{name:<18}{spread(a):>22}{spread(b):>22}{spread([y / x for x, y in zip(a, b)], '{:.2f}x'):>24}")
    off.close()
    on.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
