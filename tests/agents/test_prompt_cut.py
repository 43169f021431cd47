"""A prompt longer than the model allows is cut by one documented rule (LLMPolicy.fit_prompt: the oldest
remembered turns first, then the prompt's first tokens), the cut is recorded on the step and counted in the
eval's metrics, and nothing crashes (issue 48, "Bad input and hygiene")."""

from __future__ import annotations

import gymnasium as gym
import pytest

import stratagym  # noqa: F401  (registers the envs)
from stratagym.agents.llm import LLMConfig, LLMPolicy
from stratagym.agents.policy import GenerationRequest, Turn
from stratagym.agents.tiny_lm import tiny_lm_path
from stratagym.eval.aggregate import aggregate
from stratagym.eval.episodes import EpisodeRecord
from tests.helpers import play_records

ENV = "stratagym/ALFWorld-v0"
ACTIONS = {"admissible_actions": ["look", "go to desk 1"], "step": 3, "task_id": "t0"}


def _policy(limit: int, memory_k: int = 3) -> LLMPolicy:
    path = tiny_lm_path()
    return LLMPolicy.from_pretrained(path, config=LLMConfig(model=str(path), max_new_tokens=8, memory_k=memory_k,
                                                            max_prompt_tokens=limit))


def _request(turns: int) -> GenerationRequest:
    history = tuple(Turn(f"observation {i} " + "word " * 30, f"act{i}") for i in range(turns))
    return GenerationRequest("the current page", ACTIONS, history, ENV)


def _length(policy: LLMPolicy, request: GenerationRequest, keep: int) -> int:
    messages = policy.template_for(request).build(request.observation, request.info, request.history, keep)
    return len(policy.prompt_ids([policy.render(messages)])[0]) if keep >= 0 else 0


def test_the_oldest_remembered_turns_go_first_and_the_cut_is_counted():
    big = _policy(100_000)
    req = _request(3)
    sizes = [_length(big, req, k) for k in range(4)]  # remembered turns 0..3
    assert sizes == sorted(sizes) and len(set(sizes)) == 4
    # a limit between "1 turn" and "2 turns": two of the three remembered turns are dropped, the newest kept
    policy = _policy(sizes[1] + 1)
    ids, cut = policy.fit_prompt(req)
    assert cut == {"turns": 2, "tokens": 0} and len(ids) == sizes[1]
    text = policy.tokenizer.decode(ids)
    assert "act2" in text and "act1" not in text and "act0" not in text and "'go to desk 1'" in text
    # below even the bare prompt: all turns dropped, then the prompt's last tokens kept (its end survives)
    tight = _policy(sizes[0] - 5)
    ids, cut = tight.fit_prompt(req)
    assert cut == {"turns": 3, "tokens": 5} and len(ids) == sizes[0] - 5
    bare = big.prompt_ids([big.render(big.template_for(req).build(req.observation, req.info, req.history, 0))])[0]
    assert ids == bare[5:]
    # a prompt that fits is not cut, and generate says nothing of a cut
    assert big.fit_prompt(req)[1] == {"turns": 0, "tokens": 0}
    assert "prompt_cut" not in big.generate([req], greedy=True)[0].extra
    assert policy.generate([req], greedy=True)[0].extra["prompt_cut"] == {"turns": 2, "tokens": 0}


def test_the_limit_also_holds_within_the_models_context():
    policy = _policy(100_000)
    context = policy.model.config.max_position_embeddings
    assert policy.prompt_limit == context - policy.config.max_new_tokens


def test_an_episode_whose_prompts_outgrow_the_limit_plays_on_and_the_eval_counts_the_cut_turns():
    envs = [gym.make("stratagym/CueCorridor-v0")]
    policy = _policy(100_000, memory_k=4)
    free = play_records(envs, policy, [(0, 0)])[0]
    assert free.prompt_cuts == 0
    limit = _length(policy, GenerationRequest("x", {}, (), "stratagym/CueCorridor-v0"), 0) + 40
    cut = play_records(envs, _policy(limit, memory_k=4), [(0, 0), (1, 1)])
    assert all(r.turns >= 2 for r in cut)
    assert 0 < sum(r.prompt_cuts for r in cut) <= sum(r.turns for r in cut)
    m = aggregate(cut, env_id="stratagym/CueCorridor-v0").metrics
    assert m["prompt_cuts"].value == pytest.approx(sum(r.prompt_cuts for r in cut) / 2)
    # records of policies that never cut (and older records without the field) have no such metric
    assert "prompt_cuts" not in aggregate([free], env_id="stratagym/CueCorridor-v0").metrics
    old = {k: v for k, v in free.to_dict().items() if k != "prompt_cuts"}
    assert "prompt_cuts" not in aggregate([old], env_id="stratagym/CueCorridor-v0").metrics
    assert isinstance(free, EpisodeRecord)
