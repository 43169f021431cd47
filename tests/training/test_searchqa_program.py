"""The SearchQA ``openai``-loop program (issue 51 item 4): a plain SDK loop that plays SearchQA through tools,
with the env as its tool server, trained by the Trainer through the policy gateway.

* its loop, driven by a scripted client returning the ``openai`` package's own response types: a search
  call gets the env's passages back as a ``tool`` message, the answer call ends it with the env's EM;
* with the tiny model through the gateway: whole episodes (the env's turn limit ends them), one step per call;
* the Trainer trains it with GRPO next to the same questions played as the SearchQA env (tools protocol),
  the same seeds and estimator: both run, and the program's rollouts have the env's turn structure.
"""

from __future__ import annotations

import asyncio
import json
import math

import gymnasium as gym
import pytest
from openai.types.chat import ChatCompletion

import stratagym  # noqa: F401
from stratagym.errors import ConfigError
from stratagym.training.config import RecipeConfig
from stratagym.training.programs.searchqa import searchqa_program
from stratagym.training.trainer import Trainer

PROGRAM_ID = "program:stratagym.training.programs.searchqa:searchqa_program"


def _reply(content=None, call=None) -> ChatCompletion:
    message = {"role": "assistant", "content": content}
    if call is not None:
        name, args = call
        message["tool_calls"] = [{"id": "call_1", "type": "function",
                                  "function": {"name": name, "arguments": json.dumps(args)}}]
    return ChatCompletion.model_validate({
        "id": "x", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "finish_reason": "tool_calls" if call else "stop", "message": message}]})


class ScriptedClient:
    """Returns the given replies in order and keeps every request (what the program sent)."""

    def __init__(self, replies):
        self.replies, self.requests = list(replies), []
        self.chat = self
        self.completions = self

    async def create(self, **request):
        self.requests.append(request)
        return self.replies.pop(0)


def test_the_loop_runs_tool_calls_through_the_env_and_is_rewarded_by_its_exact_match():
    program = searchqa_program(tasks=3)
    assert program.search_tools == {"search"}  # search_count as the env counts it: the answer call is no search
    env = gym.make("stratagym/SearchQA-v0", protocol="tools").unwrapped
    example = env._by_id[program.task_ids()[0]]
    gold = example.golden_answers[0]

    client = ScriptedClient([_reply("I will search.", ("search", {"query": example.question})),
                             _reply(None, ("answer", {"text": gold}))])
    reward = asyncio.run(program.agent(client, program.task(program.task_ids()[0])))
    assert reward == 1.0
    first, second = client.requests
    assert first["messages"][0]["role"] == "user" and example.question in first["messages"][0]["content"]
    assert {t["function"]["name"] for t in first["tools"]} == {"search", "answer"}
    # the search's passages come back as the tool message answering the call, as the env shows them
    assistant, tool = second["messages"][1:]
    assert assistant["tool_calls"][0]["function"]["name"] == "search" and assistant["content"] == "I will search."
    env.reset(options={"task_id": example.id})
    passages, *_ = env.step('<tool_call>{"name": "search", "arguments": {"query": %s}}</tool_call>' % json.dumps(example.question))
    assert tool == {"role": "tool", "tool_call_id": "call_1", "content": passages}

    wrong = ScriptedClient([_reply(None, ("answer", {"text": "certainly not " + gold}))])
    assert asyncio.run(program.agent(wrong, program.task(program.task_ids()[0]))) == 0.0
    # a reply without a call is an invalid turn the env answers; the loop goes on until the env's turn limit
    chatty = ScriptedClient([_reply("hmm")] * 5)
    assert asyncio.run(program.agent(chatty, program.task(program.task_ids()[1]))) == 0.0
    assert len(chatty.requests) == 5 and chatty.requests[-1]["messages"][-1]["role"] == "user"


def _recipe(out, env: dict) -> dict:
    return {
        "name": "program-vs-env", "policy": {"model": "tiny", "max_new_tokens": 8},
        "env": env, "rollout": {"group_size": 2, "tasks_per_step": 2, "max_turns": 8},
        "algorithm": {"estimator": "grpo"}, "optim": {"lr": 1.0e-2},
        "train": {"total_steps": 1, "seed": 0, "output_dir": str(out), "save_every": 0, "progress": False,
                  "tensorboard": False},
    }


