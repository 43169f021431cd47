"""Does each mechanism variant put the claimed bias into the advantage estimates? (diagnostic, not a test)

Cheap, direct evidence before training: the registry estimators run on the SAME rollouts (scorer policy,
untrained and after a few GRPO iterations through the Trainer) and we count how often each one credits a
decision with the wrong sign, where the right sign is known from the env's structure:

* ``context-valued`` (ValueCorridor): at a fork, the best door for its lamp should get A > 0 and the other
  door A < 0 (the ranking *within* a context). Wrong-sign rate per estimator: GRPO, GiGPO, HGPO K=1/2/4.
* ``search-strata-bias`` (SearchArchives): a trajectory's answer step should get A > 0 if the answer was
  right and A < 0 if wrong. Wrong-sign rate per estimator (GRPO, Stratified alpha 0.6, SAN alpha 1),
  split by stratum (1 search: summary archive, 2 searches: full records).
* ``difficulty-shared`` (DifficultyShared): the policy-gradient of the batch, split into the part from
  easy tasks (g_easy) and from hard tasks (g_hard), on the shared parameters: cos(g_easy, g_hard)
  (< 0: the tasks compete), the hard share ||g_hard|| / (||g_easy|| + ||g_hard||) and cos(g, g_hard)
  (how much the whole update goes where the hard tasks need it), GRPO vs GRPO + HA-DW.

Run: ``OMP_NUM_THREADS=1 python benchmarks/studies/mechanism_diagnostic.py [study ...]``.
"""

from __future__ import annotations

import sys
import tempfile
from typing import Any, Callable

import numpy as np
import torch

import stratagym  # noqa: F401
from stratagym.algorithms.registry import get_estimator
from stratagym.training.rollout import to_advantage_batch
from stratagym.training.trainer import Trainer
from stratagym.studies.definitions import get_study
from stratagym.studies.runner import recipe_for

BATCHES = 4
TRAINED = (0, 5, 15)


def _levels(rows: Any, k: int) -> Any:
    return type(rows)(**{**rows.__dict__, "context": rows.context[:, : k + 1]})


def _traj_adv(batch: Any, est: Callable[[Any], torch.Tensor]) -> tuple[torch.Tensor, list[Any]]:
    rows, sample_row, samples = to_advantage_batch(batch, "trajectory")
    return est(rows)[sample_row], samples


def context_valued(trainer: Trainer) -> dict[str, float]:
    wrong: dict[str, list[bool]] = {}
    zero: dict[str, list[bool]] = {}
    ests = {"GRPO": None, "GiGPO": get_estimator("gigpo", gamma=0.95), "HGPO K=1": 1, "HGPO K=2": 2,
            "HGPO K=4": 4}
    hgpo = get_estimator("hgpo", gamma=0.95)
    for _ in range(BATCHES):
        batch = trainer.rollout()
        rows, _, samples = to_advantage_batch(batch, "step")
        advs = {"GRPO": _traj_adv(batch, get_estimator("grpo"))[0], "GiGPO": ests["GiGPO"](rows)}
        for k in (1, 2, 4):
            advs[f"HGPO K={k}"] = hgpo(_levels(rows, k))
        for i, s in enumerate(samples):
            best = s.info.get("fork_best")
            if best is None:
                continue
            for name, adv in advs.items():
                a = float(adv[i])
                wrong.setdefault(name, []).append((a < 0) if best else (a > 0))
                zero.setdefault(name, []).append(a == 0)
    n = len(next(iter(wrong.values())))
    out = {"fork steps": float(n)}
    out.update({f"wrong sign: {k}": float(np.mean(v)) for k, v in wrong.items()})
    out.update({f"zero: {k}": float(np.mean(v)) for k, v in zero.items()})
    return out


