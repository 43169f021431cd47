"""LLM policy: prompts, parsers, batched HF generation with stop strings, re-scoring, save/load, LoRA,
the OpenAI-compatible backend against a local HTTP server, and the vLLM code path around the engine."""

from __future__ import annotations

import json
import os
import stat
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest
import torch

from stratagym.agents.backends import SamplingConfig, parse_vllm_outputs, repair_stop, vllm_weight_items
from stratagym.agents.llm import LLMConfig, LLMPolicy
from stratagym.agents.policy import GenerationRequest, Policy, Turn
from stratagym.agents.prompts import parse_search_r1, parse_think_action, template_for_env
from stratagym.envs.core import ConfigError
from stratagym.agents.tiny_lm import tiny_lm_path


@pytest.fixture(scope="module")
def policy() -> LLMPolicy:
    path = tiny_lm_path()
    return LLMPolicy.from_pretrained(path, config=LLMConfig(model=str(path), max_new_tokens=24, memory_k=2))


def _req(obs="You are in a room. Your task is to: put a clean apple in fridge.", env="stratagym/ALFWorld-v0", **info):
    info = {"step": 0, "task_id": "t0", **info}
    return GenerationRequest(obs, info, (), env)


# ---- prompts / parsers ----------------------------------------------------------------------------------


def test_parsers():
    assert parse_think_action("<think>hm</think><action> go to fridge 1 </action>").action == "go to fridge 1"
    p = parse_think_action("<action>a</action> then <action>b</action>")
    assert p.action == "b" and p.format_ok
    bad = parse_think_action("no tags here")
    assert not bad.format_ok and bad.action == "no tags here"
    assert parse_search_r1("<think>x</think><search> who </search>").format_ok
    assert not parse_search_r1("<think>x</think> nothing").format_ok


def test_templates_by_family_and_memory():
    assert template_for_env("stratagym/SearchQA-v0").name == "search_r1"
    assert template_for_env("stratagym/WebShop-v0").name == "think_action"
    assert template_for_env("my/Env-v0", {"admissible_actions": ["a"]}).name == "think_action"
    assert template_for_env("my/Env-v0", {}).name == "plain"
    with pytest.raises(ConfigError):
        template_for_env("x", override="nope")
    tmpl = template_for_env("stratagym/ALFWorld-v0")
    history = [Turn(f"obs{i}", f"act{i}") for i in range(5)]
    msgs = tmpl.build("now", {"admissible_actions": ["look", "go to desk 1"]}, history, 2)
    text = msgs[-1]["content"]
    assert "obs0" in text  # the task (first observation) is always kept
    assert "act3" in text and "act4" in text and "act2" not in text  # last K=2 turns
    assert "'go to desk 1'" in text and "now" in text
    sr = template_for_env("stratagym/SearchQA-v0").build(
        "<information>doc</information>", {}, [Turn("Question: who? <search>", "<search> q </search>")], 2)
    assert sr[-1]["role"] == "assistant" and "<information>doc</information>" in sr[-1]["content"]


# ---- HF generation and scoring ------------------------------------------------------------------------------


def test_generate_batched_payloads_and_rescoring(policy):
    torch.manual_seed(0)
    reqs = [_req(admissible_actions=["look", "inventory"]) for _ in range(5)]
    gens = policy.generate(reqs)
    assert len(gens) == 5
    for g in gens:
        assert 1 <= g.num_tokens <= 24
        assert g.payload["response_ids"].numel() == g.num_tokens
        assert g.payload["sampling_logprobs"].numel() == g.num_tokens
    res = policy.sequence_log_probs([g.payload for g in gens], with_entropy=True)
    assert res.logprobs.shape == res.mask.shape == (5, max(g.num_tokens for g in gens))
    assert res.mask.sum(1).tolist() == [g.num_tokens for g in gens]
    # the trainer's re-scoring equals the sampler's log-probs (same model, same temperature)
    diff = ((res.logprobs - res.sampling_logprobs).abs() * res.mask).max()
    assert float(diff.detach()) < 1e-4
    assert res.logprobs.requires_grad
    (res.logprobs * res.mask).sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in policy.parameters())
    policy.model.zero_grad(set_to_none=True)


