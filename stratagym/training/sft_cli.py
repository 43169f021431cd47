"""``stratagym demos collect`` and ``stratagym sft``: expert demonstrations and the SFT warm start (a CLI plug-in).

Heavy imports stay inside the commands so ``stratagym --help`` stays fast. User errors (bad recipe,
corrupt demonstrations, a split with evaluation tasks) print one line and exit with code 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from stratagym.cli_support import command_group, parse_key_values
from stratagym.errors import ConfigError


def _error(exc: Exception) -> "typer.Exit":
    """One plain line on stderr (typer.echo interprets no markup, so user text shows as is), exit code 2."""
    typer.echo(f"error: {exc}", err=True)
    return typer.Exit(2)


def register(app: typer.Typer, groups: dict[str, typer.Typer]) -> None:
    demos_app = command_group(app, groups, "demos", "Expert demonstrations (SFT datasets) from scripted agents.")

    @demos_app.command("collect")
    def collect(
        env: str = typer.Option(..., "--env", "-e", help="Env id, e.g. stratagym/SearchQA-v0."),
        agent: str = typer.Option("scripted:oracle", "--agent", "-a", help="scripted:<name> (the env's expert)."),
        split: str = typer.Option("train", help="A train split (evaluation splits are refused)."),
        n: Optional[int] = typer.Option(None, "--n", "-n", help="First n tasks of the split (default all)."),
        out: Path = typer.Option(..., "--out", "-o", help="Output .jsonl (written atomically)."),
        env_arg: List[str] = typer.Option([], "--env-arg", "-E", help="Env constructor argument key=value (YAML value; repeatable)."),
        template: Optional[str] = typer.Option(None, help="Prompt template (default: the env family's, as LLMPolicy picks)."),
        memory_k: int = typer.Option(2, "--memory-k", help="Earlier turns kept in each prompt: the policy's policy.memory_k."),
        seed: int = typer.Option(0, help="Reset seed of every episode (the first, with --episodes-per-task)."),
        episodes_per_task: int = typer.Option(1, "--episodes-per-task", help="Play each task this many times, with seeds seed, seed+1, ..."),
        keep_lost: bool = typer.Option(False, "--keep-lost", help="Also keep episodes the expert lost."),
        reasons: bool = typer.Option(False, "--reasons", help="Think text = the expert's stated reason for each action "
                                     "(the recipes' demos.reasons; experts with act_with_reasons: WebShop's expert, "
                                     "ALFWorld's searcher)."),
    ) -> None:
        """Play a scripted expert on a train split and write one chat-format record per episode.

        The prompts are built by the same templates and memory rule as the LLM policy in RL, so the
        demonstrations are the text the model later sees. TRL's SFTTrainer and `datasets` read the
        `messages` field directly; `stratagym sft` trains on the per-turn `turns` field.
        """
        import os

        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        from stratagym.training.demos import collect_demos, write_demos  # lazy: torch; `stratagym --help` stays fast

        try:
            kwargs = parse_key_values(env_arg, "--env-arg")
            kwargs.pop("split", None)
            records = collect_demos(env, agent, split=split, n=n, env_kwargs=kwargs, template=template,
                                    memory_k=memory_k, seed=seed, episodes_per_task=episodes_per_task,
                                    only_won=not keep_lost, progress=True, reasons=reasons)
            write_demos(records, out)
        except ConfigError as exc:
            raise _error(exc)
        turns = sum(len(r["turns"]) for r in records)
        typer.echo(f"{len(records)} demonstrations ({turns} turns) -> {out}")

    @app.command("sft")
    def sft(
        config: Path = typer.Option(..., "--config", "-c", help="SFT recipe YAML (see recipes/cpu/sft-*.yaml)."),
        resume: bool = typer.Option(False, "--resume", help="Reuse the demonstrations and base model of output_dir and continue from its newest complete checkpoint."),
        set_: Optional[List[str]] = typer.Option(None, "--set", help="Override a recipe value: section.key=value (repeatable)."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
        export_from: Optional[Path] = typer.Option(None, "--export-from", help="Train nothing: export the policy folder from this trainer checkpoint (<output_dir>/trainer/checkpoint-N) of the recipe's LoRA run, e.g. one cut short."),
    ) -> None:
        """Behaviour cloning of a scripted expert with TRL's SFTTrainer; writes a checkpoint that
        `stratagym train` (policy.model: <folder>) and `stratagym eval <folder>` load unchanged."""
        import os

        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        from stratagym.training.sft import export_trainer_checkpoint, load_sft_recipe, run_sft  # lazy: torch

        try:
            overrides = parse_key_values(set_ or [], "--set", form="section.key=value")
            recipe = load_sft_recipe(config, overrides)
            if export_from is not None:
                export_trainer_checkpoint(recipe, export_from, echo=typer.echo)
                return
            meta = run_sft(recipe, resume=resume, progress=not quiet, echo=typer.echo)
        except ConfigError as exc:
            raise _error(exc)
        times = ", ".join(f"{k[:-2]} {v:.0f}s" for k, v in meta.get("times", {}).items())
        typer.echo(f"done: {recipe.export_dir} ({times})")
