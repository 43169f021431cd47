"""SearchQA through tools, written as a plain ``openai`` SDK loop (issue 51 item 4).

The program is what a user with an agent loop has: it sends the question with the ``search`` and ``answer``
tools, runs each tool call the model makes, sends the result back as a ``tool`` message, and stops at the
answer or when the turns run out. Its tool server is a SearchQA env (``protocol="tools"``), so a search
returns exactly the passages the env would, and the reward is the env's exact match: the same agent written
as the SearchQA env, which makes the two comparable question by question (docs/gateway.md, "Agent programs").

What differs from the env-driven policy is only what a program controls: its messages (the question as the
first user message, no memory window: every turn is kept) and its request parameters.

``env.id: program:stratagym.training.programs.searchqa:searchqa_program`` with ``env.kwargs`` the SearchQA
kwargs (``split``, ``data_path``, ``retriever``, ``max_turns``...) plus ``tasks`` (the first N questions),
``timeout_s``, ``temperature`` and ``max_tokens``.
"""

from __future__ import annotations

from typing import Any, Optional

from stratagym.agents.tool_messages import hermes_calls
from stratagym.envs.search_qa.tools import TOOLS
from stratagym.training.rollout.program import AgentProgram

__all__ = ["ENV_ID", "EnvPool", "searchqa_program"]

ENV_ID = "stratagym/SearchQA-v0"


class EnvPool:
    """SearchQA envs for concurrent copies: a copy takes a free env (one is made when none is free) and
    gives it back; the copies share one event loop, so no lock is needed."""

    def __init__(self, env_kwargs: dict[str, Any]):
        self.env_kwargs = env_kwargs
        self.free: list[Any] = []

    def make(self) -> Any:
        import gymnasium as gym

        import stratagym  # noqa: F401  (registers the envs)

        return gym.make(ENV_ID, **self.env_kwargs).unwrapped

    def take(self) -> Any:
        return self.free.pop() if self.free else self.make()

    def give(self, env: Any) -> None:
        self.free.append(env)


def searchqa_program(*, tasks: Optional[int] = None, timeout_s: float = 300.0, temperature: float = 1.0,
                     max_tokens: Optional[int] = None, context_k: int = 4, **env_kwargs: Any) -> AgentProgram:
    """The SearchQA ``openai``-loop program over the questions of ``env_kwargs``' split (the first ``tasks``)."""
    env_kwargs = {**env_kwargs, "protocol": "tools"}
    pool = EnvPool(env_kwargs)
    probe = pool.take()
    ids = list(probe.task_ids())[: tasks if tasks is not None else None]
    schemas = TOOLS.schemas()
    pool.give(probe)

    async def agent(client: Any, task: dict[str, Any]) -> float:
        env = pool.take()
        try:
            observation, _info = env.reset(options={"task_id": task["id"]})
            messages: list[dict[str, Any]] = [{"role": "user", "content": observation}]
            total = 0.0
            while True:
                reply = await client.chat.completions.create(
                    model="policy", messages=messages, tools=schemas, temperature=temperature,
                    **({"max_tokens": max_tokens} if max_tokens else {}))
                message = reply.choices[0].message
                calls = [c.model_dump() for c in (message.tool_calls or [])]
                # the env reads the turn as the model wrote it: its text, then its calls as <tool_call> blocks
                action = "\n".join(p for p in (message.content or "", hermes_calls(calls)) if p)
                observation, reward, terminated, truncated, _info = env.step(action)
                total += float(reward)
                if terminated or truncated:
                    return total
                messages.append({"role": "assistant", "content": message.content, "tool_calls": calls or None})
                if calls:
                    messages.append({"role": "tool", "tool_call_id": calls[0]["id"], "content": observation})
                else:  # no call: the env's answer (how to call a tool) comes back as the user's turn
                    messages.append({"role": "user", "content": observation})
        finally:
            pool.give(env)

    return AgentProgram(agent=agent, tasks=[{"id": str(i)} for i in ids], timeout_s=timeout_s, context_k=context_k,
                        search_tools=frozenset({"search"}))  # the env's search_count: searches, not the answer