def test_stop_strings_cut_generation(policy):
    policy.config.template = "plain"
    try:
        req = _req(obs="hello there")
        free = policy.generate([req], greedy=True)[0]
        assert free.num_tokens >= 4
        stop = free.text[2:5]
        assert stop
        policy.template_for(req)  # plain template has no stop strings: patch one in via a template
        from dataclasses import replace

        from stratagym.agents import prompts

        patched = replace(prompts.PLAIN, stop=(stop,))
        orig = prompts.TEMPLATES["plain"]
        prompts.TEMPLATES["plain"] = patched
        try:
            cut = policy.generate([req, req], greedy=True)
        finally:
            prompts.TEMPLATES["plain"] = orig
        for g in cut:
            assert g.text.endswith(stop)
            assert free.text.startswith(g.text)
            assert g.num_tokens < free.num_tokens
            assert g.extra["finish_reason"] == "stop"
    finally:
        policy.config.template = None


def test_save_and_reload_same_logprobs(policy, tmp_path):
    torch.manual_seed(1)
    gens = policy.generate([_req(admissible_actions=["look"]) for _ in range(3)])
    old_umask = os.umask(0o022)
    try:
        policy.save_pretrained(tmp_path / "p")
    finally:
        os.umask(old_umask)
    assert (tmp_path / "p" / "model.safetensors").exists()
    # safetensors' save_file writes 0600; a checkpoint others read (or a committed adapter) gets the umask's mode
    assert {f.name: stat.S_IMODE(f.stat().st_mode) for f in (tmp_path / "p").iterdir()} == {
        f.name: 0o644 for f in (tmp_path / "p").iterdir()}
    again = LLMPolicy.from_pretrained(tmp_path / "p")
    assert isinstance(again, Policy)
    assert again.config.max_new_tokens == 24 and again.config.memory_k == 2
    with torch.no_grad():
        a = policy.sequence_log_probs([g.payload for g in gens]).logprobs
        b = again.sequence_log_probs([g.payload for g in gens]).logprobs
    assert torch.equal(a, b)


def test_lora_reference_is_base_model(tmp_path):
    path = tiny_lm_path()
    pol = LLMPolicy.from_pretrained(path, config=LLMConfig(model=str(path), max_new_tokens=8, lora={"r": 4, "alpha": 8}))
    assert pol.is_lora
    names = [n for n, p in pol.model.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n for n in names)
    ref = pol.frozen_copy()
    torch.manual_seed(0)
    gens = pol.generate([_req(admissible_actions=["look"]) for _ in range(2)])
    with torch.no_grad():
        for p in pol.parameters():  # move the adapters away from zero
            p.add_(0.05)
        cur = pol.sequence_log_probs([g.payload for g in gens]).logprobs
        refl = ref.sequence_log_probs([g.payload for g in gens]).logprobs
    base = LLMPolicy.from_pretrained(path, config=LLMConfig(model=str(path)))
    with torch.no_grad():
        basel = base.sequence_log_probs([g.payload for g in gens]).logprobs
    assert torch.allclose(refl, basel, atol=1e-5)
    assert not torch.allclose(cur, basel, atol=1e-5)
    # vLLM gets merged weights under the base model's parameter names
    names = dict(vllm_weight_items(pol.model))
    base_names = {n for n, _ in base.model.named_parameters()}
    assert set(names) == base_names
    pol.save_pretrained(tmp_path / "lora")
    back = LLMPolicy.from_pretrained(tmp_path / "lora")
    assert back.is_lora
    with torch.no_grad():
        assert torch.allclose(back.sequence_log_probs([g.payload for g in gens]).logprobs, cur, atol=1e-5)


