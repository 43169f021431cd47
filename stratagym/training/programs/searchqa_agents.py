"""SearchQA played by an agent written with the OpenAI Agents SDK (``openai-agents``; issue 51 item 4).

The agent is the SDK's own ``Agent`` with one ``@function_tool`` (``search``), run by the SDK's ``Runner``
against the policy gateway through ``OpenAIChatCompletionsModel``: the framework writes its own system
prompt, tool schemas and message history, and stratagym trains the model behind it from what the gateway
recorded. Its tool server is a SearchQA env (``protocol="tools"``), so a search returns the env's passages,
and the SDK's final output is sent to the env as the answer, whose exact match is the reward.

Installed by ``make setup`` (the ``agents`` extra, main environment only). Tracing is off: the SDK would
otherwise export traces to OpenAI's servers.

``env.id: program:stratagym.training.programs.searchqa_agents:searchqa_agents_program``; ``env.kwargs``:
the SearchQA kwargs plus ``tasks``, ``timeout_s``, ``temperature`` and ``max_tokens``.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from stratagym.errors import ConfigError
from stratagym.training.programs.searchqa import EnvPool
from stratagym.training.rollout.program import AgentProgram

__all__ = ["INSTRUCTIONS", "searchqa_agents_program"]

INSTRUCTIONS = ("Answer the user's question. Call the search tool to look things up in the knowledge base, as "
                "often as you need. When you know the answer, reply with the answer alone, as short as possible.")


def searchqa_agents_program(*, tasks: Optional[int] = None, timeout_s: float = 300.0, temperature: float = 1.0,
                            max_tokens: Optional[int] = None, context_k: int = 4, **env_kwargs: Any) -> AgentProgram:
    """The Agents-SDK SearchQA program over the questions of ``env_kwargs``' split (the first ``tasks``)."""
    try:
        from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, RunConfig, Runner, function_tool
        from agents.exceptions import MaxTurnsExceeded
    except ImportError as exc:
        raise ConfigError("this program is written with the OpenAI Agents SDK: pip install 'stratagym[agents]'") from exc
    pool = EnvPool({**env_kwargs, "protocol": "tools"})
    probe = pool.take()
    ids = list(probe.task_ids())[: tasks if tasks is not None else None]
    turns = int(probe.max_turns) + 1  # the env's model turns: its search rounds and the final one
    pool.give(probe)
    settings = ModelSettings(temperature=temperature, **({"max_tokens": max_tokens} if max_tokens else {}))

    async def agent(client: Any, task: dict[str, Any]) -> float:
        env = pool.take()
        state = {"done": False, "reward": 0.0}

        def step(name: str, arguments: dict[str, Any]) -> str:
            call = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
            observation, reward, terminated, truncated, _info = env.step(f"<tool_call>{call}</tool_call>")
            state["reward"] += float(reward)
            state["done"] = bool(terminated or truncated)
            return observation

        @function_tool
        async def search(query: str) -> str:
            """Search the knowledge base and return the top passages.

            Args:
                query: What to look for, in a few words.
            """
            return "The episode is over." if state["done"] else step("search", {"query": query})

        try:
            env.reset(options={"task_id": task["id"]})
            question = env.example(task["id"]).question  # the framework writes its own prompt around it
            searcher = Agent(name="searcher", instructions=INSTRUCTIONS, tools=[search], model_settings=settings,
                             model=OpenAIChatCompletionsModel(model="policy", openai_client=client))
            try:
                result = await Runner.run(searcher, question, max_turns=turns,
                                          run_config=RunConfig(tracing_disabled=True))
            except MaxTurnsExceeded:  # the agent kept searching: the env's episode ran out, reward as it stands
                return state["reward"]
            if not state["done"]:
                step("answer", {"text": str(result.final_output or "")})
            return state["reward"]
        finally:
            pool.give(env)

    return AgentProgram(agent=agent, tasks=[{"id": str(i)} for i in ids], timeout_s=timeout_s, context_k=context_k,
                        search_tools=frozenset({"search"}))
