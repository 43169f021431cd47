"""Dynamic sampling (DAPO / verl filter_groups): groups whose returns all tie are dropped and more tasks are
drawn until the batch holds the requested number of informative groups, capped in rounds."""

import math

import pytest
import torch

from stratagym.algorithms import get_estimator, list_estimators
from stratagym.training.rollout import RolloutBatch, StepRecord, Trajectory, to_advantage_batch
from stratagym.training.rollout.dynamic import collect_informative


def _traj(group: int, rewards: list[float], j: int = 0) -> Trajectory:
    steps = [StepRecord(step=k, payload=None, action="a", text="a", format_ok=True, num_tokens=3 + k, reward=r,
                        action_valid=True, state_hash=k, context=[k, -1], search_count=k, info={})
             for k, r in enumerate(rewards)]
    return Trajectory(traj=group * 10 + j, group=group, task_id=f"t{group}", seed=0, steps=steps)


def _batch(groups: dict[int, list[list[float]]]) -> RolloutBatch:
    trajs = [_traj(g, rs, j) for g, members in groups.items() for j, rs in enumerate(members)]
    return RolloutBatch(trajs, generate_seconds=1.0, env_seconds=0.5, total_seconds=2.0, generated_tokens=7, turns=2)


def test_keeps_drawing_until_enough_informative_groups():
    """Round 1: group 0 ties (1, 1), group 1 differs (0 vs 1).  Round 2: group 0 ties (0, 0), group 1 differs,
    group 2 is a single trajectory (kept by verl's rule, but the target of 2 is already met).  Dropped: one
    group per round out of 5 drawn -> filtered_frac 0.4."""
    draws = iter([_batch({0: [[1.0], [1.0]], 1: [[0.0], [1.0]]}),
                  _batch({0: [[0.0], [0.0]], 1: [[1.0], [0.0, 0.5]], 2: [[0.5]]})])
    out = collect_informative(lambda: next(draws), 2, max_rounds=4)
    assert [t.group for t in out.trajectories] == [0, 0, 1, 1]
    assert [t.traj for t in out.trajectories] == [0, 1, 2, 3]  # unique across rounds
    assert [t.train_return for t in out.trajectories] == [0.0, 1.0, 1.0, 0.5]
    m = out.metrics()
    assert m["rollout/filter_rounds"] == 2 and m["rollout/informative_groups"] == 2
    assert m["rollout/filtered_frac"] == pytest.approx(2 / 5)
    assert out.generate_seconds == 2.0 and out.generated_tokens == 14 and out.turns == 4


def test_round_cap_and_nothing_informative():
    """After max_rounds the groups found so far are trained on; with none at all, the last draw is returned
    unchanged (its advantages are 0, as without filtering) and the metrics say so."""
    n = {"draws": 0}

    def draw():
        n["draws"] += 1
        return _batch({0: [[1.0], [1.0]], 1: [[0.0], [0.0]]})

    out = collect_informative(draw, 3, max_rounds=3)
    assert n["draws"] == 3 and len(out.trajectories) == 4
    m = out.metrics()
    assert m["rollout/informative_groups"] == 0 and m["rollout/filtered_frac"] == 1.0
    draws = iter([_batch({0: [[1.0], [0.0]]}), _batch({0: [[1.0], [1.0]]})])
    out = collect_informative(lambda: next(draws), 3, max_rounds=2)
    assert len(out.trajectories) == 2 and out.metrics()["rollout/informative_groups"] == 1
    with pytest.raises(ValueError):
        collect_informative(draw, 0, max_rounds=1)


@pytest.mark.parametrize("name", [n for n in list_estimators() if n not in ("remax", "gae")] + ["grpo+hadw", "gigpo+hadw"])
def test_every_estimator_works_on_a_filtered_batch(name):
    """The kept groups are an ordinary batch: trajectory- and step-level estimators run on it, and no kept
    group is constant, so group-relative estimators give some non-zero advantage (stratified works within
    (group, search count) cells, which are single rows here).  (ReMax's greedy baselines and GAE's
    critic values are filled by the trainer: both run with dynamic sampling in test_remax.py and
    test_ppo_critic.py.)"""
    draws = iter([_batch({0: [[1.0, 0.5], [1.0]], 1: [[0.0], [1.0, 1.0]], 2: [[0.5], [0.5]]}),
                  _batch({0: [[0.0], [0.25, 0.0]], 1: [[1.0], [1.0]]})])
    out = collect_informative(lambda: next(draws), 3, max_rounds=3)
    assert out.metrics()["rollout/informative_groups"] == 3
    est = get_estimator(name)
    rows, sample_row, samples = to_advantage_batch(out, est.level)
    adv = est(rows)
    assert adv.shape[0] == len(rows) and bool(torch.isfinite(adv).all())
    assert len(samples) == sample_row.shape[0] == sum(len(t.steps) for t in out.trajectories)
    if not name.startswith("stratified"):  # its cells split groups by search count: here all of one row
        assert bool((adv != 0).any()), name