def test_the_trainer_trains_the_program_beside_the_same_agent_as_the_env(tmp_path):
    program_run = Trainer(RecipeConfig.from_dict(_recipe(tmp_path / "program", {
        "id": PROGRAM_ID, "kwargs": {"tasks": 8, "max_turns": 1, "timeout_s": 120}})))
    env_run = Trainer(RecipeConfig.from_dict(_recipe(tmp_path / "env", {
        "id": "stratagym/SearchQA-v0", "kwargs": {"protocol": "tools", "max_turns": 1}, "tasks": "0:8"})))
    try:
        assert program_run.collector.task_ids() == list(env_run.collector.task_ids()[:8])
        (p,), (e,) = program_run.train(), env_run.train()
    finally:
        program_run.close()
        env_run.close()
    # the same draw of questions (same seed, same pool), the same episode bounds: max_turns 1 = 2 model turns
    assert p["rollout/episodes"] == e["rollout/episodes"] == 4 and p["rollout/failed"] == 0
    assert 1 <= p["rollout/turns"] <= 2 and 1 <= e["rollout/turns"] <= 2
    assert math.isfinite(p["loss/loss"]) and math.isfinite(e["loss/loss"])
    assert program_run.provenance()[-1]["task_ids"] == env_run.provenance()[-1]["task_ids"]


def test_an_evaluation_split_is_refused_for_training(tmp_path):
    with pytest.raises(ConfigError, match="evaluation split"):
        Trainer(RecipeConfig.from_dict(_recipe(tmp_path, {"id": PROGRAM_ID, "kwargs": {"split": "test", "tasks": 4}})))


AGENTS_ID = "program:stratagym.training.programs.searchqa_agents:searchqa_agents_program"


def test_the_agents_sdk_program_searches_through_the_env_and_is_rewarded():
    """The OpenAI Agents SDK's Agent + Runner, scripted replies in the openai types: the SDK writes its own
    system prompt and tool schema, runs our search tool (the env's passages), and its final output is the answer."""
    from stratagym.training.programs.searchqa_agents import INSTRUCTIONS, searchqa_agents_program

    program = searchqa_agents_program(tasks=2)
    assert program.search_tools == {"search"}
    env = gym.make("stratagym/SearchQA-v0", protocol="tools").unwrapped
    example = env.example(program.task_ids()[0])
    client = ScriptedClient([_reply(None, ("search", {"query": example.question})), _reply(example.golden_answers[0])])
    client.base_url = "http://127.0.0.1/v1"
    assert asyncio.run(program.agent(client, program.task(example.id))) == 1.0
    first, second = client.requests
    assert first["messages"][:2] == [{"role": "system", "content": INSTRUCTIONS},
                                     {"role": "user", "content": example.question}]
    assert [t["function"]["name"] for t in first["tools"]] == ["search"]
    env.reset(options={"task_id": example.id})
    passages, *_ = env.step('<tool_call>{"name": "search", "arguments": {"query": %s}}</tool_call>' % json.dumps(example.question))
    assert second["messages"][-1]["role"] == "tool" and second["messages"][-1]["content"] == passages
    wrong = ScriptedClient([_reply("no idea")])
    wrong.base_url = client.base_url
    assert asyncio.run(program.agent(wrong, program.task(example.id))) == 0.0


def test_the_trainer_trains_the_model_behind_the_agents_sdk(tmp_path):
    from stratagym.training.programs.searchqa_agents import INSTRUCTIONS

    trainer = Trainer(RecipeConfig.from_dict(_recipe(tmp_path, {"id": AGENTS_ID, "kwargs": {"tasks": 4, "max_turns": 1}})))
    try:
        batch = trainer.rollout()
        (row,) = trainer.train()
    finally:
        trainer.close()
    episodes = batch.ok
    assert len(episodes) == 4 and row["rollout/failed"] == 0 and math.isfinite(row["loss/loss"])
    # what the gateway recorded is the framework's own request: its system prompt, then the question
    first = json.loads(episodes[0].steps[0].observation)
    assert first[0] == {"role": "system", "content": INSTRUCTIONS} and first[1]["role"] == "user"
