"""The dtype policy (stratagym/precision.py): ``auto`` follows the chip, bf16 is refused where the CPU
cannot compute it, training keeps fp32 weights for what it trains, and records and protocol fingerprints
carry the dtype."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from stratagym.errors import ConfigError
from stratagym.precision import canonical_dtype, cpu_bf16_isa, resolve_dtype


def _no_bf16_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Simulate a CPU without AMX and AVX512-BF16 through torch's own checks (what precision.py asks)."""
    monkeypatch.delenv("STRATAGYM_CPU_BF16", raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)


def _bf16_cpu(monkeypatch: pytest.MonkeyPatch, isa: str = "avx512") -> None:
    monkeypatch.delenv("STRATAGYM_CPU_BF16", raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: isa == "amx")
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)


def test_auto_picks_bf16_where_the_cpu_computes_it_and_fp32_elsewhere(monkeypatch):
    _bf16_cpu(monkeypatch, "amx")
    assert cpu_bf16_isa() == "amx_bf16"
    assert resolve_dtype("auto", "cpu") is torch.bfloat16
    _bf16_cpu(monkeypatch, "avx512")
    assert cpu_bf16_isa() == "avx512_bf16"
    assert resolve_dtype("auto", "cpu") is torch.bfloat16
    _no_bf16_cpu(monkeypatch)
    assert cpu_bf16_isa() is None
    assert resolve_dtype("auto", "cpu") is torch.float32
    assert resolve_dtype("fp32", "cpu") is torch.float32  # float32 runs everywhere


def test_auto_on_this_machine_follows_torchs_own_answer(monkeypatch):
    monkeypatch.delenv("STRATAGYM_CPU_BF16", raising=False)
    native = torch.cpu._is_amx_tile_supported() or torch.cpu._is_avx512_bf16_supported()
    assert resolve_dtype("auto", "cpu") is (torch.bfloat16 if native else torch.float32)


def test_bf16_on_a_cpu_without_it_is_refused_with_the_fix(monkeypatch):
    _no_bf16_cpu(monkeypatch)
    with pytest.raises(ConfigError, match=r"policy.dtype: bfloat16 on cpu: this CPU has neither AMX nor "
                                          r"AVX512-BF16.*Use policy.dtype: auto .* or float32"):
        resolve_dtype("bf16", "cpu")
    with pytest.raises(ConfigError, match="float16 on cpu"):
        resolve_dtype("fp16", "cpu")
    with pytest.raises(ConfigError, match="must be one of auto, float32, bfloat16, float16"):
        canonical_dtype("half-ish")
    monkeypatch.setenv("STRATAGYM_CPU_BF16", "0")  # the documented switch to rehearse such a machine
    with pytest.raises(ConfigError):
        resolve_dtype("bfloat16", "cpu")


def test_a_policy_refuses_bf16_on_such_a_cpu_and_a_bad_name_at_validation(monkeypatch):
    from stratagym.agents.llm import LLMConfig, LLMPolicy
    from stratagym.agents.tiny_lm import tiny_lm_path

    with pytest.raises(ConfigError, match="policy.dtype must be one of"):
        LLMConfig(model="x", dtype="bf17").validate()
    _no_bf16_cpu(monkeypatch)
    with pytest.raises(ConfigError, match="AVX512-BF16"):
        LLMPolicy.from_config(LLMConfig(model=str(tiny_lm_path()), dtype="bfloat16"))


