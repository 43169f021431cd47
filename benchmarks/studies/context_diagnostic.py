"""How much does context inconsistency distort step advantages on CueCorridor? (diagnostic, not a test)

Collects group rollouts with the scorer policy (untrained, and after a few GRPO iterations through the
Trainer), computes GiGPO and HGPO step advantages on the SAME rows with the registry estimators, and
prints, for the fork steps (where the right door depends on the cue two steps back):

* how often the right door gets a negative advantage (a wrong-signed push) under each estimator;
* how often GiGPO and HGPO disagree in sign;
* the correlation of the two.

Run: ``OMP_NUM_THREADS=1 python benchmarks/studies/context_diagnostic.py``.
"""

from __future__ import annotations

import tempfile

import numpy as np
import torch

import stratagym  # noqa: F401
from stratagym.algorithms.registry import get_estimator
from stratagym.training.rollout import to_advantage_batch
from stratagym.training.trainer import Trainer
from stratagym.studies.definitions import get_study
from stratagym.studies.runner import recipe_for

EXIT_OF = {"green": "left", "amber": "right"}


def fork_stats(trainer: Trainer, batches: int = 4) -> dict[str, float]:
    gigpo, hgpo = get_estimator("gigpo", gamma=0.95), get_estimator("hgpo", gamma=0.95)
    wrong = {k: [] for k in ("GiGPO", "HGPO K=2", "HGPO K=1")}
    disagree, a_all, b_all = [], [], []
    for _ in range(batches):
        batch = trainer.rollout()
        rows, _, samples = to_advantage_batch(batch, "step")
        adv_g = gigpo(rows)
        adv_h = hgpo(type(rows)(**{**rows.__dict__, "context": rows.context[:, :3]}))  # levels 0..2
        adv_h1 = hgpo(type(rows)(**{**rows.__dict__, "context": rows.context[:, :2]}))  # levels 0..1
        for i, s in enumerate(samples):
            if s.info.get("phase") is None or not s.action.startswith("go "):
                continue
            # info is the state AFTER the step: a wrong door ends the episode with the cue still set; a
            # right door leads to the next hall (cue cleared) or wins (cue set, and the door matches it)
            cue = s.info.get("cue") or None
            right = s.action == f"go {EXIT_OF[cue]}" if cue else True
            if not right:
                continue
            for name, adv in (("GiGPO", adv_g), ("HGPO K=2", adv_h), ("HGPO K=1", adv_h1)):
                wrong[name].append(float(adv[i]) < 0)
            disagree.append(np.sign(float(adv_g[i])) != np.sign(float(adv_h[i])))
            a_all.append(float(adv_g[i]))
            b_all.append(float(adv_h[i]))
    out = {f"right door pushed down: {k}": float(np.mean(v)) if v else float("nan") for k, v in wrong.items()}
    out["sign disagreement GiGPO vs HGPO K=2"] = float(np.mean(disagree)) if disagree else float("nan")
    out["corr(GiGPO, HGPO K=2)"] = float(np.corrcoef(a_all, b_all)[0, 1]) if len(a_all) > 2 else float("nan")
    out["right-door fork steps"] = float(len(a_all))
    return out


def main() -> None:
    torch.set_num_threads(1)
    study = get_study("context")
    grpo = study.methods[0]
    for trained in (0, 15):
        with tempfile.TemporaryDirectory() as tmp:
            trainer = Trainer(recipe_for(study, grpo, 0, tmp))
            if trained:
                trainer.train(max_steps=trained)
            stats = fork_stats(trainer)
            trainer.close()
        print(f"policy after {trained} GRPO iterations:")
        for k, v in stats.items():
            print(f"  {k:42s} {v:.3f}")


if __name__ == "__main__":
    main()
