"""Every registered estimator and every registered policy loss has (a) a per-sample reference in
``stratagym.algorithms.reference`` that it matches, and (b) one end-to-end trainer step, so a new entry
cannot land without both (issue 29 item 2).

The lists come from the registries themselves, not from a hand-kept list here: registering a new estimator
or loss adds a case to each test, which fails until the reference exists and a training step runs.
"""

from __future__ import annotations

import math

import pytest
import torch

from stratagym.algorithms import reference as ref
from stratagym.algorithms.losses import policy_loss
from stratagym.algorithms.registry import AdvantageBatch, get_estimator, get_policy_loss, list_estimators, list_policy_losses

ESTIMATORS = list_estimators()
LOSSES = list_policy_losses()
F64 = torch.float64


def _step_batch(seed: int) -> dict[str, list]:
    """A random batch of step rows carrying every field any estimator reads: 3 task groups, 3 trajectories
    each, 1-3 steps per trajectory, rewards from a small grid (so ties, constant cells and singletons
    happen), steps of each trajectory in shuffled row order."""
    g = torch.Generator().manual_seed(seed)
    rows: list[tuple] = []
    traj = 0
    for group in (10, 11, 12):
        for _ in range(3):
            for s in range(int(torch.randint(1, 4, (1,), generator=g))):
                rows.append((group, traj, s))
            traj += 1
    order = torch.randperm(len(rows), generator=g).tolist()
    rows = [rows[i] for i in order]
    n = len(rows)
    grid = torch.tensor([0.0, 0.25, 0.5, 1.0], dtype=F64)

    def pick(k: int) -> list:
        return torch.randint(0, k, (n,), generator=g).tolist()

    group = [r[0] for r in rows]
    step = [r[2] for r in rows]
    return {
        "rewards": grid[torch.tensor(pick(4))].tolist(),
        "group": group,
        "traj": [r[1] for r in rows],
        "step": step,
        "stratum": pick(2),
        "anchor": pick(2),
        # column k hashes the last k + 1 observations; -1 where the trajectory is shorter than that
        "context": [[h, h * 3 + s if s >= 1 else -1] for h, s in zip(pick(2), step)],
        "lengths": [float(x + 1) for x in pick(5)],
        "baseline": grid[torch.tensor(pick(4))].tolist(),
        "values": (torch.rand(n, generator=g, dtype=F64) - 0.5).tolist(),
    }


def _as_batch(b: dict[str, list]) -> AdvantageBatch:
    ints = {"group", "traj", "step", "stratum", "anchor", "context"}
    return AdvantageBatch(**{k: torch.tensor(v, dtype=torch.long if k in ints else F64) for k, v in b.items()})


