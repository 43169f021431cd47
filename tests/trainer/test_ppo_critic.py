"""PPO with a critic through the trainer (issue 18 item 4): value model, GAE targets, clipped value loss,
the critic's own optimizer, checkpoints that carry the critic and resume bit for bit on CPU.

The math (``gae``, ``value_loss``) has its per-sample references and known answers in
``tests/algorithms/test_alg_ppo_critic.py``; here the trainer's use of it is checked: the values it
feeds the estimator, the targets it trains the critic on (by hand on a two-turn episode), the training
of both models on a synthetic env, and resume. Semantics follow verl's PPO (``compute_gae_advantage_return``
core_algos.py:214-263, ``compute_value_loss`` core_algos.py:1799-1838, verl b178a3c): the critic's
values are computed once on the rollout (``V_old``), targets are ``A_raw + V_old``, the advantages are
whitened, and the critic trains with its own optimizer on the same mini-batches.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from stratagym.agents.critic import ScorerCritic, build_critic
from stratagym.agents.scorer import ScorerPayload, ScorerPolicy
from stratagym.agents.policy import unwrap_model
from stratagym.algorithms.registry import AdvantageBatch
from stratagym.errors import ConfigError
from stratagym.training.checkpoint import latest_checkpoint, load_checkpoint
from stratagym.training.config import RecipeConfig
from stratagym.training.trainer import Trainer

ENV = "stratagym/CueCorridor-v0"
SCORER = "stratagym.agents.scorer:ScorerPolicy"


def _config(out: Path, **over) -> RecipeConfig:
    data = {
        "name": "ppo",
        "policy": {"class": SCORER, "hidden": 16, "memory": 2, "seed": 1},
        "env": {"id": ENV},
        "rollout": {"group_size": 4, "tasks_per_step": 3, "max_turns": 40},
        "algorithm": {"estimator": "gae", "estimator_kwargs": {"gamma": 0.95, "lam": 0.9}},
        "optim": {"lr": 0.02, "micro_batch_size": 16, "mini_batches": 2, "ppo_epochs": 2},
        "critic": {"lr": 0.01, "cliprange_value": 0.2},
        "train": {"total_steps": 4, "seed": 5, "output_dir": str(out), "save_every": 2, "keep_last": 3,
                  "progress": False, "tensorboard": False},
    }
    for key, value in over.items():
        sec, name = key.split(".")
        data[sec][name] = value
    return RecipeConfig.from_dict(data)


def _weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in unwrap_model(module).state_dict().items()}


def test_critic_targets_by_hand(tmp_path):
    """Two turns, rewards (0, 1), every value 0.5 (a critic whose head is the constant 0.5), gamma 0.9,
    lam 0.5.  By hand (Schulman et al. 2016, eq. 11-16; verl core_algos.py:214-263 per turn):
    delta_1 = 1 + 0 - 0.5 = 0.5, A_1 = 0.5, R_1 = A_1 + V = 1.0;
    delta_0 = 0 + 0.9*0.5 - 0.5 = -0.05, A_0 = -0.05 + 0.9*0.5*0.5 = 0.175, R_0 = 0.675.
    The trainer puts V into rows.values (what the gae estimator reads) and returns R as the targets."""
    trainer = Trainer(_config(tmp_path / "run", **{"algorithm.estimator_kwargs": {"gamma": 0.9, "lam": 0.5}}))
    try:
        net = unwrap_model(trainer.critic.model)
        with torch.no_grad():
            net.out.zero_()
            net.out_bias.fill_(0.5)
        payload = ScorerPayload(np.array([1, 2, 3]), (np.array([4]),), 0, 0.0)
        samples = [SimpleNamespace(payload=payload), SimpleNamespace(payload=payload)]
        rows = AdvantageBatch(rewards=torch.tensor([0.0, 1.0]), group=torch.tensor([0, 0]),
                              traj=torch.tensor([0, 0]), step=torch.tensor([0, 1]))
        values, returns = trainer._critic_targets(rows, samples)
        assert torch.allclose(values, torch.tensor([0.5, 0.5]))
        assert rows.values is values
        assert torch.allclose(returns, torch.tensor([0.675, 1.0]), atol=1e-6)
        # the estimator's raw advantages are R - V = (0.175, 0.5); whitened as verl's masked_whiten (Bessel
        # variance): mean 0.3375, deviations -+0.1625, std 0.1625 * sqrt(2), so A = (-1, 1) / sqrt(2)
        adv = trainer.estimator(rows)
        assert torch.allclose(adv, torch.tensor([-1.0, 1.0]) * 2 ** -0.5, atol=1e-4)
    finally:
        trainer.close()


@pytest.mark.slow
def test_ppo_trains_policy_and_critic_on_a_synthetic_env(tmp_path):
    trainer = Trainer(_config(tmp_path / "run", **{"train.total_steps": 3, "train.save_every": 3}))
    try:
        assert isinstance(trainer.critic, ScorerCritic)
        policy_before, critic_before = _weights(trainer.policy.model), _weights(trainer.critic.model)
        rows = trainer.train()
        for row in rows:
            for key in ("loss/loss", "loss/vf_loss", "loss/vf_clipfrac", "critic/values", "critic/returns",
                        "critic/explained_var", "critic/grad_norm"):
                assert np.isfinite(row[key]), (key, row)
        assert rows[0]["critic/values"] == 0.0  # the value head starts at 0
        assert any(r["loss/vf_clipfrac"] > 0 for r in rows)  # 2 epochs x 2 mini-batches: the clip binds
        assert any(not torch.equal(a, b) for a, b in zip(_weights(trainer.critic.model).values(), critic_before.values()))
        assert any(not torch.equal(a, b) for a, b in zip(_weights(trainer.policy.model).values(), policy_before.values()))
        ckpt = latest_checkpoint(tmp_path / "run")
        data = load_checkpoint(ckpt)
        assert data["critic_dir"] is not None and data["critic_optimizer"] is not None
        saved = load_file(str(data["critic_dir"] / "critic.safetensors"))
        for k, v in _weights(trainer.critic.model).items():
            assert torch.equal(saved[k], v), k
        # the policy folder is an ordinary policy: eval reloads it without knowing about the critic
        reloaded = ScorerPolicy.from_pretrained(str(data["policy_dir"]))
        for k, v in _weights(trainer.policy.model).items():
            assert torch.equal(_weights(reloaded.model)[k], v), k
        m = trainer.evaluate(num_tasks=2)
        assert 0.0 <= m["eval/success"] <= 1.0
    finally:
        trainer.close()


@pytest.mark.slow
def test_ppo_resume_is_bit_for_bit(tmp_path):
    """Stop after 2 of 4 steps, resume in a new trainer from the checkpoint: the metrics and the final
    policy, critic and critic-optimizer state equal those of an uninterrupted run (the pattern of
    tests/trainer/test_resume_and_config.py, in-process since the scorer finishes too fast to kill)."""
    ref = Trainer(_config(tmp_path / "ref"))
    ref_rows = ref.train()
    ref.close()
    cut = Trainer(_config(tmp_path / "cut"))
    first = cut.train(max_steps=2)
    cut.close()
    resumed = Trainer(_config(tmp_path / "cut"))
    rest = resumed.train(resume=True)
    resumed.close()

    def clean(rows):
        return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]

    assert [r["step"] for r in first + rest] == [1, 2, 3, 4]
    assert clean(first + rest) == clean(ref_rows)
    a, b = load_checkpoint(latest_checkpoint(tmp_path / "ref")), load_checkpoint(latest_checkpoint(tmp_path / "cut"))
    for name in ("critic.safetensors",):
        wa, wb = load_file(str(a["critic_dir"] / name)), load_file(str(b["critic_dir"] / name))
        assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    sa, sb = a["critic_optimizer"]["state"], b["critic_optimizer"]["state"]
    assert sa.keys() == sb.keys()
    for k in sa:
        for name, t in sa[k].items():
            assert torch.equal(t, sb[k][name]), (k, name)
    ja = json.loads((tmp_path / "ref" / "metrics.jsonl").read_text().splitlines()[-1])
    jb = json.loads((tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()[-1])
    assert {k: v for k, v in ja.items() if not k.startswith("time/")} == {k: v for k, v in jb.items() if not k.startswith("time/")}


def test_resume_refuses_a_checkpoint_without_critic(tmp_path):
    out = tmp_path / "run"
    grpo = Trainer(_config(out, **{"algorithm.estimator": "grpo", "algorithm.estimator_kwargs": {},
                                   "train.total_steps": 1, "train.save_every": 1}))
    grpo.train()
    grpo.close()
    ppo = Trainer(_config(out))
    try:
        with pytest.raises(ConfigError, match="has no critic"):
            ppo.train(resume=True)
    finally:
        ppo.close()


def test_estimators_without_values_build_no_critic(tmp_path):
    trainer = Trainer(_config(tmp_path / "run", **{"algorithm.estimator": "grpo", "algorithm.estimator_kwargs": {}}))
    try:
        assert trainer.critic is None and trainer.critic_optimizer is None
        row = trainer.train_step()
        assert not any(k.startswith("critic/") or k == "loss/vf_loss" for k in row)
    finally:
        trainer.close()


@pytest.mark.parametrize("patch, message", [
    ({"critic.lr": 0.0}, "critic.lr must be > 0"),
    ({"critic.cliprange_value": -0.1}, "critic.cliprange_value must be > 0"),
    ({"critic.max_grad_norm": 0.0}, "critic.max_grad_norm must be > 0"),
])
def test_bad_critic_config_fails_early(tmp_path, patch, message):
    with pytest.raises(ConfigError, match=message):
        _config(tmp_path / "run", **patch)


def test_unknown_critic_options_and_policies_are_refused(tmp_path):
    policy = ScorerPolicy(hidden=8)
    with pytest.raises(ConfigError, match="valid: \\['hidden', 'init_std'\\]"):
        build_critic(policy, {"width": 3})
    with pytest.raises(ConfigError, match="needs a value model for object"):
        build_critic(object())
    with pytest.raises(ConfigError, match="unknown key"):
        _config(tmp_path / "run", **{"critic.vf_coef": 1.0})


def test_scorer_critic_save_load_and_seed(tmp_path):
    a, b = ScorerCritic(buckets=64, hidden=4, seed=3), ScorerCritic(buckets=64, hidden=4, seed=3)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    before = torch.get_rng_state()
    ScorerCritic(buckets=64, hidden=4, seed=9)
    assert torch.equal(before, torch.get_rng_state())  # building a critic leaves the run's RNG alone
    with torch.no_grad():
        for p in a.parameters():
            p.add_(0.25)
    a.save_pretrained(tmp_path / "c")
    b.load_pretrained(tmp_path / "c")
    payloads = [ScorerPayload(np.array([1, 5, 7]), (), 0, 0.0), ScorerPayload(np.array([2]), (), 0, 0.0)]
    assert torch.equal(a.values(payloads), b.values(payloads))
    # V = w . tanh(E(x) + b) + c, computed by hand from the weights for the second payload
    net = unwrap_model(b.model)
    by_hand = torch.tanh(net.emb.weight[2] + net.bias) @ net.out + net.out_bias
    assert torch.allclose(b.values(payloads)[1], by_hand)


LLM_ENV = "stratagym/SearchQA-v0"


@pytest.mark.slow
def test_llm_policy_trains_with_a_value_head(tmp_path):
    """The LLM path: the tiny local Qwen2 policy gets an LLMCritic (its transformer body + a value head
    at the last prompt token), one PPO step trains both, and the saved critic reloads to the same values."""
    from tests.trainer.conftest import available

    if not available(LLM_ENV):
        pytest.skip("SearchQA not available")
    from stratagym.agents.critic import LLMCritic

    cfg = RecipeConfig.from_dict({
        "name": "ppo-llm",
        "policy": {"model": "tiny", "max_new_tokens": 8, "memory_k": 1},
        "env": {"id": LLM_ENV, "kwargs": {"max_turns": 1}},
        "rollout": {"group_size": 2, "tasks_per_step": 2, "max_turns": 2},
        # the untrained tiny model earns no env reward: the penalty on rejected actions gives the critic targets
        "algorithm": {"estimator": "gae", "estimator_kwargs": {"lam": 0.95}, "invalid_action_penalty": 0.5,
                      "format_reward": 0.25},
        "optim": {"lr": 1.0e-3, "micro_batch_size": 4},
        "critic": {"lr": 1.0e-3},
        "train": {"total_steps": 1, "output_dir": str(tmp_path / "run"), "save_every": 1, "progress": False,
                  "tensorboard": False},
    })
    old_umask = os.umask(0o022)
    trainer = Trainer(cfg)
    try:
        assert isinstance(trainer.critic, LLMCritic)
        head_before = _weights(unwrap_model(trainer.critic.model).head)
        (row,) = trainer.train()
        assert row["critic/values"] == 0.0  # the head starts at 0
        assert np.isfinite(row["loss/loss"]) and row["loss/vf_loss"] > 0, row
        head_after = _weights(unwrap_model(trainer.critic.model).head)
        assert any(not torch.equal(head_before[k], head_after[k]) for k in head_after)
        data = load_checkpoint(latest_checkpoint(tmp_path / "run"))
        # save_pretrained writes safetensors 0600 and mkdtemp makes folders 0700: the checkpoint, policy and critic
        # body included, is published with the umask's modes (022 here), as a checkpoint others read must be
        step = latest_checkpoint(tmp_path / "run")
        assert stat.S_IMODE(step.stat().st_mode) == 0o755
        weights = {f.relative_to(step).as_posix(): stat.S_IMODE(f.stat().st_mode) for f in step.rglob("*.safetensors")}
        assert {"policy/model.safetensors", "critic/body/model.safetensors", "critic/critic.safetensors"} <= set(weights)
        assert set(weights.values()) == {0o644}, weights
        batch = trainer.rollout()
        payloads = [s.payload for t in batch.ok for s in t.steps][:3]
        clone = build_critic(trainer.policy, seed=99)
        clone.load_pretrained(data["critic_dir"])
        with torch.no_grad():
            assert torch.allclose(clone.values(payloads), trainer.critic.values(payloads), atol=1e-6)
            assert clone.values(payloads).shape == (len(payloads),)
    finally:
        trainer.close()
        os.umask(old_umask)


@pytest.mark.slow
def test_cli_trains_ppo_from_a_recipe_then_eval_and_leaderboard(tmp_path):
    """The user's path: a YAML recipe with ``algorithm.estimator: gae`` and a ``critic:`` section trains
    through ``stratagym train`` (and ``--resume`` continues it), the eval harness evaluates the saved
    policy like any other, and the record goes on a board; a bad critic key exits 2 without a traceback."""
    import subprocess
    import sys

    import yaml

    repo = Path(__file__).resolve().parents[2]
    out = tmp_path / "run"
    recipe = {
        "name": "ppo-cli",
        "policy": {"class": SCORER, "hidden": 16, "memory": 2},
        "env": {"id": ENV},
        "rollout": {"group_size": 4, "tasks_per_step": 2, "max_turns": 40},
        "algorithm": {"estimator": "gae", "estimator_kwargs": {"lam": 0.95}},
        "optim": {"lr": 0.02, "micro_batch_size": 64},
        "critic": {"lr": 0.01, "cliprange_value": 0.5, "options": {"hidden": 8}},
        "train": {"total_steps": 2, "output_dir": str(out), "save_every": 1, "progress": False,
                  "tensorboard": False},
    }
    path = tmp_path / "ppo.yaml"
    path.write_text(yaml.safe_dump(recipe))
    env = {"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(repo)}

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "stratagym.cli", *args], cwd=repo, env=env,
                              capture_output=True, text=True, timeout=600)

    res = cli("train", "--config", str(path))
    assert res.returncode == 0, res.stderr[-2000:]
    res = cli("train", "--config", str(path), "--resume", "--set", "train.total_steps=3")
    assert res.returncode == 0, res.stderr[-2000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3] and all("loss/vf_loss" in r for r in rows)
    critic_dir = load_checkpoint(latest_checkpoint(out))["critic_dir"]
    assert json.loads((critic_dir / "critic_config.json").read_text())["hidden"] == 8

    # eval: the checkpoint's policy folder is an ordinary ScorerPolicy (``stratagym eval`` takes LLM folders
    # only, so the harness is called as the studies call it), then the record goes on a board
    from stratagym.eval.harness import EvalConfig, evaluate

    policy = ScorerPolicy.from_pretrained(str(load_checkpoint(latest_checkpoint(out))["policy_dir"]))
    rec = evaluate(EvalConfig(agent="scorer:ppo-cli", env_id=ENV, seeds=[0], n=2, label="PPO", algorithm="gae"),
                   progress=False, agent_factory=lambda s: policy)
    record = tmp_path / "record.json"
    record.write_text(json.dumps(rec))
    res = cli("leaderboard", "submit", str(record), "--board", str(tmp_path / "board.db"))
    assert res.returncode == 0, res.stdout[-2000:]
    res = cli("leaderboard", "show", "--board", str(tmp_path / "board.db"), "--env", ENV)
    assert "PPO" in res.stdout and "gae" in res.stdout

    recipe["critic"]["vf_coef"] = 0.5
    path.write_text(yaml.safe_dump(recipe))
    res = cli("train", "--config", str(path))
    assert res.returncode == 2
    assert "unknown key(s) ['vf_coef'] in critic" in res.stderr + res.stdout
    assert "Traceback" not in res.stderr + res.stdout


def test_ppo_with_dynamic_sampling(tmp_path):
    """Dynamic sampling keeps only groups whose returns differ; the critic then scores exactly the kept
    samples (one value per kept step, in the order of the rows)."""
    trainer = Trainer(_config(tmp_path / "run", **{"rollout.filter_groups": True, "rollout.max_filter_rounds": 3,
                                                   "train.save_every": 0}))
    try:
        row = trainer.train_step()
        assert 1 <= row["rollout/filter_rounds"] <= 3
        assert np.isfinite(row["loss/vf_loss"]) and np.isfinite(row["critic/explained_var"])
    finally:
        trainer.close()


def test_critic_gradient_does_not_depend_on_the_micro_batch_size(tmp_path):
    """Each micro-batch's value loss is weighted by its share of the mini-batch's rows, so accumulating
    micro-batches of 3 gives the gradient of the whole mini-batch in one piece. Compared on the raw
    gradients the optimizers receive (no clipping; AdamW's first step would hide a uniform scale error)."""
    def run(mbs: int, name: str) -> tuple[list, list]:
        t = Trainer(_config(tmp_path / name, **{"optim.micro_batch_size": mbs, "optim.mini_batches": 1,
                                                 "optim.ppo_epochs": 1, "optim.max_grad_norm": None,
                                                 "critic.max_grad_norm": None, "train.save_every": 0}))
        seen: dict[str, list] = {}
        for key, opt in (("critic", t.critic_optimizer), ("policy", t.optimizer)):
            original = opt.step

            def step(*a, _key=key, _opt=opt, _original=original, **k):
                seen[_key] = [p.grad.detach().clone() for g in _opt.param_groups for p in g["params"]
                              if p.grad is not None]
                return _original(*a, **k)

            opt.step = step
        try:
            t.train_step()
        finally:
            t.close()
        return seen["critic"], seen["policy"]

    (c1, p1), (c2, p2) = run(3, "small"), run(10_000, "big")
    assert len(c1) == len(c2) > 0 and any(float(g.abs().sum()) > 0 for g in c1)
    for a, b in zip(c1 + p1, c2 + p2):
        assert torch.allclose(a.to_dense(), b.to_dense(), atol=1e-6, rtol=1e-5)