def test_checkpoints_record_the_resolved_dtype_and_old_auto_reads_as_float32(tmp_path, monkeypatch):
    from stratagym.agents.llm import POLICY_CONFIG_FILE, LLMConfig, LLMPolicy
    from stratagym.agents.tiny_lm import tiny_lm_path

    _bf16_cpu(monkeypatch)
    pol = LLMPolicy.from_config(LLMConfig(model=str(tiny_lm_path()), dtype="auto"))
    assert pol.compute_dtype is torch.bfloat16 and next(pol.model.parameters()).dtype is torch.bfloat16
    pol.save_pretrained(tmp_path / "p")
    assert json.loads((tmp_path / "p" / POLICY_CONFIG_FILE).read_text())["dtype"] == "bfloat16"
    again = LLMPolicy.from_pretrained(tmp_path / "p")
    assert again.compute_dtype is torch.bfloat16
    # a checkpoint written before the dtype policy says "auto", which loaded its fp32 weights as saved
    saved = json.loads((tmp_path / "p" / POLICY_CONFIG_FILE).read_text())
    (tmp_path / "p" / POLICY_CONFIG_FILE).write_text(json.dumps({**saved, "dtype": "auto"}))
    assert LLMPolicy.from_pretrained(tmp_path / "p").compute_dtype is torch.float32


def test_a_bf16_checkpoint_on_a_cpu_without_bf16_names_where_the_dtype_came_from(tmp_path, monkeypatch):
    """A bf16 checkpoint loaded where bf16 is not native: the refusal says the dtype is the checkpoint's and
    how to choose another (stratagym eval's -P dtype=float32, a recipe's policy.dtype); choosing one loads it."""
    from stratagym.agents.llm import LLMConfig, LLMPolicy
    from stratagym.agents.tiny_lm import tiny_lm_path

    _bf16_cpu(monkeypatch)
    LLMPolicy.from_config(LLMConfig(model=str(tiny_lm_path()), dtype="bfloat16")).save_pretrained(tmp_path / "p")
    monkeypatch.setenv("STRATAGYM_CPU_BF16", "0")
    with pytest.raises(ConfigError, match=r"p was saved in bfloat16 \(stratagym_policy.json\), and policy.dtype: bfloat16 "
                                          r"on cpu: .* For this checkpoint: stratagym eval -P dtype=float32 \(a float32 "
                                          r"eval is another protocol than a bfloat16 one\), policy.dtype in a recipe"):
        LLMPolicy.from_pretrained(tmp_path / "p")
    with pytest.raises(ConfigError, match=r"^policy.dtype: bfloat16 on cpu"):  # the caller's own choice: the plain refusal
        LLMPolicy.from_pretrained(tmp_path / "p", dtype="bfloat16")
    assert LLMPolicy.from_pretrained(tmp_path / "p", dtype="float32").compute_dtype is torch.float32


def _lora_recipe(tmp_path: Path, sft: Path, out: Path, dtype: str) -> Path:
    p = tmp_path / f"{out.name}.yaml"
    p.write_text(yaml.safe_dump({
        "policy": {"model": str(sft), "max_new_tokens": 8, "memory_k": 1, "dtype": dtype},
        "env": {"id": "stratagym/SearchQA-v0", "kwargs": {"max_turns": 1}},
        "rollout": {"group_size": 2, "tasks_per_step": 2},
        "loss": {"kl_coef": 0.5, "entropy_coef": 0.05},
        "optim": {"lr": 5.0e-2, "micro_batch_size": 4},
        "train": {"total_steps": 2, "seed": 1, "output_dir": str(out), "save_every": 1, "progress": False,
                  "tensorboard": False}}))
    return p