def test_importing_the_package_imports_every_family():
    """An estimator registers when its module is imported: a family module the package does not import
    (through ``advantages.py``) would register nothing, and no test here would see its estimators."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    import stratagym.algorithms as alg

    modules = {p.stem for p in Path(alg.__file__).parent.glob("*.py")} - {"__init__", "reference"}
    code = "import json, sys, stratagym.algorithms; print(json.dumps(sorted(sys.modules)))"  # a fresh process
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    loaded = set(json.loads(res.stdout.strip().splitlines()[-1]))
    missing = sorted(m for m in modules if f"stratagym.algorithms.{m}" not in loaded)
    assert not missing, f"import these in stratagym/algorithms/advantages.py: {missing}"
    assert "stratagym.algorithms.reference" not in loaded  # the loops over lists stay out of training


@pytest.mark.parametrize("name", ESTIMATORS)
def test_estimator_matches_its_reference(name):
    assert name in ref.ESTIMATORS, (
        f"estimator {name!r} has no per-sample reference: add it to stratagym/algorithms/reference.py ESTIMATORS")
    est = get_estimator(name)
    checked = 0
    for seed in range(5):
        b = _step_batch(seed)
        got = est(_as_batch(b))
        want = torch.tensor(ref.ESTIMATORS[name](b), dtype=F64)
        assert torch.allclose(got, want, rtol=1e-9, atol=1e-9), (name, seed, got, want)
        checked += int(bool((want != 0).any()))
    assert checked >= 3, f"{name}: the random batches give all-zero advantages, the comparison says little"


def test_switched_and_variant_options_match_the_reference():
    """Options a plain signature does not show: HGPO's ``base_group`` switch, Dr.GRPO's other default."""
    b = _step_batch(7)
    assert set(get_estimator("hgpo").defaults) >= {"gamma", "base_group"}
    got = get_estimator("hgpo", base_group=True, gamma=0.9)(_as_batch(b))
    want = ref.ESTIMATORS["hgpo"](b, base_group=True, gamma=0.9)
    assert torch.allclose(got, torch.tensor(want, dtype=F64), atol=1e-9)
    assert not torch.allclose(got, get_estimator("hgpo", gamma=0.9)(_as_batch(b)))
    assert get_estimator("dr_grpo").defaults["scale"] == "none" and get_estimator("grpo").defaults["scale"] == "group"


@pytest.mark.parametrize("name", LOSSES)
def test_loss_matches_its_reference(name):
    """Value and gradient against ``reference.policy_loss_ref`` on random (B, T) inputs, default options
    (a ``seed`` where the loss draws tokens at random, so both draw the same)."""
    opts = {"seed": 0} if "seed" in get_policy_loss(name).defaults else {}
    g = torch.Generator().manual_seed(3)
    B, T = 4, 6
    old = -torch.rand(B, T, generator=g, dtype=F64) * 2 - 0.05
    lp = (old + 0.3 * (torch.rand(B, T, generator=g, dtype=F64) - 0.5)).clamp(max=-0.01)
    mask = torch.ones(B, T, dtype=F64)
    mask[1, 4:] = 0
    mask[3, 2:] = 0
    adv = torch.tensor([1.5, -0.7, 0.3, -2.0], dtype=F64)
    lp1, lp2 = lp.clone().requires_grad_(True), lp.clone().requires_grad_(True)
    try:
        want = ref.policy_loss_ref(lp2, old, adv.unsqueeze(-1).expand(B, T), mask, loss=name, **opts)
    except ValueError as e:
        pytest.fail(f"policy loss {name!r} has no reference in stratagym/algorithms/reference.py: {e}")
    got, _ = policy_loss(lp1, old, adv, mask, loss=name, **opts)
    assert got.item() == pytest.approx(float(want.detach()), rel=1e-9, abs=1e-12), name
    got.backward()
    if want.requires_grad:
        want.backward()
    g2 = torch.zeros_like(lp2) if lp2.grad is None else lp2.grad
    assert torch.allclose(lp1.grad, g2, rtol=1e-9, atol=1e-12), name
    assert bool((lp1.grad != 0).any()), f"{name}: no gradient on these inputs"


# ---------------------------------------------------------------- one real training step per entry

ENV = "stratagym/SearchStrata-v0"  # synthetic, and reports every metadata key an estimator requires


def _train_once(tmp_path, estimator: str, loss: str) -> dict:
    from stratagym.training.config import RecipeConfig
    from stratagym.training.trainer import Trainer

    cfg = RecipeConfig.from_dict({
        "name": "every", "policy": {"model": "tiny", "max_new_tokens": 6, "memory_k": 1},
        "env": {"id": ENV}, "rollout": {"group_size": 2, "tasks_per_step": 2, "max_turns": 2},
        "algorithm": {"estimator": estimator}, "loss": {"name": loss},
        "optim": {"lr": 1.0e-3, "micro_batch_size": 8},
        "train": {"total_steps": 1, "seed": 0, "output_dir": str(tmp_path / f"{estimator}-{loss}"), "save_every": 0,
                  "progress": False, "tensorboard": False},
    })
    trainer = Trainer(cfg)
    try:
        before = [p.detach().clone() for p in trainer.policy.parameters()]
        batch = trainer.rollout()
        for t in batch.ok:  # hand-set returns: every group holds a success and a failure
            t.steps[-1].reward = float(t.traj % 2)
        row = trainer.update(batch)
        moved = any(not torch.equal(a, b) for a, b in zip(before, trainer.policy.parameters()))
    finally:
        trainer.close()
    assert math.isfinite(row["loss/loss"]), (estimator, loss, row)
    assert moved, f"{estimator} / {loss}: the step left every weight unchanged"
    return row


@pytest.mark.slow
@pytest.mark.parametrize("name", ESTIMATORS)
def test_estimator_trains_one_step(name, tmp_path):
    _train_once(tmp_path, name, "vanilla")


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in LOSSES if n != "vanilla"])  # vanilla: every estimator above
def test_loss_trains_one_step(name, tmp_path):
    _train_once(tmp_path, "grpo", name)
