"""End-to-end training on CPU with the tiny local model: every available env family x every estimator.

One Trainer per env (building envs and the model dominates); each estimator then runs one real
training step (rollout -> shaping -> estimator -> loss -> AdamW) on it. Checks: the loss is finite,
the weights change, estimators the env cannot feed are refused, checkpoints reload with
``from_pretrained`` and score samples exactly like the live policy.
"""

from __future__ import annotations

import math

import pytest
import torch

from stratagym.agents.llm import LLMPolicy
from stratagym.training.config import RecipeConfig
from stratagym.algorithms.registry import get_estimator
from stratagym.training.rollout import env_metadata_keys
from stratagym.training.trainer import Trainer
from stratagym.envs.core import ConfigError
from tests.trainer.conftest import available

ESTIMATORS = ["grpo", "dr_grpo", "rloo", "stratified", "gigpo", "hgpo", "stratified+hadw", "hgpo+hadw"]
ENVS = {
    "stratagym/SearchQA-v0": {"max_turns": 1},  # Search-R1 meaning: 1 search round + the final turn
    "stratagym/WebShop-v0": {"max_steps": 2},
    "stratagym/ALFWorld-v0": {"max_steps": 2},
    "stratagym/CueCorridor-v0": {},
}


def _config(env_id: str, kwargs: dict, out: str, **over) -> RecipeConfig:
    data = {
        "name": "e2e",
        "policy": {"model": "tiny", "max_new_tokens": 12, "memory_k": 1},
        "env": {"id": env_id, "kwargs": kwargs},
        "rollout": {"group_size": 2, "tasks_per_step": 2, "max_turns": 2},
        "algorithm": {"estimator": "grpo", "invalid_action_penalty": 0.1},
        "loss": {"kl_coef": 0.01, "entropy_coef": 0.01},
        "optim": {"lr": 1.0e-3, "micro_batch_size": 8},
        "train": {"total_steps": 50, "output_dir": out, "save_every": 0, "progress": False, "tensorboard": False},
    }
    for k, v in over.items():
        sec, key = k.split(".")
        data[sec][key] = v
    return RecipeConfig.from_dict(data)


@pytest.mark.slow
@pytest.mark.parametrize("env_id", list(ENVS))
def test_every_estimator_trains_on_env(env_id, tmp_path):
    if not available(env_id):  # a missing extra is a skip, which the skip allowance reports
        import stratagym

        pytest.skip(stratagym.get_spec(env_id).availability())
    # Every family here runs on bundled data: a ConfigError is a regression, not a reason to skip.
    trainer = Trainer(_config(env_id, ENVS[env_id], str(tmp_path / "run")))
    try:
        provided = env_metadata_keys(env_id)
        before = [p.detach().clone() for p in trainer.policy.parameters()]
        trained = 0
        for name in ESTIMATORS:
            est = get_estimator(name)
            if not set(est.requires) <= provided:
                with pytest.raises(ConfigError, match="needs env metadata"):
                    Trainer(_config(env_id, ENVS[env_id], str(tmp_path / name), **{"algorithm.estimator": name}))
                continue
            trainer.estimator = est
            row = trainer.train_step()
            assert math.isfinite(row["loss/loss"]), (name, row)
            assert row["train/samples"] > 0
            assert row["rollout/episodes"] == 4
            trained += 1
        assert trained >= 3
        after = list(trainer.policy.parameters())
        assert any(not torch.equal(a, b) for a, b in zip(after, before))
        path = trainer.save()
        reloaded = LLMPolicy.from_pretrained(path / "policy")
        batch = trainer.rollout()
        payloads = [s.payload for t in batch.ok for s in t.steps][:4]
        with torch.no_grad():
            a = trainer.policy.sequence_log_probs(payloads).logprobs
            b = reloaded.sequence_log_probs(payloads).logprobs
        assert torch.equal(a, b)
    finally:
        trainer.close()


def test_refuses_estimator_without_metadata(tmp_path):
    env = "stratagym/CueCorridor-v0"
    assert "search_count" not in env_metadata_keys(env)
    with pytest.raises(ConfigError, match=r"'stratified' needs env metadata \['search_count'\]"):
        Trainer(_config(env, {}, str(tmp_path / "r"), **{"algorithm.estimator": "stratified"}))