def _metrics(out: Path) -> list[dict]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def test_bf16_lora_training_updates_only_fp32_adapters_and_resumes_exactly(tmp_path, monkeypatch):
    """RL from a saved LoRA adapter with policy.dtype bfloat16: the base (and the frozen reference adapter)
    computes in bf16, the trained adapter stays fp32 and is the only thing that moves; a run cut after one
    step and resumed logs the same metrics as the uninterrupted one; the checkpoint records bfloat16."""
    from stratagym.agents.llm import POLICY_CONFIG_FILE, LLMConfig, LLMPolicy
    from stratagym.agents.policy import unwrap_model
    from stratagym.agents.tiny_lm import tiny_lm_path
    from stratagym.training.config import load_recipe
    from stratagym.training.trainer import Trainer

    _bf16_cpu(monkeypatch)
    base = tiny_lm_path()
    sft = LLMPolicy.from_pretrained(base, config=LLMConfig(model=str(base), lora={"r": 4, "alpha": 8}))
    with torch.no_grad():
        for p in sft.parameters():
            p.add_(0.02)
    sft.save_pretrained(tmp_path / "sft")

    trainer = Trainer(load_recipe(_lora_recipe(tmp_path, tmp_path / "sft", tmp_path / "whole", "bf16")))
    try:
        module = unwrap_model(trainer.policy.model)
        named = dict(module.named_parameters())
        trained = {n for n, p in named.items() if p.requires_grad}
        assert trained and all("lora_" in n and ".default." in n for n in trained)
        assert {named[n].dtype for n in trained} == {torch.float32}
        frozen_base = {n: p.detach().clone() for n, p in named.items() if "lora_" not in n}
        assert {p.dtype for p in frozen_base.values()} == {torch.bfloat16}
        reference = {n: p.detach().clone() for n, p in named.items() if ".reference." in n}
        before = {n: named[n].detach().clone() for n in trained}
        assert trainer.policy.compute_dtype is torch.bfloat16
        trainer.train(max_steps=2)
        assert all(torch.equal(named[n], v) for n, v in frozen_base.items())  # the bf16 base never moves
        assert all(torch.equal(named[n], v) for n, v in reference.items())
        assert any(not torch.equal(named[n], before[n]) for n in trained)
        assert {named[n].dtype for n in trained} == {torch.float32}
    finally:
        trainer.close()
    whole = _metrics(tmp_path / "whole")
    assert whole[0]["loss/kl"] == pytest.approx(0.0, abs=1e-6)  # the SFT adapter is the reference, in bf16 too
    assert whole[0]["parity/max_abs"] < 1.0
    saved = tmp_path / "whole" / "checkpoints" / "step-00000002" / "policy" / POLICY_CONFIG_FILE
    assert json.loads(saved.read_text())["dtype"] == "bfloat16"

    def run(steps: int, resume: bool) -> list[dict]:
        t = Trainer(load_recipe(_lora_recipe(tmp_path, tmp_path / "sft", tmp_path / "cut", "bf16")))
        try:
            t.train(resume=resume, max_steps=steps)
        finally:
            t.close()
        return _metrics(tmp_path / "cut")

    run(1, False)
    assert run(1, True) == whole


def test_a_full_model_loaded_in_bf16_trains_fp32_master_weights_under_autocast(tmp_path, monkeypatch):
    """Full fine-tuning with policy.dtype bfloat16: the weights the optimizer updates are fp32, forward
    passes run under bf16 autocast, and the frozen KL reference is held in bf16."""
    from stratagym.agents.tiny_lm import tiny_lm_path
    from stratagym.training.config import load_recipe
    from stratagym.training.trainer import Trainer

    _bf16_cpu(monkeypatch)
    p = tmp_path / "r.yaml"
    p.write_text(yaml.safe_dump({
        "policy": {"model": str(tiny_lm_path()), "max_new_tokens": 8, "memory_k": 1, "dtype": "bfloat16"},
        "env": {"id": "stratagym/SearchQA-v0", "kwargs": {"max_turns": 1}},
        "rollout": {"group_size": 2, "tasks_per_step": 2},
        "loss": {"kl_coef": 0.1},
        "optim": {"lr": 1.0e-3, "micro_batch_size": 4},
        "train": {"total_steps": 1, "seed": 0, "output_dir": str(tmp_path / "out"), "save_every": 1,
                  "progress": False, "tensorboard": False}}))
    trainer = Trainer(load_recipe(p))
    try:
        pol = trainer.policy
        assert pol.autocast_dtype is torch.bfloat16 and pol.compute_dtype is torch.bfloat16
        assert {q.dtype for q in pol.model.parameters()} == {torch.float32}
        assert {q.dtype for q in trainer.reference.model.parameters()} == {torch.bfloat16}
        before = [q.detach().clone() for q in pol.model.parameters()]
        with pol.compute_context():
            x = torch.tensor([[3, 4, 5]])
            assert pol.model(input_ids=x).logits.dtype is torch.bfloat16  # computed in bf16
        trainer.train(max_steps=1)
        assert any(not torch.equal(a, b) for a, b in zip(before, pol.model.parameters()))
        assert {q.dtype for q in pol.model.parameters()} == {torch.float32}
    finally:
        trainer.close()
    rows = _metrics(tmp_path / "out")
    assert rows[0]["loss/kl"] == pytest.approx(0.0, abs=5e-3)  # bf16 reference vs the same weights under autocast


