"""``stratagym train --config recipe.yaml [--resume]``: the trainer's command (a CLI plug-in)."""

from __future__ import annotations

from typing import List, Optional

import typer

from stratagym.cli_support import parse_key_values
from stratagym.errors import ConfigError


def register(app: typer.Typer, groups: dict[str, typer.Typer]) -> None:
    @app.command("train")
    def train(
        config: str = typer.Option(..., "--config", "-c", help="YAML recipe (see recipes/)."),
        resume: bool = typer.Option(False, "--resume", help="Continue from the newest complete checkpoint in train.output_dir."),
        set_: Optional[List[str]] = typer.Option(None, "--set", help="Override a recipe value: section.key=value (repeatable)."),
        output_dir: Optional[str] = typer.Option(None, "--output-dir", help="Shortcut for --set train.output_dir=..."),
    ) -> None:
        """Train a policy with a group-relative estimator (GRPO, Stratified GRPO, GiGPO, HGPO, +HA-DW).

        Multi-GPU / multi-node: ``accelerate launch -m stratagym.cli train --config recipe.yaml``.
        """
        import os

        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        # lazy: the recipe's algorithms and the trainer load torch; `stratagym --help` stays fast
        from stratagym.training.config import load_recipe
        from stratagym.training.trainer import Trainer

        overrides = parse_key_values(set_ or [], "--set", form="section.key=value (e.g. train.total_steps=3)")
        if output_dir:
            overrides["train.output_dir"] = output_dir
        try:
            recipe = load_recipe(config, overrides)
            trainer = Trainer(recipe)
        except ConfigError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2)
        try:
            rows = trainer.train(resume=resume)
        finally:
            trainer.close()
        if rows and trainer.accelerator.is_main_process:
            last = rows[-1]
            typer.echo(
                f"step {last['step']}: return {last.get('rollout/return', 0.0):.4f} "
                f"success {last.get('rollout/success', 0.0):.3f} loss {last.get('loss/loss', 0.0):.5f}; "
                f"metrics in {recipe.train.output_dir}/metrics.jsonl"
            )
