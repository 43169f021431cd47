"""Agent programs for tests/training/test_program_source.py: plain ``openai``-client loops, as a user writes them."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from stratagym.envs.hashing import stable_hash
from stratagym.training.rollout.program import AgentProgram

TASKS = [{"id": "ask-a", "prompt": "Say a word with the letter a."},
         {"id": "ask-b", "prompt": "Say a word with the letter b."}]


async def two_turns(client: Any, task: dict[str, Any]) -> float:
    """Asks, sends the reply back with a follow-up, and is rewarded by its second reply's text."""
    messages = [{"role": "user", "content": task["prompt"]}]
    first = await client.chat.completions.create(model="policy", messages=messages, max_tokens=6)
    messages += [{"role": "assistant", "content": first.choices[0].message.content or ""},
                 {"role": "user", "content": "Another one."}]
    second = await client.chat.completions.create(model="policy", messages=messages, max_tokens=6)
    return text_reward(second.choices[0].message.content or "")


def text_reward(text: str) -> float:
    """A reward in [0, 1) that differs between almost any two texts, so a group of sampled copies almost never
    ties (a tied group has zero advantage, and a 2-step test run could then leave the weights where they were)."""
    return (stable_hash(text) % 997) / 997


def make_program(timeout_s: float = 60.0) -> AgentProgram:
    return AgentProgram(agent=two_turns, tasks=TASKS, timeout_s=timeout_s)


_JITTER = random.SystemRandom()  # not seeded: every run's arrival order is its own


async def jittery(client: Any, task: dict[str, Any]) -> float:
    """``two_turns`` with an unseeded random pause before each call (as tool latency varies), so the copies'
    requests reach the gateway in another order, and share other batches, in every run."""
    messages = [{"role": "user", "content": task["prompt"]}]
    for turn in range(2):
        await asyncio.sleep(_JITTER.uniform(0.0, 0.05))
        reply = await client.chat.completions.create(model="policy", messages=messages, max_tokens=6)
        text = reply.choices[0].message.content or ""
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "Another one."}]
    return text_reward(text)


async def faulty(client: Any, task: dict[str, Any]) -> float:
    """One program, four behaviours by task: answers once, raises, hangs, or never calls the model."""
    kind = task["kind"]
    if kind == "raise":
        raise ValueError("the tool server is down")
    if kind == "hang":
        await asyncio.sleep(3600)
    if kind == "silent":
        return 1.0
    await client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    return "yes" if kind == "text" else 1.0


FAULT_TASKS = [{"id": k, "kind": k} for k in ("ok", "raise", "hang", "silent", "text")]


async def rewriter(client: Any, task: dict[str, Any]) -> float:
    """Sends its earlier reply back rewritten (as programs that strip or reformat replies do)."""
    messages = [{"role": "user", "content": task["prompt"]}]
    await client.chat.completions.create(model="policy", messages=messages, max_tokens=4)
    messages += [{"role": "assistant", "content": "EDITED REPLY"}, {"role": "user", "content": "Again."}]
    await client.chat.completions.create(model="policy", messages=messages, max_tokens=4)
    return 1.0


def make_rewriter() -> AgentProgram:
    return AgentProgram(agent=rewriter, tasks=TASKS, timeout_s=60.0)


#: called by ``stops_gateway`` once it has a reply (a test points it at the gateway's stop)
ON_FIRST_REPLY: list[Any] = []


async def stops_gateway(client: Any, task: dict[str, Any]) -> float:
    await client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    if ON_FIRST_REPLY:
        ON_FIRST_REPLY.pop()()
    await asyncio.sleep(1.0)
    await client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "again"}], max_tokens=2)
    return 1.0
