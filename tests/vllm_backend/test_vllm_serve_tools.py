"""The tools protocol against a real vLLM OpenAI server (``--enable-auto-tool-choice --tool-call-parser
hermes``): the server renders the env's tools, its hermes parser turns the model's text into ``tool_calls``,
and the ``openai`` backend turns those into the env's actions, with the structure (search_count, tool_calls,
hashes) that the same calls written by hand give.

A random model writes no call by itself, so two things make the server's output valid and known:

* the request's ``tool_choice`` is ``required`` or names a tool: vLLM 0.32 then constrains decoding to the
  hermes call format with a structural tag (``vllm/parser/abstract_parser.py:533-600``, the
  ``tool_parser.get_structural_tag`` branch; ``Hermes2ProToolParser.structural_tag_model = "hermes"`` in
  ``vllm/tool_parsers/hermes_tool_parser.py:35``; on by default through ``VLLM_ENFORCE_STRICT_TOOL_CALLING``), and
  ``--tool-strict-level parameter`` pins the arguments to the tool's JSON Schema;
* the model is a *bigram* Qwen2: attention and MLP outputs are zero, so the logits depend on the last token
  only, and its embeddings and head are set so that after a quote it writes ``k`` (or a tool name starting
  with ``s``), after anything else a closing quote or ``<|im_end|>``, and never JSON whitespace. Under the
  grammar that is ``search({"query": "k"})`` (``answer({"text": "k"})`` when the request names ``answer``).
"""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import pytest
import torch

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

import vllm  # noqa: E402,F401  (tests/vllm_backend/conftest.py collects these only where vLLM is installed)

import stratagym  # noqa: E402,F401  (registers the envs)
from stratagym.agents.llm import LLMConfig, LLMPolicy, load_chat_template  # noqa: E402
from stratagym.agents.policy import GenerationRequest, Turn  # noqa: E402
from stratagym.envs.tools import format_call  # noqa: E402
from tests.vllm_backend.test_vllm_serve import Server  # noqa: E402

QA = "stratagym/SearchQA-v0"
KW = {"split": "test", "protocol": "tools", "topk": 1, "max_turns": 2}  # 2 search rounds + 1 final turn
STRUCTURE = ("search_count", "tool_calls", "tool_call", "action_valid", "state_hash", "context_hashes", "won")