def test_advantages_drive_the_policy_gradient(tmp_path):
    """A hand-set reward on one sample of each group: the update raises that sample's log-prob."""
    env = "stratagym/SearchQA-v0"
    if not available(env):
        pytest.skip("SearchQA not available")
    cfg = _config(env, {"max_turns": 0}, str(tmp_path / "r"), **{"loss.kl_coef": 0.0, "loss.entropy_coef": 0.0,
                                                                  "optim.lr": 5.0e-3, "rollout.group_size": 4})
    trainer = Trainer(cfg)
    try:
        torch.manual_seed(0)
        batch = trainer.rollout()
        good = [t for t in batch.ok if t.traj % 4 == 0]
        for t in batch.ok:
            for s in t.steps:
                s.reward = 1.0 if t in good else 0.0
        payloads = [t.steps[0].payload for t in good]
        with torch.no_grad():
            lp0 = trainer.policy.sequence_log_probs(payloads)
        m = trainer.update(batch)
        assert m["adv/nonzero"] > 0 and math.isfinite(m["loss/loss"])
        with torch.no_grad():
            lp1 = trainer.policy.sequence_log_probs(payloads)
        seq0 = (lp0.logprobs * lp0.mask).sum(1)
        seq1 = (lp1.logprobs * lp1.mask).sum(1)
        assert (seq1 > seq0).all(), (seq0, seq1)
    finally:
        trainer.close()


def test_scorer_style_policy_trains_through_the_same_trainer(tmp_path, choice_policy):
    env = "stratagym/CueCorridor-v0"
    trainer = Trainer(_config(env, {}, str(tmp_path / "r"), **{"loss.kl_coef": 0.0, "loss.entropy_coef": 0.0,
                                                                 "algorithm.estimator": "gigpo"}), policy=choice_policy)
    try:
        rows = trainer.train(max_steps=2)
        assert [r["step"] for r in rows] == [1, 2]
        assert all(math.isfinite(r["loss/loss"]) for r in rows)
    finally:
        trainer.close()


def test_env_tasks_slice_limits_training_to_those_tasks(tmp_path, choice_policy):
    """``env.tasks: "start:stop"`` trains on that slice of the split's task ids (RL on questions the SFT
    demonstrations, the first N, did not contain); an empty slice is refused with the split's size."""
    env = "stratagym/CueCorridor-v0"
    trainer = Trainer(_config(env, {}, str(tmp_path / "r"), **{"env.tasks": "2:5"}), policy=choice_policy)
    try:
        every = trainer.collector.task_ids()
        assert trainer._task_ids == every[2:5] and len(every) > 5
        seen = {t for _ in range(20) for t in trainer._sample_tasks()[0]}
        assert seen <= set(every[2:5]) and len(seen) == 3
    finally:
        trainer.close()
    with pytest.raises(ConfigError, match=r"no tasks in env.tasks '10000:' \(the split has"):
        Trainer(_config(env, {}, str(tmp_path / "r2"), **{"env.tasks": "10000:"}), policy=choice_policy)


def test_multi_turn_generation_cache_is_released_before_the_update(tmp_path):
    """The keys/values kept for the next turn's prompts are freed when the rollout ends (the update's
    activations need the memory, and new weights make them stale), after the rollout has reused them."""
    # SearchQA's search_r1 prompts keep the history verbatim (think_action prompts rewrite their opening)
    trainer = Trainer(_config("stratagym/SearchQA-v0", {"max_turns": 3}, str(tmp_path / "run"), **{"policy.memory_k": 8}))
    try:
        cache = trainer.policy.backend.prefix_cache
        seen = {}
        update = trainer.update

        def checked_update(batch):
            seen["kept_at_update"] = bool(cache._sources)
            return update(batch)

        trainer.update = checked_update
        metrics = trainer.train_step()
        assert seen == {"kept_at_update": False}
        assert cache.reused_tokens > 0  # the turns after the first reused the earlier ones
        assert metrics["time/prompt_reuse"] == pytest.approx(cache.reused_tokens / cache.prompt_tokens)
        assert 0 < metrics["time/prompt_reuse"] < 1
    finally:
        trainer.close()