def test_llm_policy_plays_episodes_through_the_rollout_loop(policy):
    import gymnasium as gym

    import stratagym  # noqa: F401  (registers the envs)
    from tests.helpers import play_records

    env_id = "stratagym/CueCorridor-v0"
    envs = [gym.make(env_id) for _ in range(2)]
    records = play_records(envs, policy, [(i, i) for i in range(3)])
    assert len(records) == 3 and all(r.turns >= 1 for r in records)


# ---- OpenAI-compatible backend ---------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    requests: list = []

    def log_message(self, *args):  # keep test output clean
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Handler.requests.append((self.path, body, self.headers.get("Authorization")))
        if self.path.endswith("/chat/completions"):
            text = body["messages"][-1]["content"]
            # like OpenAI: the stop string is NOT included in the output
            reply = {"choices": [{"message": {"role": "assistant", "content": f"<think>{len(text)}</think><action>look"},
                                  "finish_reason": "stop"}]}
        else:
            reply = {"choices": [{"text": "<search> capital of x", "finish_reason": "stop"}]}
        data = json.dumps(reply).encode()
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


def test_openai_backend_chat(server, monkeypatch):
    monkeypatch.setenv("STRATAGYM_TEST_KEY", "sk-test")
    pol = LLMPolicy.from_config(LLMConfig(model="served-model", backend="openai",
                                          openai={"base_url": server, "api_key_env": "STRATAGYM_TEST_KEY"}))
    gens = pol.generate([_req(admissible_actions=["look"]) for _ in range(4)], greedy=True)
    assert [g.action for g in gens] == ["look"] * 4
    assert all(g.format_ok and g.text.endswith("</action>") for g in gens)
    assert len(_Handler.requests) == 4
    path, body, auth = _Handler.requests[0]
    assert path == "/v1/chat/completions" and body["model"] == "served-model"
    assert body["stop"] == ["</action>"] and body["temperature"] == 0.0
    assert auth == "Bearer sk-test"
    with pytest.raises(ConfigError):
        pol.sequence_log_probs([g.payload for g in gens])


def test_openai_backend_completions_uses_local_chat_template(server):
    path = tiny_lm_path()
    pol = LLMPolicy.from_config(LLMConfig(model=str(path), backend="openai",
                                          openai={"base_url": server, "endpoint": "completions", "model": "m"}))
    gens = pol.generate([_req(obs="Answer the given question. <search> Question: who?", env="stratagym/SearchQA-v0")])
    assert gens[0].action == "<search> capital of x</search>" and gens[0].format_ok
    body = _Handler.requests[0][1]
    assert body["prompt"].startswith("<|im_start|>user") and body["prompt"].endswith("<|im_start|>assistant\n")


def test_openai_config_errors():
    with pytest.raises(ConfigError, match="base_url"):
        LLMPolicy.from_config(LLMConfig(model="m", backend="openai")).generate([_req()])
    with pytest.raises(ConfigError):
        LLMConfig(model="m", backend="tpu").validate()
    with pytest.raises(ConfigError, match="temperature"):
        LLMConfig(model="m", temperature=0).validate()


def test_repair_stop():
    assert repair_stop("<search> q", ["</search>", "</answer>"]) == "<search> q</search>"
    assert repair_stop("<answer> a", ["</search>", "</answer>"]) == "<answer> a</answer>"
    assert repair_stop("plain", ["</search>"]) == "plain"


# ---- vLLM, around the engine ---------------------------------------------------------------------------------------


def test_vllm_backend_is_import_guarded():
    try:
        import vllm  # noqa: F401

        pytest.skip("vLLM is installed here")
    except ImportError:
        pass
    from stratagym.agents.backends import VLLMGenerator

    with pytest.raises(ConfigError, match="vLLM"):
        VLLMGenerator(str(tiny_lm_path()))