@pytest.mark.slow
def test_trainer_step_with_dynamic_sampling(tmp_path):
    """A real training step on SearchQA with the tiny model: the filter's metrics are logged and the loss is finite."""
    from tests.trainer.conftest import available
    from tests.trainer.test_trainer_e2e import ENVS, _config
    from stratagym.training.trainer import Trainer

    env = "stratagym/SearchQA-v0"
    if not available(env):
        pytest.skip("SearchQA data not available")
    cfg = _config(env, ENVS[env], str(tmp_path / "run"), **{"rollout.filter_groups": True,
                                                            "rollout.max_filter_rounds": 2})
    trainer = Trainer(cfg)
    try:
        row = trainer.train_step()
    finally:
        close = getattr(trainer, "close", None)
        if close:
            close()
    assert 1 <= row["rollout/filter_rounds"] <= 2
    assert 0.0 <= row["rollout/filtered_frac"] <= 1.0
    assert math.isfinite(row["loss/loss"])


def test_round_quotas_known_answers():
    """Processes are served in rank order, each from its first informative groups, until the global
    target is met: the first ``target`` informative groups in (round, rank, group) order."""
    from stratagym.training.rollout.dynamic import round_quotas

    assert round_quotas([3], 0, 2) == [2]  # one process: min(count, target - kept), the single-process rule
    assert round_quotas([1, 3], 1, 4) == [1, 2]  # the cut falls inside rank 1's groups
    assert round_quotas([2, 2], 3, 4) == [1, 0]  # rank 0 fills the target; rank 1 keeps nothing this round
    assert round_quotas([0, 2, 5], 0, 4) == [0, 2, 2]  # a rank with no informative group takes nothing
    assert round_quotas([2, 2], 4, 4) == [0, 0]
    assert round_quotas([], 0, 4) == []


def _informative(flags: list[int], base: int) -> RolloutBatch:
    """One draw of len(flags) groups of two (group g is task t{base + g}): informative where flags[g]."""
    return RolloutBatch([Trajectory(traj=2 * g + j, group=g, task_id=f"t{base + g}", seed=0,
                                    steps=[StepRecord(step=0, payload=None, action="a", text="a", format_ok=True,
                                                      num_tokens=3, reward=float(j * f), action_valid=True,
                                                      state_hash=0, context=[0, -1], search_count=0, info={})])
                         for g, f in enumerate(flags) for j in range(2)])


@pytest.mark.parametrize("table, target, max_rounds", [
    ([[0, 0, 0, 1], [0, 0, 1, 1], [0, 0, 1, 1], [1, 1, 1, 1]], 4, 5),  # process 0 keeps nothing
    ([[1, 0, 1, 1], [1, 1, 1, 1]], 4, 5),  # process 0 completes the target; process 1's round-2 groups are cut
    ([[0, 0, 0, 1], [0, 0, 0, 0], [0, 0, 0, 0]], 4, 3),  # round cap: one group found
    ([[0, 0, 0, 0], [0, 0, 0, 0]], 4, 2),  # nothing informative: each process returns its last draw
])
def test_processes_keep_what_one_process_keeps(table, target, max_rounds):
    """Two 'processes' (threads whose gather is a barrier) each draw their half of every round's global
    list; they run the same number of rounds, report the same global metrics, and together keep exactly
    the groups one process drawing the whole list keeps (in rank order)."""
    from stratagym.testing.threads import run_as_processes

    procs, half = 2, len(table[0]) // 2
    draws = [0] * procs

    def run(rank: int, all_gather) -> RolloutBatch:
        rows = iter(table)

        def draw() -> RolloutBatch:
            k = draws[rank]
            draws[rank] += 1
            return _informative(next(rows)[rank * half:(rank + 1) * half], 100 * k + rank * half)

        return collect_informative(draw, target, max_rounds=max_rounds, rank=rank,
                                   gather=lambda local: [list(x) for x in all_gather(local)])

    results = run_as_processes(procs, run)
    k = {"n": 0}

    def draw_all() -> RolloutBatch:
        i = k["n"]
        k["n"] += 1
        return _informative(table[i], 100 * i)

    one = collect_informative(draw_all, target, max_rounds=max_rounds)
    assert draws[0] == draws[1] == k["n"]
    m = [r.metrics() for r in results]
    for key in ("rollout/filter_rounds", "rollout/informative_groups", "rollout/filtered_frac"):
        assert m[0][key] == m[1][key] == one.metrics()[key], key
    # task t{100 * round + index in the global list}: in id order, (round, rank, group) order
    tasks = sorted((t.task_id for r in results for t in r.trajectories), key=lambda x: int(x[1:]))
    assert tasks == [t.task_id for t in one.trajectories]
    for r in results:  # each process's kept groups are numbered 0.. locally, as an ordinary batch
        assert [t.group for t in r.trajectories] == [i // 2 for i in range(len(r.trajectories))]


def test_renumbering_does_not_merge_groups():
    """Round 1 keeps one group (new id 0), round 2 keeps its groups 0 and 1: group 0 becomes 1, and group 1
    (old id 1) must still be kept once, as group 2 (renumbering in place once merged the two and kept
    group 0's trajectories twice)."""
    draws = iter([_informative([1, 0], 0), _informative([1, 1], 10)])
    out = collect_informative(lambda: next(draws), 3, max_rounds=2)
    assert [(t.task_id, t.group) for t in out.trajectories] == [
        ("t0", 0), ("t0", 0), ("t10", 1), ("t10", 1), ("t11", 2), ("t11", 2)]
    assert [t.traj for t in out.trajectories] == list(range(6))
