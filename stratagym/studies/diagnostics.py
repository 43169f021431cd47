"""Does each study's env put the claimed bias into the advantage estimates? (diagnostics, not tests)

Cheap, direct evidence before training: the registry estimators run on the SAME rollouts (scorer policy,
untrained and after a few GRPO iterations through the Trainer, with the study's own recipe from
:func:`stratagym.studies.runner.recipe_for`) and we count how often each one credits a decision with the
wrong sign, where the right sign is known from the env's structure:

* ``context`` (CueCorridor): at a fork, how often the right door gets a negative step advantage under
  GiGPO and HGPO K=1/2 (context inconsistency), their sign disagreement and correlation.
* ``context-valued`` (ValueCorridor): at a fork, the best door for its lamp should get A > 0 and the other
  door A < 0 (the ranking *within* a context). Wrong-sign rate per estimator: GRPO, GiGPO, HGPO K=1/2/4.
* ``search-strata-bias`` (SearchArchives): a trajectory's answer step should get A > 0 if the answer was
  right and A < 0 if wrong. Wrong-sign rate per estimator (GRPO, Stratified alpha 0.6, SAN alpha 1),
  split by stratum (1 search: summary archive, 2 searches: full records).
* ``difficulty-shared`` (DifficultyShared): the policy-gradient of the batch, split into the part from
  easy tasks (g_easy) and from hard tasks (g_hard), on the shared parameters: cos(g_easy, g_hard)
  (< 0: the tasks compete), the hard share ||g_hard|| / (||g_easy|| + ||g_hard||) and cos(g, g_hard)
  (how much the whole update goes where the hard tasks need it), GRPO vs GRPO + HA-DW.

Run: ``OMP_NUM_THREADS=1 python -m stratagym.studies.diagnostics [study ...]`` (default: the three
mechanism studies, ~10 s; their output as measured is ``studies/mechanism_diagnostic.txt``).
"""

from __future__ import annotations

import sys
import tempfile
from typing import Any, Callable

import numpy as np
import torch

from stratagym.algorithms.registry import get_estimator
from stratagym.studies.definitions import Method, get_study
from stratagym.studies.runner import recipe_for
from stratagym.training.rollout import to_advantage_batch
from stratagym.training.trainer import Trainer

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


EXIT_OF = {"green": "left", "amber": "right"}


def context(trainer: Trainer, batches: int = BATCHES) -> dict[str, float]:
    """CueCorridor: how often the right door (known from the cue two steps back) gets a negative step
    advantage under GiGPO and HGPO K=1/2, their sign disagreement and correlation, on the same rows."""
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


#: study name -> (diagnostic, GRPO iterations before each measurement)
DIAGNOSTICS: dict[str, tuple[Callable[[Trainer], dict[str, float]], tuple[int, ...]]] = {
    "context-valued": (context_valued, TRAINED),
    "search-strata-bias": (search_strata_bias, TRAINED),
    "difficulty-shared": (difficulty_shared, TRAINED),
    "context": (context, (0, 15)),
}
#: what runs without arguments (the output committed as studies/mechanism_diagnostic.txt)
DEFAULT = ("context-valued", "search-strata-bias", "difficulty-shared")


def main(names: list[str]) -> None:
    torch.set_num_threads(1)
    unknown = [n for n in names if n not in DIAGNOSTICS]
    if unknown:
        sys.exit(f"no diagnostic for {unknown}; diagnostics: {', '.join(DIAGNOSTICS)}")
    for name in names or list(DEFAULT):
        diagnostic, schedule = DIAGNOSTICS[name]
        study = get_study(name)
        grpo = next(m for m in study.methods if m.estimator == "grpo")
        # the widest context any arm uses, so HGPO K=4 levels exist in the rows
        kwargs = max((m.env_kwargs for m in study.methods), key=lambda kw: kw.get("context_k", 0))
        grpo = Method(grpo.label, grpo.estimator, grpo.estimator_kwargs, dict(kwargs))
        print(f"== {name} ({study.env}), {BATCHES} batches of {study.tasks_per_iteration} tasks x G={study.group_size}")
        for trained in schedule:
            with tempfile.TemporaryDirectory() as tmp:
                trainer = Trainer(recipe_for(study, grpo, 0, tmp))
                if trained:
                    trainer.train(max_steps=trained)
                stats = diagnostic(trainer)
                trainer.close()
            print(f"  policy after {trained} GRPO iterations:")
            for k, v in stats.items():
                print(f"    {k:44s} {v:.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
