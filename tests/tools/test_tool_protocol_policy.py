"""The tools protocol through the policy (issue 31): the chat template gets the tools (or the documented
fallback), the sampled token ids are what the trainer scores, served models get ``tools`` and answer
with ``tool_calls`` (against a local test server that follows the OpenAI chat API, not a real model
server), and demonstrations come out in TRL's conversational tool format."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import gymnasium as gym
import pytest
import torch

import stratagym  # noqa: F401  (registers the envs)
from stratagym.agents.backends import OpenAIGenerator
from stratagym.agents.llm import LLMConfig, LLMPolicy
from stratagym.agents.policy import GenerationRequest, Turn
from stratagym.agents.prompts import TOOLS, template_for_env
from stratagym.agents.tiny_lm import tiny_lm_path
from stratagym.agents.tool_messages import chat_template_has_tools, openai_messages
from stratagym.envs.tools import format_call
from stratagym.errors import ConfigError
from stratagym.training.rollout import InProcessPool, play

QA = "stratagym/SearchQA-v0"
KW = {"split": "test", "protocol": "tools"}


def _policy(template="trl:qwen2_5", **kw):
    path = tiny_lm_path()
    return LLMPolicy.from_pretrained(path, config=LLMConfig(model=str(path), max_new_tokens=16, memory_k=2,
                                                            chat_template=template, **kw))


def _tools_info():
    env = gym.make(QA, **KW)
    obs, info = env.reset(seed=0, options={"task_index": 0})
    env.close()
    return obs, info


def test_tools_protocol_picks_the_tools_template_whatever_the_spec_names():
    _, info = _tools_info()
    assert template_for_env(QA, info) is TOOLS and template_for_env(QA, info, "search_r1") is TOOLS
    assert template_for_env(QA, {"task_id": "x"}).name == "search_r1"


def test_render_passes_the_tools_to_a_template_with_a_tool_section():
    pol = _policy()
    obs, info = _tools_info()
    first = format_call("search", {"query": "river"})
    history = [Turn(obs, "<think>hm</think>" + first)]
    msgs = TOOLS.build("<information>Doc 1: a river</information>", info, history, 2)
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool"]
    text = pol.render(msgs, info["tool_schemas"])
    assert chat_template_has_tools(pol.tokenizer)
    assert "<tools>" in text and json.dumps(info["tool_schemas"][0]) in text  # Qwen2.5 renders each schema as JSON
    assert "<think>hm</think>" + first in text  # the sampled turn as it was written
    assert "<tool_response>\n<information>Doc 1: a river</information>\n</tool_response>" in text
    assert text.endswith("<|im_start|>assistant\n")


def test_a_template_without_tools_gets_the_schemas_in_a_system_message():
    pol = _policy(template=None)  # the tiny model's own ChatML template has no tool section
    obs, info = _tools_info()
    assert not chat_template_has_tools(pol.tokenizer)
    msgs = TOOLS.build("result", info, [Turn(obs, format_call("search", {"query": "x"}))], 2)
    text = pol.render(msgs, info["tool_schemas"])
    assert text.startswith("<|im_start|>system\nYou can call the following functions.")
    assert json.dumps(info["tool_schemas"][1]) in text and "<tool_call>" in text
    assert "<|im_start|>user\n<tool_response>\nresult\n</tool_response>" in text and "<|im_start|>tool" not in text


def test_chat_template_option_errors():
    with pytest.raises(ConfigError, match="TRL ships no chat template 'nope'"):
        _policy(template="trl:nope")
    with pytest.raises(ConfigError, match="neither a Jinja file nor trl:NAME"):
        _policy(template="/no/such/file.jinja")


def test_rollout_under_tools_scores_the_sampled_ids(tmp_path):
    """The collector plays the tools env; each payload's prompt is the rendered tools conversation and its
    response ids are the sampled ones, which sequence_log_probs scores as sampled (no re-tokenising)."""
    torch.manual_seed(0)
    pol = _policy()
    pool = InProcessPool(QA, KW)
    env = gym.make(QA, **KW)
    ids = [str(t) for t in env.unwrapped.task_ids()[:2]]
    env.close()
    trajs = play(pol, [(t, 0) for t in ids], env_id=QA, pool=pool, batch_size=2, greedy=False)
    steps = [s for t in trajs for s in t.steps]
    assert steps and all(s.info["protocol"] == "tools" for s in steps)
    for s in steps:
        if not s.action_valid:
            assert s.info["invalid_reason"]
    first = trajs[0].steps[0]
    req_obs = gym.make(QA, **KW)
    obs, info = req_obs.reset(seed=0, options={"task_id": ids[0]})
    req_obs.close()
    rendered = pol.render(TOOLS.build(obs, info, [], 2), info["tool_schemas"])
    assert first.payload["prompt_ids"].tolist() == pol.prompt_ids([rendered])[0]
    assert pol.tokenizer.decode(first.payload["response_ids"]) == first.text
    with torch.no_grad():
        scored = pol.sequence_log_probs([s.payload for s in steps])
    for row, s in enumerate(steps):
        n = int(s.payload["response_ids"].numel())
        assert int(scored.mask[row].sum()) == n
        torch.testing.assert_close(scored.logprobs[row, :n], s.payload["sampling_logprobs"], atol=2e-3, rtol=0)


# ---- served models: a local server that follows the OpenAI chat API ---------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    requests: list = []
    reply_calls: object = None

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Handler.requests.append(body)
        message = {"role": "assistant", "content": None, "tool_calls": _Handler.reply_calls}
        data = json.dumps({"choices": [{"message": message, "finish_reason": "tool_calls"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture()
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    _Handler.requests = []
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()
    srv.server_close()


def _served(url):
    return LLMPolicy.from_config(LLMConfig(model="served", backend="openai", openai={"base_url": url}))


def _call(name, arguments, i=0):
    return {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": arguments}}


def test_served_model_gets_tools_and_its_tool_calls_drive_the_env(server):
    env = gym.make(QA, **KW)
    obs, info = env.reset(seed=0, options={"task_index": 0})
    pol = _served(server)
    _Handler.reply_calls = [_call("search", json.dumps({"query": "the river"}))]
    gen = pol.generate([GenerationRequest(obs, info, (), QA)], greedy=True)[0]
    body = _Handler.requests[0]
    assert body["tools"] == info["tool_schemas"] and "stop" not in body
    assert gen.format_ok and gen.action == format_call("search", {"query": "the river"})
    obs2, _, _, _, info2 = env.step(gen.action)
    assert info2["action_valid"] and info2["query"] == "the river"
    # the next turn: the conversation goes back structured, with the call id on the tool message
    _Handler.reply_calls = [_call("answer", json.dumps({"text": "x"})), _call("search", "{}", 1)]
    gen2 = pol.generate([GenerationRequest(obs2, info2, (Turn(obs, gen.action),), QA)], greedy=True)[0]
    msgs = _Handler.requests[1]["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool"]
    assert msgs[1]["tool_calls"][0]["function"] == {"name": "search", "arguments": json.dumps({"query": "the river"})}
    assert msgs[2]["tool_call_id"] == msgs[1]["tool_calls"][0]["id"] and msgs[2]["content"] == obs2
    _, _, term, _, info3 = env.step(gen2.action)
    assert term and info3["tool_call"] == "answer" and info3["ignored_tool_calls"] == 1
    env.close()


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "answer"}}])
def test_tool_choice_is_sent_with_the_tools(server, choice):
    obs, info = _tools_info()
    pol = LLMPolicy.from_config(LLMConfig(model="served", backend="openai",
                                          openai={"base_url": server, "tool_choice": choice}))
    _Handler.reply_calls = [_call("answer", json.dumps({"text": "x"}))]
    pol.generate([GenerationRequest(obs, info, (), QA)], greedy=True)
    assert _Handler.requests[0]["tool_choice"] == choice
    _served(server).generate([GenerationRequest(obs, info, (), QA)], greedy=True)
    assert "tool_choice" not in _Handler.requests[1]  # unset: the server's default (auto)


@pytest.mark.parametrize("choice", ["always", {"type": "function"}, {"type": "function", "function": {"name": 3}},
                                    {"type": "function", "function": {"name": "a"}, "x": 1}, ["required"]])
def test_bad_tool_choice_is_a_config_error(choice):
    with pytest.raises(ConfigError, match="tool_choice must be auto, required, none or"):
        OpenAIGenerator("http://127.0.0.1:9/v1", "m", tool_choice=choice)


@pytest.mark.parametrize("calls, reason", [
    ({"function": {"name": "search"}}, "the server's tool_calls field is a dict, not a list"),
    ("search", "the server's tool_calls field is a str, not a list"),
])
def test_tool_calls_that_are_not_a_list(server, calls, reason):
    env = gym.make(QA, **KW)
    obs, info = env.reset(seed=0, options={"task_index": 0})
    _Handler.reply_calls = calls
    gen = _served(server).generate([GenerationRequest(obs, info, (), QA)], greedy=True)[0]
    assert gen.extra["tool_calls_error"] == reason and not gen.format_ok
    _, _, _, _, info2 = env.step(gen.action)
    assert not info2["action_valid"] and info2["invalid_reason"] == "the turn has no tool call"
    env.close()


@pytest.mark.parametrize("calls, reason", [
    ([_call("search", "{not json")], "the arguments of the call to 'search' are not valid JSON"),
    ([_call("search", json.dumps({"q": "x"}))], "search takes no argument 'q'"),
    (["junk"], 'a tool call must be a JSON object with "name" and "arguments"'),
    ([{"type": "function"}], 'the tool call has no "name" string'),
])
def test_bad_served_calls_are_invalid_turns(server, calls, reason):
    env = gym.make(QA, **KW)
    obs, info = env.reset(seed=0, options={"task_index": 0})
    _Handler.reply_calls = calls
    gen = _served(server).generate([GenerationRequest(obs, info, (), QA)], greedy=True)[0]
    _, _, _, _, info2 = env.step(gen.action)
    assert not info2["action_valid"] and info2["invalid_reason"].startswith(reason)
    env.close()


def test_openai_messages_leave_a_turn_without_a_call_as_text():
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "no call"}, {"role": "tool", "content": "bad"}]
    assert openai_messages(msgs) == [{"role": "user", "content": "q"}, {"role": "assistant", "content": "no call"},
                                     {"role": "user", "content": "bad"}]


# ---- demonstrations in TRL's conversational tool format ----------------------------------------------------------


def test_tool_demonstrations_render_as_trl_reads_them():
    from stratagym.agents.llm import load_chat_template
    from stratagym.training.demos import collect_demos
    from transformers import AutoTokenizer

    records = collect_demos(QA, "scripted:oracle", split="train", n=3, env_kwargs={"protocol": "tools"}, memory_k=4)
    assert records and all(r["template"] == "tools" for r in records)
    tok = AutoTokenizer.from_pretrained(tiny_lm_path())
    tok.chat_template = load_chat_template("trl:qwen2_5")
    for rec in records:
        assert [s["function"]["name"] for s in rec["tools"]] == ["search", "answer"]
        roles = [m["role"] for m in rec["messages"]]
        assert roles[0] == "user" and roles[-1] == "assistant" and "tool" in roles
        calls = [m for m in rec["messages"] if m["role"] == "assistant"]
        assert all(isinstance(m["tool_calls"][0]["function"]["arguments"], dict) for m in calls)
        # what SFTTrainer renders from the conversational record holds each expert turn exactly
        text = tok.apply_chat_template(rec["messages"], tools=rec["tools"], tokenize=False)
        for turn in rec["turns"]:
            assert turn["completion"].startswith("<tool_call>\n") and turn["completion"] in text
        # replayed on the env, the completions win the episode
        env = gym.make(QA, split="train", protocol="tools")
        env.reset(seed=rec["seed"], options={"task_id": rec["task_id"]})
        for turn in rec["turns"]:
            _, reward, term, _, info = env.step(turn["completion"])
            assert info["action_valid"]
        assert term and reward == 1.0
        env.close()


# ---- `stratagym eval openai:...` under the tools protocol, end to end ---------------------------------------------


class _Scripted(_Handler):
    """Searches once, then answers "Paris": the reply depends on the conversation, as a model's would."""

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Handler.requests.append(body)
        answered = any(m["role"] == "tool" for m in body["messages"])
        call = _call("answer", json.dumps({"text": "Paris"})) if answered else _call("search", json.dumps({"query": "capital"}))
        data = json.dumps({"choices": [{"message": {"role": "assistant", "content": "", "tool_calls": [call]},
                                        "finish_reason": "tool_calls"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_eval_cli_with_a_served_model_under_tools(tmp_path):
    from stratagym.cli import main

    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Scripted)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    _Handler.requests = []
    url = f"http://127.0.0.1:{srv.server_address[1]}/v1"
    out = tmp_path / "r.json"
    args = ["eval", f"openai:served@{url}", "--env", QA, "--split", "test", "-n", "3", "-E", "protocol=tools",
            "--out", str(out), "-q"]
    try:
        main(args)
    except SystemExit as exc:  # typer's standalone mode exits 0 on success
        assert exc.code in (0, None)
    finally:
        srv.shutdown()
        srv.server_close()
    record = json.loads(out.read_text())
    assert len(_Handler.requests) == 6 and all(r["tools"][0]["function"]["name"] == "search" for r in _Handler.requests)
    assert record["protocol"]["fields"]["task_kwargs"]["protocol"] == "tools"  # never ranked with tag records
    episodes = record["episodes"]
    assert len(episodes) == 3
    assert all(e["search_count"] == 1 and e["turns"] == 2 and e["valid_actions"] == 2 for e in episodes)
    assert all(e["extra"]["answer"] == "Paris" for e in episodes)
