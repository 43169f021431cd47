"""stratagym envs as TRL ``environment_factory`` classes (issue 30 item 3, without the GRPOTrainer run):
every member of a GRPO group, reset with the dataset row's ``task_id`` and ``seed``, starts from the same
observation; the tools TRL would discover have valid function-calling schemas; each tool call is the
env's own step, and ``get_reward`` is the env's reward."""

from __future__ import annotations

import inspect

import gymnasium as gym
import pytest
from transformers.utils import get_json_schema

import stratagym  # noqa: F401
from stratagym.interop.trl.alfworld import ALFWorldTRLEnv
from stratagym.interop.trl.search_qa import SearchQATRLEnv
from stratagym.interop.trl.tools import EPISODE_OVER
from stratagym.interop.trl.webshop import WebShopTRLEnv

CLASSES = {SearchQATRLEnv: {"search", "answer"}, WebShopTRLEnv: {"act"}, ALFWorldTRLEnv: {"act"}}


def _tools(instance):
    """What TRL's GRPOTrainer exposes: public functions on the class other than reset and get_reward."""
    return {name: getattr(instance, name) for name, _ in inspect.getmembers(type(instance), predicate=inspect.isfunction)
            if not name.startswith("_") and name not in ("reset", "get_reward")}


@pytest.mark.parametrize("cls", list(CLASSES), ids=lambda c: c.__name__)
def test_group_members_start_from_the_same_observation_and_tools_have_schemas(cls):
    group = [cls() for _ in range(4)]
    try:
        task_id = group[0]._env.unwrapped.task_ids()[2]
        row = {"task_id": task_id, "seed": 3, "prompt": [{"role": "user", "content": "go"}]}
        firsts = {member.reset(**row) for member in group}
        assert len(firsts) == 1
        reference = gym.make(cls.env_id)
        assert firsts.pop() == reference.reset(seed=3, options={"task_id": task_id})[0]
        reference.close()
        assert group[0].last_info["task_id"] == task_id and group[0].last_info["step"] == 0
        tools = _tools(group[0])
        assert set(tools) == CLASSES[cls]
        for name, method in tools.items():
            schema = get_json_schema(method)
            params = schema["function"]["parameters"]
            assert schema["function"]["name"] == name and schema["function"]["description"]
            assert params["required"] == list(params["properties"]) and len(params["properties"]) == 1
            assert all(p["type"] == "string" and p["description"] for p in params["properties"].values())
    finally:
        for member in group:
            member._close()


def test_searchqa_tools_are_the_envs_own_steps_and_the_reward_is_the_envs():
    tool_env, env = SearchQATRLEnv(), gym.make("stratagym/SearchQA-v0")
    try:
        task_id = env.unwrapped.task_ids()[0]
        assert tool_env.reset(task_id=task_id, seed=0) == env.reset(seed=0, options={"task_id": task_id})[0]
        assert tool_env.search("capital city") == env.step("<search> capital city </search>")[0]
        answer = env.unwrapped.example(task_id).golden_answers[0]
        obs, reward, term, trunc, info = env.step(f"<answer> {answer} </answer>")
        assert tool_env.answer(answer) == obs and term and reward == 1.0
        assert tool_env.get_reward() == reward and tool_env.last_info["state_hash"] == info["state_hash"]
        assert tool_env.search("more") == EPISODE_OVER and tool_env.get_reward() == reward
    finally:
        tool_env._close()
        env.close()


def test_webshop_act_is_the_envs_step_and_a_purchase_scores():
    tool_env, env = WebShopTRLEnv(), gym.make("stratagym/WebShop-v0")
    try:
        assert tool_env.reset(task_id="webshop-0", seed=0) == env.reset(seed=0, options={"task_id": "webshop-0"})[0]
        for command in ["search[shampoo]", "click[next >]", "click[< prev]"]:
            assert tool_env.act(command) == env.step(command)[0]
        assert tool_env.get_reward() == 0.0 and tool_env.last_info["search_count"] == 1
    finally:
        tool_env._close()
        env.close()
