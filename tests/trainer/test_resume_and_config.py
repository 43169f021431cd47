"""Recipes and config validation; atomic checkpoints; kill -9 then --resume reproduces the metrics."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from stratagym.training.checkpoint import latest_checkpoint, list_checkpoints, load_checkpoint, save_checkpoint
from stratagym.training.config import RecipeConfig, load_recipe
from stratagym.envs.core import ConfigError
from stratagym.provenance import read_provenance, write_provenance
from tests.helpers import wait_for_checkpoint

REPO = Path(__file__).resolve().parents[2]


# ---- config --------------------------------------------------------------------------------------------


RECIPES = sorted((REPO / "recipes").rglob("*.yaml"))


@pytest.mark.parametrize("path", [p for p in RECIPES if not p.name.startswith("sft-")], ids=lambda p: p.name)
def test_bundled_recipes_validate(path):
    cfg = load_recipe(path)
    assert cfg.env.id and cfg.policy.get("model")


@pytest.mark.parametrize("path", [p for p in RECIPES if p.name.startswith("sft-")], ids=lambda p: p.name)
def test_bundled_sft_recipes_validate(path):
    """SFT recipes (``stratagym sft``) have their own schema; an RL recipe loader rejects them."""
    from stratagym.training.sft import load_sft_recipe

    recipe = load_sft_recipe(path)
    assert recipe.env.id
    with pytest.raises(ConfigError, match="unknown key"):
        load_recipe(path)


@pytest.mark.parametrize(
    "patch, message",
    [
        ({"optim": {"learning_rate": 1}}, r"unknown key\(s\) \['learning_rate'\] in optim; valid keys"),
        ({"algorithm": {"estimator": "ppo"}}, "unknown estimator 'ppo'"),
        ({"algorithm": {"estimator": "grpo", "estimator_kwargs": {"alpha": 1}}}, "unknown option"),
        ({"rollout": {"group_size": 0}}, "rollout.group_size must be >= 1"),
        ({"optim": {"lr": "1e-6"}}, "optim.lr: expected a number"),
        ({"loss": {"agg": "mean"}}, "loss.agg must be one of"),
        ({"env": {"id": ""}}, "env.id is missing"),
        ({"env": {"id": "stratagym/SearchQA-v0", "tasks": "1500"}}, r"env.tasks must be a slice 'start:stop'"),
        ({"env": {"id": "stratagym/SearchQA-v0", "tasks": "a:b"}}, r"env.tasks must be a slice"),
        ({"surprise": 1}, r"unknown key\(s\) \['surprise'\] in recipe"),
        # the older spelling of GSPO is refused, naming the registry's loss that replaces it
        ({"loss": {"ratio_level": "sequence"}}, r"ratio_level: sequence.*loss: \{name: gspo\}"),
        ({"loss": {"ratio_level": "seq"}}, r"loss.ratio_level must be token or left out"),
    ],
)
def test_bad_config_fails_early_with_a_fix(tmp_path, patch, message):
    base = {"policy": {"model": "x"}, "env": {"id": "stratagym/SearchQA-v0"}}
    for k, v in patch.items():
        base[k] = {**base.get(k, {}), **v} if isinstance(v, dict) else v
    p = tmp_path / "r.yaml"
    p.write_text(yaml.safe_dump(base))
    with pytest.raises(ConfigError, match=message):
        load_recipe(p)


def test_overrides_and_tiny_model(tmp_path):
    p = tmp_path / "r.yaml"
    p.write_text("policy: {model: tiny}\nenv: {id: stratagym/SearchQA-v0}\n")
    cfg = load_recipe(p, {"train.total_steps": 3, "loss.kl_coef": 0.5})
    assert cfg.train.total_steps == 3 and cfg.loss.kl_coef == 0.5
    assert Path(cfg.policy["model"], "config.json").exists()
    with pytest.raises(ConfigError, match="not valid YAML"):
        (tmp_path / "bad.yaml").write_text("a: [1,\n")
        load_recipe(tmp_path / "bad.yaml")
    with pytest.raises(ConfigError):
        load_recipe(tmp_path / "missing.yaml")


# ---- checkpoints ------------------------------------------------------------------------------------------


class _Saver:
    def __init__(self, fail: bool = False):
        self.fail = fail

    def save_pretrained(self, d):
        Path(d).mkdir(parents=True)
        (Path(d) / "model.safetensors").write_bytes(b"x" * 100)
        if self.fail:
            raise OSError("disk full")


def test_checkpoints_are_atomic_and_pruned(tmp_path):
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, step, policy=_Saver(), optimizer=None, scheduler=None, state={"estimator": {}}, keep_last=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-00000002", "step-00000003"]
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(tmp_path, 4, policy=_Saver(fail=True), optimizer=None, scheduler=None, state={})
    # the failed save left nothing behind, the pointer still names a complete checkpoint
    root = tmp_path / "checkpoints"
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step-00000002", "step-00000003"]
    assert latest_checkpoint(tmp_path).name == "step-00000003"
    data = load_checkpoint(latest_checkpoint(tmp_path))
    assert data["state"]["step"] == 3
    # a crash debris folder (no COMPLETE marker) is never picked, and is cleaned up on load
    (root / ".tmp-step-00000009-x").mkdir()
    (root / "step-00000009").mkdir()
    assert latest_checkpoint(tmp_path).name == "step-00000003"
    load_checkpoint(latest_checkpoint(tmp_path))
    assert not (root / ".tmp-step-00000009-x").exists()


# ---- kill -9 and resume -------------------------------------------------------------------------------------

RESUME_ENV = "stratagym/SearchQA-v0"


def _recipe(tmp_path: Path, out: Path, steps: int) -> Path:
    data = {
        "name": "resume",
        "policy": {"model": "tiny", "max_new_tokens": 16, "memory_k": 1},
        "env": {"id": RESUME_ENV, "kwargs": {"max_turns": 1}},  # 1 search round + the final turn
        "rollout": {"group_size": 2, "tasks_per_step": 2},
        "algorithm": {"estimator": "stratified+hadw", "estimator_kwargs": {"alpha": 0.6}, "format_reward": 0.1,
                      "invalid_action_penalty": 0.05},
        "loss": {"kl_coef": 0.01, "entropy_coef": 0.01},
        "optim": {"lr": 1.0e-3, "micro_batch_size": 4, "mini_batches": 2, "scheduler": "linear"},
        "train": {"total_steps": steps, "seed": 3, "output_dir": str(out), "save_every": 1, "keep_last": 2,
                  "progress": False, "tensorboard": False},
    }
    p = tmp_path / f"{out.name}.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def _train_cmd(recipe: Path, resume: bool = False) -> list[str]:
    cmd = [sys.executable, "-m", "stratagym.cli", "train", "--config", str(recipe)]
    return cmd + (["--resume"] if resume else [])


def _env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    return env


def _metrics(out: Path) -> list[dict]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


@pytest.mark.slow
def test_kill_minus_9_then_resume_matches_uninterrupted_run(tmp_path):
    steps = 6
    ref_out, cut_out = tmp_path / "ref", tmp_path / "cut"
    subprocess.run(_train_cmd(_recipe(tmp_path, ref_out, steps)), check=True, env=_env(), cwd=REPO,
                   capture_output=True, timeout=600)
    reference = _metrics(ref_out)
    assert [r["step"] for r in reference] == list(range(1, steps + 1))

    recipe = _recipe(tmp_path, cut_out, steps)
    proc = subprocess.Popen(_train_cmd(recipe), env=_env(), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seen_incomplete = []
    try:
        wait_for_checkpoint(proc, cut_out, 2, timeout=600)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    root = cut_out / "checkpoints"
    for p in root.iterdir():
        if p.name.startswith("step-") and not (p / "COMPLETE").exists():
            seen_incomplete.append(p.name)
    assert not seen_incomplete, f"half-written checkpoints visible: {seen_incomplete}"
    killed_at = int(latest_checkpoint(cut_out).name.split("-")[1])
    assert 2 <= killed_at < steps

    subprocess.run(_train_cmd(recipe, resume=True), check=True, env=_env(), cwd=REPO, capture_output=True, timeout=600)
    resumed = _metrics(cut_out)
    assert [r["step"] for r in resumed] == list(range(1, steps + 1))
    assert resumed == reference


def test_lora_rl_from_a_saved_adapter_keeps_it_as_kl_reference_and_resumes(tmp_path):
    """RL from a LoRA SFT checkpoint with a KL term: the first step's policy IS the reference (the KL
    of step 1 is 0; with the base as reference it would not be), and a run cut after one step then resumed (the
    checkpoint holds the trained adapter only; the frozen reference adapter is rebuilt from the SFT
    folder) logs the same metrics as the uninterrupted run."""
    from stratagym.agents.llm import LLMConfig, LLMPolicy
    from stratagym.agents.tiny_lm import tiny_lm_path
    from stratagym.training.trainer import Trainer

    base = tiny_lm_path()
    sft = LLMPolicy.from_pretrained(base, config=LLMConfig(model=str(base), lora={"r": 4, "alpha": 8}))
    import torch

    with torch.no_grad():
        for p in sft.parameters():
            p.add_(0.02)
    sft.save_pretrained(tmp_path / "sft")
    start = [{"stage": "sft", "env_id": RESUME_ENV, "split": "train", "task_ids": ["sqa-train-00001"]}]
    write_provenance(tmp_path / "sft", start)

    def run(out: Path, *, steps: int, resume: bool = False) -> list[dict]:
        p = tmp_path / f"{out.name}.yaml"
        p.write_text(yaml.safe_dump({
            "policy": {"model": str(tmp_path / "sft"), "max_new_tokens": 8, "memory_k": 1},
            "env": {"id": RESUME_ENV, "kwargs": {"max_turns": 1}},
            "rollout": {"group_size": 2, "tasks_per_step": 2},
            "loss": {"kl_coef": 0.5, "entropy_coef": 0.05},  # the entropy term moves the adapter when rewards tie
            "optim": {"lr": 5.0e-2, "micro_batch_size": 4},
            "train": {"total_steps": 2, "seed": 1, "output_dir": str(out), "save_every": 1, "progress": False,
                      "tensorboard": False}}))
        trainer = Trainer(load_recipe(p))
        try:
            trainer.train(resume=resume, max_steps=steps)
        finally:
            trainer.close()
        return _metrics(out)

    whole = run(tmp_path / "whole", steps=2)
    assert [r["step"] for r in whole] == [1, 2]
    assert whole[0]["loss/kl"] == pytest.approx(0.0, abs=1e-6)  # the SFT adapter is the reference
    assert whole[1]["loss/kl"] > 1e-6  # the adapter moved away from it
    run(tmp_path / "cut", steps=1)
    assert run(tmp_path / "cut", steps=1, resume=True) == whole
    # the provenance (issue 50 item 5): the start's stages, then every task drawn, across the resume too
    sets = {name: read_provenance(tmp_path / name / "checkpoints" / "step-00000002" / "policy")["training_sets"]
            for name in ("whole", "cut")}
    assert sets["whole"] == sets["cut"] and sets["whole"][0] == start[0]
    rl = sets["whole"][1]
    assert rl["stage"] == "rl" and rl["split"] is None and 1 <= len(rl["task_ids"]) <= 4  # 2 steps x 2 tasks
    assert all(t.startswith("sqa-train-") for t in rl["task_ids"])


def test_resume_refuses_another_compute_dtype_than_the_checkpoints(tmp_path, monkeypatch):
    """``dtype: auto`` resolves per machine. A run started in fp32 and resumed where auto means bf16 (here: a
    CPU claimed to have bf16 instructions) would go on in another numerics without a word: refused, naming
    both dtypes and the two ways on. The same dtype resumes."""
    from stratagym.training.trainer import Trainer

    def config(dtype: str) -> RecipeConfig:
        return RecipeConfig.from_dict({
            "name": "dtype-resume",
            "policy": {"model": "tiny", "max_new_tokens": 8, "memory_k": 1, "dtype": dtype},
            "env": {"id": "stratagym/SearchQA-v0", "kwargs": {"max_turns": 1}},
            "rollout": {"group_size": 2, "tasks_per_step": 1},
            "algorithm": {"estimator": "grpo"},
            "optim": {"lr": 1.0e-3, "micro_batch_size": 8},
            "train": {"total_steps": 2, "output_dir": str(tmp_path / "run"), "save_every": 1, "progress": False,
                      "tensorboard": False},
        })

    monkeypatch.setenv("STRATAGYM_CPU_BF16", "0")  # auto -> float32, whatever this CPU has
    first = Trainer(config("auto"))
    try:
        first.train(max_steps=1)
    finally:
        first.close()
    monkeypatch.setenv("STRATAGYM_CPU_BF16", "1")  # the same recipe on a machine with bf16: auto -> bfloat16
    other = Trainer(config("auto"))
    try:
        with pytest.raises(ConfigError, match=r"step-00000001' was trained in float32, but this run computes in "
                                              r"bfloat16 \(policy.dtype 'auto' here\): a resumed run continues in "
                                              r"the dtype it started in\. .*start a new output_dir from"):
            other.train(resume=True)
    finally:
        other.close()
    same = Trainer(config("float32"))  # fp32 pinned: resumes where the checkpoint left off
    try:
        rows = same.train(resume=True)
    finally:
        same.close()
    assert [r["step"] for r in rows] == [2]
