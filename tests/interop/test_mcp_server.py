"""An env's tools as a real MCP server (fastmcp, streamable HTTP on 127.0.0.1), driven by a real MCP client
(``fastmcp.Client``): the listed tools carry the env's JSON Schemas, an episode played through MCP is the
episode the env plays for the same calls, bad arguments are invalid turns, and misuse is a named error."""

from __future__ import annotations

import asyncio

import fastmcp
import gymnasium as gym
import pytest

import stratagym  # noqa: F401  (registers the envs)
from stratagym.interop.mcp.server import RESET_SCHEMA, create_mcp_server, serve_mcp_in_thread
from stratagym.envs.tools import format_call
from stratagym.envs.registry import tool_set_for
from stratagym.errors import ConfigError

QA = "stratagym/SearchQA-v0"
KW = {"split": "test"}
STRUCTURE = ("task_id", "step", "action_valid", "tool_calls", "search_count", "state_hash", "context_hashes", "won",
             "invalid_reason")


@pytest.fixture(scope="module")
def qa_server():
    srv = serve_mcp_in_thread(create_mcp_server(QA, KW))
    yield srv
    srv.stop()


def _session(url, script):
    """Run ``script(client)`` inside one MCP client session and return what it returns."""
    async def main():
        async with fastmcp.Client(url) as client:
            return await script(client)
    return asyncio.run(main())


@pytest.mark.parametrize("env_id, kwargs", [(QA, KW), ("stratagym/CueCorridor-v0", {})])
def test_the_listed_tools_are_the_envs_with_its_schemas(env_id, kwargs):
    srv = serve_mcp_in_thread(create_mcp_server(env_id, kwargs))
    try:
        assert srv.url.startswith("http://127.0.0.1:") and srv.url.endswith("/mcp")  # loopback by default
        tools = _session(srv.url, lambda c: c.list_tools())
    finally:
        srv.stop()
    listed = {t.name: t for t in tools}
    schemas = tool_set_for(env_id).schemas()
    assert list(listed) == ["reset"] + [s["function"]["name"] for s in schemas]
    assert listed["reset"].input_schema == RESET_SCHEMA
    for s in schemas:
        fn = s["function"]
        assert listed[fn["name"]].input_schema == fn["parameters"]
        assert listed[fn["name"]].description == fn["description"]


def test_an_episode_over_mcp_is_the_envs_episode(qa_server):
    env = gym.make(QA, protocol="tools", **KW)
    obs0, info0 = env.reset(seed=3, options={"task_index": 2})
    ex = env.unwrapped.example(info0["task_id"])
    calls = [("search", {"query": 7}), ("search", {"query": ex.question}), ("answer", {"text": ex.golden_answers[0]})]
    local = [env.step(format_call(n, a)) for n, a in calls]
    env.close()

    async def play(client):
        first = await client.call_tool("reset", {"seed": 3, "task_id": info0["task_id"]})
        steps = [await client.call_tool(n, a) for n, a in calls]
        after = await client.call_tool("search", {"query": "x"}, raise_on_error=False)
        return first, steps, after

    first, steps, after = _session(qa_server.url, play)
    assert first.content[0].text == obs0 and first.structured_content["info"]["task_id"] == info0["task_id"]
    for got, (obs, reward, term, trunc, info) in zip(steps, local):
        assert got.content[0].text == obs and not got.is_error
        sc = got.structured_content
        assert (sc["reward"], sc["terminated"], sc["truncated"]) == (reward, term, trunc)
        assert {k: sc["info"].get(k) for k in STRUCTURE} == {k: info.get(k) for k in STRUCTURE}
        assert "tool_schemas" not in sc["info"]
    # the mistyped argument was an invalid turn (not an MCP error), named as the env names it
    bad = steps[0].structured_content["info"]
    assert not bad["action_valid"] and bad["invalid_reason"] == "the argument 'query' of search must be a JSON string, got integer"
    assert steps[2].structured_content["reward"] == 1.0 and steps[2].structured_content["terminated"]
    assert after.is_error and after.content[0].text.startswith("no episode is running: call reset first")


def test_an_unknown_tool_or_bad_reset_is_an_mcp_error(qa_server):
    async def calls(client):
        return [await client.call_tool(n, a, raise_on_error=False) for n, a in
                [("browse", {"url": "x"}), ("reset", {"seed": "zero"}), ("reset", {"task_id": "nope"}),
                 ("reset", {"seed": 0, "extra": 1})]]

    unknown, bad_seed, bad_task, extra = _session(qa_server.url, calls)
    assert unknown.is_error
    assert bad_seed.is_error and bad_seed.content[0].text == "the argument 'seed' of reset must be a JSON integer, got string"
    assert bad_task.is_error and bad_task.content[0].text.startswith("unknown task_id 'nope'")
    assert extra.is_error and extra.content[0].text.startswith("reset takes no argument 'extra'")


@pytest.mark.parametrize("kwargs, message", [
    ({"protocol": "tags"}, "an MCP server plays the env's tools protocol"),
    ({"tool_parser": "mistral"}, "an MCP server passes structured calls to the env"),
])
def test_bad_server_options_are_config_errors(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        create_mcp_server(QA, {**KW, **kwargs})


def test_an_env_without_tools_is_a_config_error():
    with pytest.raises(ConfigError, match="stratagym/GEM-v0 has no tools protocol"):
        create_mcp_server("stratagym/GEM-v0")


def test_serve_mcp_cli_refuses_bad_input_in_one_line():
    import subprocess
    import sys

    code = "from stratagym.cli import main; main(['serve', 'mcp', 'stratagym/SearchQA-v0', '-E', 'protocol=tags'])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == "error: an MCP server plays the env's tools protocol; drop protocol or set protocol=tools"