def test_eval_records_and_fingerprints_carry_the_dtype(tmp_path, monkeypatch):
    """A bf16 eval of a model is another protocol than its fp32 eval: the record names the dtype, the
    fingerprint differs, the board puts the two in different tables; float32 keeps the fingerprint every
    record before the dtype policy had."""
    from stratagym.agents.llm import LLMConfig, LLMPolicy
    from stratagym.agents.tiny_lm import tiny_lm_path
    from stratagym.envs.fingerprint import fingerprint_of, protocol_diff
    from stratagym.eval.harness import EvalConfig, evaluate

    _bf16_cpu(monkeypatch)
    LLMPolicy.from_config(LLMConfig(model=str(tiny_lm_path()), max_new_tokens=16)).save_pretrained(tmp_path / "m")
    recs = {}
    for dtype in ("float32", "bf16"):
        cfg = EvalConfig(agent=str(tmp_path / "m"), env_id="stratagym/SearchQA-v0", n=3, seeds=[0],
                         agent_options={"dtype": dtype})
        recs[dtype] = evaluate(cfg, progress=False)
    fp32, bf16 = recs["float32"], recs["bf16"]
    assert fp32["agent"]["dtype"] == "float32" and bf16["agent"]["dtype"] == "bfloat16"
    assert "dtype" not in fp32["protocol"]["fields"]
    assert bf16["protocol"]["fields"]["dtype"] == "bfloat16"
    assert fp32["protocol"]["fingerprint"] != bf16["protocol"]["fingerprint"]
    assert protocol_diff(fp32["protocol"]["fields"], bf16["protocol"]["fields"]) == ["dtype: float32 vs bfloat16"]
    # fp32 fields hash exactly as they did before the dtype field existed
    assert fingerprint_of(fp32["protocol"]["fields"]) == fp32["protocol"]["fingerprint"]
    assert fingerprint_of({**fp32["protocol"]["fields"], "dtype": "float32"}) == fp32["protocol"]["fingerprint"]

    from stratagym.leaderboard.render import board_tables
    from stratagym.leaderboard.store import Leaderboard

    lb = Leaderboard(tmp_path / "board.db")
    for rec in recs.values():
        lb.submit(rec)
    tables = board_tables(lb)
    assert len(tables) == 2 and {len(t.rows) for t in tables} == {1}
    assert len({t.fingerprint for t in tables}) == 2


def test_an_in_memory_policy_is_recorded_in_its_own_dtype(monkeypatch):
    """The bench and the studies evaluate policies they hold (``agent_factory``): the record names the
    policy's compute dtype, not float32 by default; a scripted-style policy without one records none."""
    from stratagym.agents.llm import LLMConfig, LLMPolicy
    from stratagym.agents.tiny_lm import tiny_lm_path
    from stratagym.eval.harness import EvalConfig, evaluate

    _bf16_cpu(monkeypatch)
    pol = LLMPolicy.from_config(LLMConfig(model=str(tiny_lm_path()), max_new_tokens=8, dtype="bfloat16"))
    cfg = EvalConfig(agent="held-policy", env_id="stratagym/SearchQA-v0", n=2, seeds=[0])
    rec = evaluate(cfg, progress=False, agent_factory=lambda s: pol)
    assert rec["agent"]["dtype"] == "bfloat16" and rec["protocol"]["fields"]["dtype"] == "bfloat16"
    fp32 = LLMPolicy.from_config(LLMConfig(model=str(tiny_lm_path()), max_new_tokens=8))
    rec = evaluate(cfg, progress=False, agent_factory=lambda s: fp32)
    assert rec["agent"]["dtype"] == "float32" and "dtype" not in rec["protocol"]["fields"]
