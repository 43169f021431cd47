#!/usr/bin/env python3
"""The step-group structure behind docs/studies.md §11: the alfworld-warm clone vs random play.

Plays G = 8 sampled episodes on every 5th bundled ALFWorld train game (24 games, 50 steps, context_k 4) with
two scorers: the untrained one (uniform over admissible actions: random play) and seed 0's clone of
``scripted:searcher`` exactly as the study builds it (same demonstrations, epochs, lr, batch, seed), before
any RL. Prints :func:`stratagym.studies.testbeds.context_check`'s table: how often states and histories
repeat within a group, and the share of steps GiGPO and HGPO K=4 give a nonzero advantage. §10 found HGPO
K=2 and K=4 identical under random play; this table shows why the clone is different.

Usage (one thread, ~2 min)::

    OMP_NUM_THREADS=1 python scripts/alfworld_warm_structure.py > studies/alfworld-warm/structure.md
"""

from __future__ import annotations

import torch

from stratagym.agents.scorer import ScorerPolicy
from stratagym.studies.definitions import get_study
from stratagym.studies.runner import policy_options, warm_start_demos
from stratagym.studies.testbeds import context_check, format_table
from stratagym.training.rollout import InProcessPool, RolloutCollector
from stratagym.training.scorer_imitation import imitate

GAMES, GROUP, SEED = 24, 8, 0


def main() -> None:
    torch.set_num_threads(1)
    study = get_study("alfworld-warm")
    spec = study.warm_start
    kwargs = {**study.env_kwargs, "context_k": 4}
    options = {k: v for k, v in policy_options(study).items() if k != "class"}
    results = {}
    for name in ("untrained scorer (random play)", f"clone, seed {SEED} (before RL)"):
        policy = ScorerPolicy.from_config({**options, "seed": SEED})
        if name.startswith("clone"):
            imitate(policy, warm_start_demos(study, policy), epochs=int(spec["epochs"]), lr=float(spec["lr"]),
                    batch_size=int(spec["batch_size"]), seed=SEED)
        collector = RolloutCollector(study.env, policy.sampling_copy(7), group_size=GROUP,
                                     pool=InProcessPool(study.env, kwargs), max_turns=200)
        try:
            ids = collector.task_ids()
            ids = ids[:: max(1, len(ids) // GAMES)][:GAMES]
            results[name] = context_check(collector.collect(ids, list(range(len(ids)))), levels=(0, 1, 2, 4))
        finally:
            collector.close()
    print(format_table(f"Step-group structure on {GAMES} ALFWorld train games (every {120 // GAMES}th), "
                       f"G = {GROUP}, 50 steps", results))


if __name__ == "__main__":
    main()
