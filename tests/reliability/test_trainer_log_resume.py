"""``metrics.jsonl`` after a resume (issue 15 item 2): resuming before the first checkpoint starts over
(as a fresh run does), so the log never holds a step twice; a row torn by a kill does not block it.

Why the earlier tests missed it: the kill-and-resume test (``tests/trainer/test_resume_and_config.py``)
kills only after checkpoint 2 exists, so "resume with no checkpoint yet" never ran.
"""

from __future__ import annotations

import json

from stratagym.training.config import AlgorithmConfig, EnvConfig, LossConfig, OptimConfig, RecipeConfig, RolloutConfig, TrainConfig
from stratagym.training.trainer import Trainer


def _recipe(out, *, save_every: int) -> RecipeConfig:
    return RecipeConfig(
        name="log-resume",
        policy={"class": "stratagym.agents.scorer:ScorerPolicy", "seed": 0},
        env=EnvConfig(id="stratagym/DifficultyMix-v0"),
        rollout=RolloutConfig(group_size=2, tasks_per_step=2, workers="inprocess"),
        algorithm=AlgorithmConfig(estimator="grpo"),
        loss=LossConfig(kl_coef=0.0),
        optim=OptimConfig(lr=0.01),
        train=TrainConfig(total_steps=3, seed=0, output_dir=str(out), save_every=save_every, eval_every=0,
                          tensorboard=False, progress=False),
    ).validate()


def _steps(out) -> list[int]:
    return [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]


def _run(out, *, save_every: int, resume: bool, max_steps: int | None = None) -> None:
    trainer = Trainer(_recipe(out, save_every=save_every))
    try:
        trainer.train(resume=resume, max_steps=max_steps)
    finally:
        trainer.close()


def test_resume_before_the_first_checkpoint_does_not_duplicate_rows(tmp_path):
    out = tmp_path / "run"
    _run(out, save_every=2, resume=False, max_steps=1)  # stopped after step 1; first checkpoint is at 2
    assert _steps(out) == [1]
    _run(out, save_every=2, resume=True)
    assert _steps(out) == [1, 2, 3]  # was [1, 1, 2, 3]


def test_resume_after_a_checkpoint_keeps_rows_up_to_it_and_skips_a_torn_row(tmp_path):
    out = tmp_path / "run"
    _run(out, save_every=1, resume=False, max_steps=2)
    with open(out / "metrics.jsonl", "a") as fh:  # a kill while writing step 3's row
        fh.write('{"step": 3, "loss/lo')
    _run(out, save_every=1, resume=True)
    assert _steps(out) == [1, 2, 3]