def test_parse_vllm_outputs():
    lp = lambda v: SimpleNamespace(logprob=v)  # noqa: E731  (vLLM's Logprob objects carry .logprob)
    outs = [
        SimpleNamespace(outputs=[SimpleNamespace(token_ids=[5, 6, 7], text="<search> q </search> tail",
                                                 logprobs=[{5: lp(-0.5)}, {6: lp(-1.0)}, {7: lp(-2.0)}],
                                                 finish_reason="stop", stop_reason="</search>")]),
        SimpleNamespace(outputs=[SimpleNamespace(token_ids=[1, 2], text="abc", logprobs=None, finish_reason="length",
                                                 stop_reason=None)]),
        SimpleNamespace(outputs=[SimpleNamespace(token_ids=[3], text="x", logprobs=None, finish_reason="stop",
                                                 stop_reason=None)]),
    ]
    raws = parse_vllm_outputs(outs, ["</search>"])
    assert raws[0].text == "<search> q </search>" and raws[0].logprobs == [-0.5, -1.0, -2.0]
    assert raws[0].finish_reason == "stop" and raws[1].finish_reason == "length" and raws[2].finish_reason == "eos"


def test_sampling_top_k_top_p_restrict_support():
    logits = torch.tensor([[5.0, 4.0, 0.0, -1.0]]).repeat(200, 1)
    from stratagym.agents.backends import HFGenerator

    torch.manual_seed(0)
    tok, lp = HFGenerator._sample(logits, SamplingConfig(temperature=1.0, top_k=2), greedy=False)
    assert set(tok.tolist()) <= {0, 1} and len(set(tok.tolist())) == 2
    tok, _ = HFGenerator._sample(logits, SamplingConfig(temperature=1.0, top_p=0.5), greedy=False)
    assert set(tok.tolist()) == {0}
    tok, lp = HFGenerator._sample(logits, SamplingConfig(), greedy=True)
    assert set(tok.tolist()) == {0}
    assert torch.allclose(lp, torch.log_softmax(logits, -1)[:, 0])


def test_lora_loaded_from_adapter_keeps_that_adapter_as_reference(tmp_path):
    """RL from a LoRA SFT checkpoint: the KL reference is the checkpoint (the starting policy), not the
    base with adapters off -- that would pull the policy back to the untuned model. Scoring as the
    reference leaves the trainable adapter trainable, and saving writes the trained adapter only."""
    path = tiny_lm_path()
    sft = LLMPolicy.from_pretrained(path, config=LLMConfig(model=str(path), max_new_tokens=8, lora={"r": 4, "alpha": 8}))
    torch.manual_seed(0)
    gens = sft.generate([_req(admissible_actions=["look"]) for _ in range(2)])
    pays = [g.payload for g in gens]
    with torch.no_grad():
        for p in sft.parameters():
            p.add_(0.05)
        sft_lp = sft.sequence_log_probs(pays).logprobs
    sft.save_pretrained(tmp_path / "sft")

    pol = LLMPolicy.from_pretrained(tmp_path / "sft")
    trainable = sorted(n for n, p in pol.model.named_parameters() if p.requires_grad)
    ref = pol.frozen_copy()
    with torch.no_grad():
        assert torch.allclose(ref.sequence_log_probs(pays).logprobs, sft_lp, atol=1e-5)
        for p in pol.parameters():  # the trained adapter moves on; the reference must not
            p.add_(0.05)
        cur = pol.sequence_log_probs(pays).logprobs
        refl = ref.sequence_log_probs(pays).logprobs
        base = LLMPolicy.from_pretrained(path, config=LLMConfig(model=str(path))).sequence_log_probs(pays).logprobs
    assert torch.allclose(refl, sft_lp, atol=1e-5)
    assert not torch.allclose(cur, sft_lp, atol=1e-4) and not torch.allclose(refl, base, atol=1e-4)
    assert sorted(n for n, p in pol.model.named_parameters() if p.requires_grad) == trainable
    loss = pol.sequence_log_probs(pays).logprobs.sum()
    loss.backward()
    assert all(p.grad is not None for p in pol.parameters())

    pol.save_pretrained(tmp_path / "rl")
    assert not (tmp_path / "rl" / "reference").exists()
    back = LLMPolicy.from_pretrained(tmp_path / "rl")
    with torch.no_grad():
        assert torch.allclose(back.sequence_log_probs(pays).logprobs, cur, atol=1e-5)