def search_strata_bias(trainer: Trainer) -> dict[str, float]:
    ests = {"GRPO": get_estimator("grpo"), "Stratified 0.6": get_estimator("stratified", alpha=0.6),
            "SAN (alpha 1)": get_estimator("stratified", alpha=1.0)}
    wrong: dict[tuple[str, str], list[bool]] = {}
    zero: dict[tuple[str, str], list[bool]] = {}
    for _ in range(BATCHES):
        batch = trainer.rollout()
        for name, est in ests.items():
            adv, samples = _traj_adv(batch, est)
            for i, s in enumerate(samples):
                if s.info.get("answer") is None:  # only the answer step
                    continue
                a = float(adv[i])
                right = bool(s.info.get("won"))
                for key in ("all", s.info.get("archive")):
                    wrong.setdefault((name, key), []).append((a < 0) if right else (a > 0))
                    zero.setdefault((name, key), []).append(a == 0)
    out = {"answers": float(len(wrong[("GRPO", "all")]))}
    for (name, key), v in sorted(wrong.items()):
        out[f"wrong sign: {name} [{key}]"] = float(np.mean(v))
    for (name, key), v in sorted(zero.items()):
        out[f"zero: {name} [{key}]"] = float(np.mean(v))
    return out


def _flat_grad(policy: Any, payloads: list[Any], adv: torch.Tensor) -> torch.Tensor:
    params = [p for p in policy.parameters() if p.requires_grad]
    if not payloads:
        return torch.zeros(sum(p.numel() for p in params))
    lp = policy.sequence_log_probs(payloads).logprobs[:, 0]
    grads = torch.autograd.grad((adv.to(lp.dtype) * lp).sum(), params, allow_unused=True)
    return torch.cat([(g if g is not None else torch.zeros_like(p)).flatten() for g, p in zip(grads, params)])


def _cos(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a[None], b[None])[0])


def difficulty_shared(trainer: Trainer) -> dict[str, float]:
    ests = {"GRPO": get_estimator("grpo"), "GRPO + HA-DW": get_estimator("grpo+hadw")}
    stats: dict[str, list[float]] = {}
    for _ in range(BATCHES):
        batch = trainer.rollout()
        for name, est in ests.items():
            adv, samples = _traj_adv(batch, est)
            parts = {}
            for level in ("easy", "hard"):
                idx = [i for i, s in enumerate(samples) if s.info.get("difficulty") == level]
                parts[level] = _flat_grad(trainer.policy, [samples[i].payload for i in idx], adv[idx])
            g = parts["easy"] + parts["hard"]
            ne, nh = float(parts["easy"].norm()), float(parts["hard"].norm())
            for key, val in (("cos(g_easy, g_hard)", _cos(parts["easy"], parts["hard"])),
                             ("hard share of |g|", nh / (ne + nh) if ne + nh > 0 else float("nan")),
                             ("cos(g, g_hard)", _cos(g, parts["hard"]))):
                stats.setdefault(f"{key}: {name}", []).append(val)
    return {k: float(np.nanmean(v)) for k, v in sorted(stats.items())}


DIAGNOSTICS = {"context-valued": context_valued, "search-strata-bias": search_strata_bias,
               "difficulty-shared": difficulty_shared}


def main(names: list[str]) -> None:
    torch.set_num_threads(1)
    for name in names or list(DIAGNOSTICS):
        study = get_study(name)
        grpo = next(m for m in study.methods if m.estimator == "grpo")
        # the widest context any arm uses, so HGPO K=4 levels exist in the rows
        kwargs = max((m.env_kwargs for m in study.methods), key=lambda kw: kw.get("context_k", 0))
        grpo = type(grpo)(grpo.label, grpo.estimator, grpo.options, dict(kwargs))
        print(f"== {name} ({study.env_id}), {BATCHES} batches of {study.tasks_per_iteration} tasks x G={study.group_size}")
        for trained in TRAINED:
            with tempfile.TemporaryDirectory() as tmp:
                trainer = Trainer(recipe_for(study, grpo, 0, tmp))
                if trained:
                    trainer.train(max_steps=trained)
                stats = DIAGNOSTICS[name](trainer)
                trainer.close()
            print(f"  policy after {trained} GRPO iterations:")
            for k, v in stats.items():
                print(f"    {k:44s} {v:.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