def bigram_model(folder: Path) -> Path:
    """A random-shaped Qwen2 whose next token depends on the last token only (see the module docstring),
    with the tiny test tokenizer and TRL's Qwen2.5 chat template (a tool section), saved to ``folder``."""
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from stratagym.agents.tiny_lm import tiny_lm_path

    tok = AutoTokenizer.from_pretrained(tiny_lm_path())
    tok.chat_template = load_chat_template("trl:qwen2_5")
    d = 128  # head_dim 32: vLLM's CPU attention needs >= 32
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tok), hidden_size=d, intermediate_size=256, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                                         tie_word_embeddings=False, pad_token_id=tok.pad_token_id,
                                         eos_token_id=tok.eos_token_id))
    vocab = tok.get_vocab()
    quote, other = 0, 1  # two states: the last token ends in a quote, or not
    emb = torch.zeros(len(tok), d)
    emb[:, other] = 1.0
    for t in ('"', '\u0120"'):
        emb[vocab[t], other], emb[vocab[t], quote] = 0.0, 1.0
    head = torch.zeros(len(tok), d)
    for t, i in vocab.items():
        if not t.strip("\u0120\u010a\u0109\r\n\t "):  # whitespace (byte-level: Ġ space, Ċ newline, ĉ tab)
            head[i] = -10.0
        elif t.startswith("s"):
            head[i, quote] = 5.0
    head[vocab["k"], quote], head[vocab['"'], quote] = 10.0, -5.0
    head[tok.eos_token_id, other], head[vocab['"'], other], head[vocab["}"], other] = 10.0, 8.0, 6.0
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.model.embed_tokens.weight.copy_(emb)
        model.lm_head.weight.copy_(head)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve-tools")
    folder = bigram_model(tmp / "bigram")
    # one process (no engine-core and worker processes to start): the start is the test's main cost
    with Server(folder, "bigram", tmp / "serve.log", "--max-model-len", "4096", "--enable-auto-tool-choice",
                "--tool-call-parser", "hermes", "--tool-strict-level", "parameter",
                env={"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}, start_timeout=900) as srv:
        yield srv


def _policy(url: str, choice) -> LLMPolicy:
    return LLMPolicy.from_config(LLMConfig(model="bigram", backend="openai", max_new_tokens=128, memory_k=4,
                                           openai={"base_url": url, "tool_choice": choice}))


def _play(policy: LLMPolicy, task: int) -> tuple[list[str], list[dict]]:
    """One greedy episode: the actions the policy wrote and the env's info after each."""
    env = gym.make(QA, **KW)
    obs, info = env.reset(seed=0, options={"task_index": task})
    history: list[Turn] = []
    actions, infos = [], []
    try:
        while True:
            gen = policy.generate([GenerationRequest(obs, info, tuple(history), QA)], greedy=True)[0]
            history.append(Turn(obs, gen.action))
            obs, _, term, trunc, info = env.step(gen.action)
            actions.append(gen.action)
            infos.append(info)
            if term or trunc:
                return actions, infos
    finally:
        env.close()


def _replay(actions: list[str], task: int) -> list[dict]:
    """The same actions written by hand into a fresh env: the reference structure."""
    env = gym.make(QA, **KW)
    env.reset(seed=0, options={"task_index": task})
    try:
        return [env.step(a)[4] for a in actions]
    finally:
        env.close()


def test_server_returns_tool_calls_parsed_by_its_hermes_parser(server):
    import httpx

    env = gym.make(QA, **KW)
    obs, info = env.reset(seed=0, options={"task_index": 0})
    env.close()
    body = {"model": "bigram", "messages": [{"role": "user", "content": obs}], "tools": info["tool_schemas"],
            "tool_choice": "required", "max_tokens": 128, "temperature": 0}
    message = httpx.post(f"{server.url}/chat/completions", json=body, timeout=120).json()["choices"][0]["message"]
    # the structured field, not the text: the server's parser read the model's <tool_call> block
    assert [(c["type"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]] \
        == [("function", "search", {"query": "k"})]
    assert not (message.get("content") or "").strip()


def test_served_tool_calls_drive_searchqa_with_the_structure_of_the_same_calls(server):
    actions, infos = _play(_policy(server.url, "required"), task=0)
    # tool_calls came back structured and were written as the env's call text (format_call's spacing, not the
    # model's compact JSON), one search per turn until the final turn
    assert actions == [format_call("search", {"query": "k"})] * 3
    assert [i["search_count"] for i in infos] == [1, 2, 3]
    assert [i["tool_calls"] for i in infos] == [{"search": 1}, {"search": 2}, {"search": 3}]
    assert all(i["action_valid"] and i["tool_call"] == "search" and i["protocol"] == "tools" for i in infos)
    assert not infos[-1]["won"]
    for served, by_hand in zip(infos, _replay(actions, 0)):
        assert {k: served.get(k) for k in STRUCTURE} == {k: by_hand.get(k) for k in STRUCTURE}


def test_a_named_tool_choice_answers_and_ends_the_episode(server):
    actions, infos = _play(_policy(server.url, {"type": "function", "function": {"name": "answer"}}), task=1)
    assert actions == [format_call("answer", {"text": "k"})]
    (info,) = infos
    assert info["tool_call"] == "answer" and info["action_valid"] and info["search_count"] == 0
    assert info["tool_calls"] == {}  # as under tags: the count is of tool uses (searches); answering ends the episode
    assert not info["won"]
    assert {k: info.get(k) for k in STRUCTURE} == {k: _replay(actions, 1)[0].get(k) for k in STRUCTURE}
