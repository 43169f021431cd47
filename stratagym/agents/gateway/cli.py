"""``stratagym serve policy MODEL``: the policy gateway in the foreground (docs/gateway.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def register(app: typer.Typer, groups: dict[str, typer.Typer]) -> None:
    groups["serve"].command("policy")(serve_policy)


def serve_policy(
    model: str = typer.Argument(..., help="A model or adapter folder (a checkpoint), or 'tiny' for the bundled tiny model."),
    host: str = typer.Option("127.0.0.1", help="Bind address (loopback by default; expose deliberately)."),
    port: int = typer.Option(8000, min=0, max=65535, help="Port."),
    record_dir: Optional[Path] = typer.Option(None, "--record-dir", help="Append every call to DIR/<session>.jsonl "
                                              "(fsynced before the response); default: memory only."),
    backend: str = typer.Option("hf", help="hf | vllm (the policy's generation backend)."),
    dtype: Optional[str] = typer.Option(None, help="float32 | bfloat16 | auto (docs/precision.md); default: the "
                                        "checkpoint's own, float32 for a plain model folder."),
    max_new_tokens: int = typer.Option(256, min=1, help="Default reply length when a request names none."),
    name: str = typer.Option("stratagym-policy", help="The model name /v1/models reports."),
    batch_invariant: bool = typer.Option(False, "--batch-invariant", help="Generate each request alone from its "
                                         "whole prompt: a seeded request then samples the same whatever else "
                                         "arrives with it (slower: no batching, no prefix-cache reuse)."),
) -> None:
    """Serve a policy as an OpenAI-compatible API (/v1/chat/completions with tools, /v1/completions) and
    record every call's prompt ids, sampled ids and log-probs per session (X-Session-Id header, or the API
    key). GET /v1/sessions lists them with their append-only share."""
    import uvicorn

    from stratagym.agents.llm import POLICY_CONFIG_FILE, LLMConfig, LLMPolicy
    from stratagym.agents.gateway.server import GatewayLimits, create_app
    from stratagym.agents.gateway.sessions import SessionStore

    if model == "tiny":
        from stratagym.agents.tiny_lm import tiny_lm_path

        model = str(tiny_lm_path())
    options = {"backend": backend, "max_new_tokens": max_new_tokens, **({"dtype": dtype} if dtype else {})}
    if (Path(model) / POLICY_CONFIG_FILE).exists():  # a stratagym checkpoint: its saved template, LoRA base...
        policy = LLMPolicy.from_pretrained(model, **options)
    else:
        policy = LLMPolicy.from_config(LLMConfig(model=model, **options))
    app = create_app(policy, store=SessionStore(record_dir), model_name=name,
                     limits=GatewayLimits(batch_invariant=batch_invariant))
    typer.echo(f"serving {model} as {name!r} on http://{host}:{port}/v1" + (f", recording to {record_dir}" if record_dir else ""))
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
