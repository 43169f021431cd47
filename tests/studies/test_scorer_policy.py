"""The scorer policy keeps the Policy protocol: uniform start, consistent log-probs, gradients, save/load."""

from __future__ import annotations

import math

import gymnasium as gym
import pytest
import torch

import stratagym  # noqa: F401
from tests.helpers import play_records
from stratagym.agents.policy import GenerationRequest, Policy, Turn
from stratagym.agents.scorer import ScorerPolicy


def _requests(env_id="stratagym/SearchStrata-v0", n=4):
    env = gym.make(env_id)
    out = []
    for i in range(n):
        obs, info = env.reset(seed=i)
        out.append(GenerationRequest(obs, info, (Turn("earlier obs", "earlier act"),) * i, env_id))
    return out


def test_protocol_and_uniform_start():
    policy = ScorerPolicy(seed=0)
    assert isinstance(policy, Policy)
    reqs = _requests()
    gens = policy.generate(reqs)
    for req, gen in zip(reqs, gens):
        assert gen.action in req.info["admissible_actions"]
        assert gen.payload.logprob == pytest.approx(-math.log(len(req.info["admissible_actions"])))
    slp = policy.sequence_log_probs([g.payload for g in gens], with_entropy=True)
    assert slp.logprobs.shape == (4, 1) and slp.mask.all()
    torch.testing.assert_close(slp.logprobs, slp.sampling_logprobs)
    n = torch.tensor([[len(r.info["admissible_actions"])] for r in reqs], dtype=torch.float32)
    torch.testing.assert_close(slp.entropy, n.log())


def test_gradients_move_the_chosen_action():
    policy = ScorerPolicy(seed=0)
    reqs = _requests(n=2)
    gens = policy.generate(reqs, greedy=True)
    opt = torch.optim.Adam(policy.parameters(), lr=0.05)
    before = policy.sequence_log_probs([g.payload for g in gens]).logprobs.detach()
    for _ in range(20):
        opt.zero_grad()
        (-policy.sequence_log_probs([g.payload for g in gens]).logprobs.sum()).backward()
        opt.step()
    after = policy.sequence_log_probs([g.payload for g in gens]).logprobs.detach()
    assert (after > before + 0.5).all()
    # greedy now picks that action again
    assert [g.action for g in policy.generate(reqs, greedy=True)] == [g.action for g in gens]


def test_save_load_and_frozen_copy(tmp_path):
    policy = ScorerPolicy(seed=3, hidden=16, memory=2)
    with torch.no_grad():
        policy.model.out.normal_()
    reqs = _requests(n=3)
    payloads = [g.payload for g in policy.generate(reqs)]
    ref = policy.sequence_log_probs(payloads).logprobs
    policy.save_pretrained(str(tmp_path / "ckpt"))
    loaded = ScorerPolicy.from_pretrained(str(tmp_path / "ckpt"))
    assert loaded.config == policy.config
    torch.testing.assert_close(loaded.sequence_log_probs(payloads).logprobs, ref)
    frozen = policy.frozen_copy()
    assert not any(p.requires_grad for p in frozen.parameters())
    with torch.no_grad():
        policy.model.out.add_(1.0)
    torch.testing.assert_close(frozen.sequence_log_probs(payloads).logprobs, ref)


def test_memory_sees_the_cue():
    """With memory >= cue distance the fork contexts differ by cue; memoryless they are identical."""
    env = gym.make("stratagym/CueCorridor-v0").unwrapped
    contexts = {}
    for memory in (0, 2):
        policy = ScorerPolicy(seed=0, memory=memory)
        feats = []
        for lever in "AB":
            obs, info = env.reset(seed=0, options={"task_index": 0})  # same seed: levers light different cues
            hist = []
            for act in (f"pull lever {lever}", "walk forward", "walk forward"):
                hist.append(Turn(obs, act))
                obs, _, _, _, info = env.step(act)
            feats.append(policy.generate([GenerationRequest(obs, info, tuple(hist))])[0].payload.context)
        contexts[memory] = sorted(feats[0].tolist()) == sorted(feats[1].tolist())
    assert contexts == {0: True, 2: False}


def test_needs_admissible_actions():
    with pytest.raises(ValueError, match="admissible_actions"):
        ScorerPolicy().generate([GenerationRequest("obs", {"task_id": "x"})])


def test_plays_through_the_rollout_loop():
    envs = [gym.make("stratagym/DifficultyMix-v0") for _ in range(4)]
    recs = play_records(envs, ScorerPolicy(seed=0), [(i, i) for i in range(16)], greedy=False)
    assert len(recs) == 16 and all(r.valid_ratio == 1.0 for r in recs)


def test_from_config_through_the_trainer_builder():
    from stratagym.training.trainer import build_policy
    from stratagym.errors import ConfigError

    policy = build_policy({"class": "stratagym.agents.scorer:ScorerPolicy", "hidden": 8, "memory": 1, "seed": 5})
    assert isinstance(policy, ScorerPolicy) and policy.config.hidden == 8 and policy.config.memory == 1
    same = ScorerPolicy(seed=5, hidden=8, memory=1)
    for a, b in zip(policy.parameters(), same.parameters()):
        torch.testing.assert_close(a, b)  # the init depends on the seed only
    with pytest.raises(ConfigError, match="unknown ScorerPolicy option"):
        build_policy({"class": "stratagym.agents.scorer:ScorerPolicy", "hiden": 8})


def test_sampling_copy_leaves_the_global_stream_alone():
    policy = ScorerPolicy(seed=0)
    reqs = _requests(n=4)
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    policy.sampling_copy(7).generate(reqs)
    torch.testing.assert_close(torch.rand(3), expected)


def test_placeholder_actions_are_filled_with_the_task():
    from stratagym.agents.scorer import fill_placeholders

    obs = "WebShop [SEP] Instruction: [SEP] i need a teal throw pillow under 70 dollars [SEP] Search"
    assert fill_placeholders("search[<your query>]", obs) == "search[i need a teal throw pillow under 70 dollars]"
    assert fill_placeholders("click[buy now]", obs) == "click[buy now]"
    assert fill_placeholders("search[<q>]", "Find  the red\nkey") == "search[Find the red key]"
    gen = ScorerPolicy().generate([GenerationRequest(obs, {"admissible_actions": ["search[<your query>]"]})])[0]
    assert gen.action == "search[i need a teal throw pillow under 70 dollars]"


def test_the_old_class_string_of_committed_records_still_builds_the_scorer():
    """The committed study and leaderboard records name ``stratagym.studies.policy:ScorerPolicy`` (their
    ids hash their content, so they are not rewritten); that string must keep building the one scorer."""
    import json
    from pathlib import Path

    from stratagym.training.trainer import build_policy

    root = Path(__file__).resolve().parents[2]
    specs = []
    for path in sorted(root.glob("studies/*/records/*.json")):
        spec = json.loads(path.read_text())["training"]["policy"]
        specs.append(spec)
        assert spec["class"] in ("stratagym.studies.policy:ScorerPolicy", "stratagym.agents.scorer:ScorerPolicy"), path
    assert len(specs) >= 20  # 7 studies x 3-5 methods are committed
    old = build_policy({**specs[0], "seed": 3})
    new = build_policy({**specs[0], "class": "stratagym.agents.scorer:ScorerPolicy", "seed": 3})
    assert type(old) is ScorerPolicy and type(new) is ScorerPolicy
    for a, b in zip(old.parameters(), new.parameters()):
        torch.testing.assert_close(a, b)
