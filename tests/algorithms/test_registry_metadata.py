"""What code around an estimator or a policy loss needs to know of it is declared on the registry entry,
never matched by name (issue 29): a loss's ``per_sequence`` averaging and its importance ``ratio`` level,
and an estimator's hooks (``share_statistics``, ``join_empty``, ``metrics``). Each test registers a NEW
entry under another name, so it fails if anything still checks the built-in names."""

from __future__ import annotations

import pytest
import torch

from stratagym.algorithms import registry
from stratagym.algorithms.losses import geo_mean_loss, gspo_loss, policy_loss
from stratagym.algorithms.registry import AdvantageBatch, get_estimator, get_policy_loss, register_policy_loss


@pytest.fixture
def scratch_losses():
    before = dict(registry._LOSSES)
    yield
    registry._LOSSES.clear()
    registry._LOSSES.update(before)


def test_builtin_metadata():
    assert get_policy_loss("geo_mean").per_sequence and get_policy_loss("gmpo").per_sequence
    assert get_policy_loss("gspo").ratio == "sequence"
    for name in ("vanilla", "cispo", "sapo", "gpg", "clip_cov", "kl_cov", "dppo_tv", "dppo_kl", "vespo"):
        loss = get_policy_loss(name)
        assert not loss.per_sequence and loss.ratio == "token", name
    with pytest.raises(ValueError, match="ratio must be 'token' or 'sequence'"):
        register_policy_loss("bad_ratio", ratio="tokens")


def test_kl_correction_follows_the_declared_ratio_not_the_name(scratch_losses):
    register_policy_loss("my_seq_ratio", ratio="sequence")(gspo_loss)
    register_policy_loss("my_token_ratio")(gspo_loss)
    g = torch.Generator().manual_seed(0)
    lp = -torch.rand(3, 5, generator=g)
    old = lp.detach() - 0.3 * torch.rand(3, 5, generator=g)
    ref = lp.detach() - 0.2 * torch.rand(3, 5, generator=g)
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1, 3:] = False
    adv = torch.tensor([1.0, -0.5, 0.2])
    kw = dict(ref_logprob=ref, kl_coef=0.1, kl_is_correction=True)
    gspo, _ = policy_loss(lp, old, adv, mask, loss="gspo", **kw)
    mine, _ = policy_loss(lp, old, adv, mask, loss="my_seq_ratio", **kw)
    token, _ = policy_loss(lp, old, adv, mask, loss="my_token_ratio", **kw)
    assert torch.equal(mine, gspo)  # the sequence ratio multiplies the per-token KL, as for GSPO
    assert not torch.allclose(token, gspo)  # a token-ratio loss gets the per-token ratio


def test_a_held_loss_object_equals_the_name_lookup():
    g = torch.Generator().manual_seed(1)
    lp = -torch.rand(2, 4, generator=g)
    old = lp - 0.1
    mask = torch.ones(2, 4, dtype=torch.bool)
    adv = torch.tensor([0.5, -1.0])
    by_name, _ = policy_loss(lp, old, adv, mask, loss="vanilla", clip_low=0.1)
    held, _ = policy_loss(lp, old, adv, mask, loss=get_policy_loss("vanilla", clip_low=0.1))
    assert torch.equal(by_name, held)


def test_trainer_weights_micro_batches_of_a_new_per_sequence_loss_by_rows(scratch_losses, tmp_path):
    """The trainer's micro-batch share comes from ``per_sequence``: a GMPO copy under a new name gets the
    same gradient as ``geo_mean`` when the mini-batch is split into micro-batches of unequal token counts."""
    from tests.trainer.conftest import available
    from stratagym.training.config import RecipeConfig
    from stratagym.training.trainer import Trainer

    if not available("stratagym/CueCorridor-v0"):
        pytest.fail("the synthetic envs are always registered")
    register_policy_loss("my_gmpo", per_sequence=True)(geo_mean_loss)
    grads = {}
    for name in ("geo_mean", "my_gmpo"):
        cfg = RecipeConfig.from_dict({
            "name": "meta", "policy": {"model": "tiny", "max_new_tokens": 10, "memory_k": 1},
            "env": {"id": "stratagym/CueCorridor-v0"}, "rollout": {"group_size": 2, "tasks_per_step": 2, "max_turns": 2},
            "algorithm": {"estimator": "grpo"}, "loss": {"name": name},
            "optim": {"lr": 1.0e-9, "micro_batch_size": 1, "max_grad_norm": 0.0},
            "train": {"total_steps": 1, "seed": 0, "output_dir": str(tmp_path / name), "save_every": 0, "progress": False,
                      "tensorboard": False},
        })
        trainer = Trainer(cfg)
        assert trainer.loss_fn.per_sequence
        batch = trainer.rollout()
        for t in batch.ok:  # hand-set rewards: every group has signal
            t.steps[-1].reward = float(t.traj % 2)
        captured = []
        trainer.optimizer.step = lambda *a, **k: captured.append([p.grad.clone() for p in trainer.policy.parameters()])
        trainer.update(batch)
        grads[name] = captured[0]
        trainer.close()
    assert all(torch.allclose(a, b) for a, b in zip(grads["geo_mean"], grads["my_gmpo"]))


def _batch() -> AdvantageBatch:
    return AdvantageBatch(rewards=torch.tensor([1.0, 0.0, 1.0, 1.0]), group=torch.tensor([0, 0, 1, 1]))


def test_estimator_hooks_plain_and_hadw():
    plain = get_estimator("grpo")
    plain(_batch())
    assert plain.metrics() == {}
    plain.share_statistics(lambda r: 0.0)  # no state that follows the batch: nothing to do
    plain.join_empty()

    hadw = get_estimator("grpo+hadw")
    assert hadw.metrics() == {}  # no batch seen yet
    hadw(_batch())
    assert set(hadw.metrics()) == {"adv/hadw_anchor"}
    calls = []

    def reduce_mean(rewards):
        calls.append(rewards.numel())
        return 0.75

    hadw.share_statistics(reduce_mean)
    hadw(_batch())
    assert calls == [4]  # this process's rewards, averaged with every other process's
    hadw.join_empty()  # a process with no rows still joins the collective
    assert calls == [4, 0]
