"""The LLM-level testbed checks (stratagym.studies.testbeds): known answers on hand-built batches, and the
scripted agents on tiny real data (the bundled test_unseen questions, ValueCorridor)."""

from __future__ import annotations

import gymnasium as gym
import pytest

from stratagym.envs.random_agent import RandomAgent
from stratagym.envs.synthetic.agents import OracleAgent as CorridorOracle
from stratagym.studies.testbeds import (
    SEARCHQA_TESTBED,
    CountAgent,
    NoisyAgent,
    context_check,
    difficulty_check,
    format_table,
    main,
    play,
    search_strata_check,
)
from stratagym.training.rollout.records import RolloutBatch, StepRecord, Trajectory


def _step(i, reward, searches=0, context=(0,)):
    return StepRecord(step=i, payload=None, action="", text="", format_ok=True, num_tokens=1, reward=reward,
                      action_valid=True, state_hash=context[0], context=list(context), search_count=searches, info={})


def _traj(n, group, task, rewards, won, searches=0, contexts=None):
    contexts = contexts or [(0,)] * len(rewards)
    steps = [_step(i, r, searches, c) for i, (r, c) in enumerate(zip(rewards, contexts))]
    return Trajectory(traj=n, group=group, task_id=task, seed=0, steps=steps, won=won)


def test_search_strata_check_by_hand():
    # one question, strata 1 and 2; the 2-search stratum pays +0.9 to a wrong answer (an offset)
    batch = RolloutBatch([_traj(0, 0, "q", [1.0], True, 1), _traj(1, 0, "q", [0.0], False, 1),
                          _traj(2, 0, "q", [0.9], False, 2), _traj(3, 0, "q", [1.5], True, 2)])
    out = search_strata_check(batch, lambda t: 2, min_n=1)
    assert out["reward by searches"] == {1: (2, 0.5), 2: (2, pytest.approx(1.2))}
    assert out["cross-stratum gap"] == pytest.approx(0.7)
    assert out["reward by hops x searches"] == {(2, 1): 0.5, (2, 2): pytest.approx(1.2)}
    # GRPO: mean 0.85, so the wrong 0.9 answer gets A > 0: 1 of 4 wrong; within strata nothing is
    assert out["wrong sign: GRPO"] == pytest.approx(0.25)
    assert out["wrong sign: SAN alone"] == 0.0
    assert out["wrong sign: Stratified 0.6"] == 0.0  # 0.6 * (-1) + 0.4 * 0.08 < 0
    assert out["mean advantage by searches: SAN alone"] == {1: pytest.approx(0.0), 2: pytest.approx(0.0)}
    # with min_n above every stratum's size there is no gap to report
    assert search_strata_check(batch, lambda t: 2)["cross-stratum gap"] == 0.0


def test_difficulty_check_by_hand():
    batch = RolloutBatch([_traj(i, 0, "easy", [1.0], True) for i in range(4)]
                         + [_traj(4, 1, "hard", [1.0], True)] + [_traj(5 + i, 1, "hard", [0.0], False) for i in range(3)])
    out = difficulty_check(batch, {"easy": 1, "hard": 3}.get)
    assert out["questions"] == 2
    assert out["mean p_hat"] == pytest.approx(0.625) and out["std of p_hat"] == pytest.approx(0.375)
    assert out["p_hat by hops"] == {1: 1.0, 3: 0.25}
    assert out["tied groups (all right)"] == 0.5 and out["tied groups (all wrong)"] == 0.0
    ratio = out["HA-DW |A| / GRPO |A| by hops (rows with A != 0)"]
    assert ratio[3] > 0 and ratio[1] != ratio[1]  # the tied easy group has no moving row: nan


def test_context_check_by_hand():
    # two episodes meet in state 20 after different states (100 vs 200 at level 1)
    batch = RolloutBatch([_traj(0, 0, "t", [0.0, 1.0], True, contexts=[(10,), (20, 100)]),
                          _traj(1, 0, "t", [0.0, 0.0], False, contexts=[(10,), (20, 200)])])
    out = context_check(batch, levels=(0, 1))
    assert out["steps"] == 4 and out["levels reported"] == 2
    assert out["repeat rate: state"] == 1.0 and out["mean group size: state"] == 2.0
    assert out["repeat rate: history k=1"] == 0.0 and out["mean group size: history k=1"] == 1.0
    assert out["level-0 groups mixing histories (k=1)"] == 0.5  # state 20 mixes two histories, state 10 not
    assert 0.0 < out["nonzero advantage: GiGPO"] <= 1.0


@pytest.fixture(scope="module")
def unseen():
    kw = dict(SEARCHQA_TESTBED)
    env = gym.make("stratagym/SearchQA-v0", **kw)
    hops = {ex.id: ex.hops for ex in env.unwrapped.examples}
    env.close()
    return kw, hops


@pytest.mark.parametrize("k", [0, 1, 2, 3])
def test_count_agent_is_right_exactly_when_it_searched_every_hop(unseen, k):
    kw, hops = unseen
    batch = play("stratagym/SearchQA-v0", kw, lambda env: CountAgent(env, counts={k: 1.0}), n_tasks=8, group_size=2)
    assert len(batch.ok) == 16 and {h for h in (hops[t.task_id] for t in batch.ok)} >= {1, 2}
    for t in batch.ok:
        assert t.search_count == k
        assert t.won == (k >= hops[t.task_id]), (t.task_id, hops[t.task_id], k)
    out = search_strata_check(batch, hops.get, min_n=1)
    assert out["wrong sign: GRPO"] == 0.0  # 0/1 EM within a question: GRPO cannot give a wrong sign


def test_count_agent_mixture_and_noisy_agent_extremes(unseen):
    kw, hops = unseen
    batch = play("stratagym/SearchQA-v0", kw, lambda env: CountAgent(env, counts={1: 1, 2: 1}), n_tasks=6, group_size=8)
    counts = {t.search_count for t in batch.ok}
    assert counts == {1, 2}
    out = search_strata_check(batch, hops.get, min_n=1)
    # 2 searches solve 1- and 2-hop questions, 1 search only 1-hop ones: the 2-search stratum pays more
    assert out["reward by searches"][2][1] >= out["reward by searches"][1][1]
    with pytest.raises(ValueError):
        CountAgent(gym.make("stratagym/SearchQA-v0", **kw), counts={})

    corridor = {"oracle_info": True}
    expert = play("stratagym/ValueCorridor-v0", corridor, lambda env: NoisyAgent(CorridorOracle(env), env, eps=0.0),
                  n_tasks=2, group_size=2)
    assert all(t.won for t in expert.ok)
    noisy = play("stratagym/ValueCorridor-v0", corridor, lambda env: NoisyAgent(CorridorOracle(env), env, eps=1.0, seed=4),
                 n_tasks=2, group_size=2)
    rand = play("stratagym/ValueCorridor-v0", corridor, lambda env: RandomAgent(env, seed=5), n_tasks=2, group_size=2)
    assert [[s.action for s in t.steps] for t in noisy.ok] == [[s.action for s in t.steps] for t in rand.ok]


def test_corridor_oracle_groups_share_every_history_level():
    batch = play("stratagym/ValueCorridor-v0", {"oracle_info": True, "context_k": 2},
                 lambda env: CorridorOracle(env), n_tasks=2, group_size=4)
    out = context_check(batch, levels=(0, 1, 2))
    assert out["repeat rate: state"] == 1.0 and out["repeat rate: history k=2"] == 1.0
    assert out["mean group size: history k=2"] >= 4.0
    table = format_table("t", {"oracle": out})
    assert table.startswith("### t") and "| repeat rate: state | 1.000 |" in table


def test_main_rejects_an_unknown_check(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["strata-typo"])
    assert exc.value.code == 2 and "search-strata" in capsys.readouterr().err


def test_door_blind_groups_mix_lamps_at_the_fork_where_a_fixed_lever_would_not():
    """The HGPO vs GiGPO study's start must bring copies of one group to the fork under both lamps, or
    HGPO's history groups equal GiGPO's state groups and the two estimators cannot differ. The oracle's
    fixed lever gives every copy the same lamp (no level-0 group mixes histories); blind_doors' coin lever
    mixes them (a first registration of the study started from a fixed-lever clone and had to be withdrawn)."""
    from stratagym.envs.synthetic.agents import BlindDoorsAgent

    kw = {"oracle_info": True, "context_k": 4}
    fixed = context_check(play("stratagym/ValueCorridor-v0", kw, lambda env: CorridorOracle(env), n_tasks=2, group_size=8),
                          levels=(0, 2, 4))
    blind = context_check(play("stratagym/ValueCorridor-v0", kw, lambda env: BlindDoorsAgent(env), n_tasks=2, group_size=8),
                          levels=(0, 2, 4))
    assert fixed["level-0 groups mixing histories (k=4)"] == 0.0
    assert blind["level-0 groups mixing histories (k=4)"] > 0.3
    assert blind["mean group size: history k=4"] >= 2.0  # deep groups still hold several steps


def test_webshop_groups_share_pages_and_the_item_page_hides_which_option_was_chosen():
    """WebShop's structure for GiGPO and HGPO (issue 48 item 3): copies of a goal share the search and
    results pages (anchor states), and because the item page reads the same before and after an option
    click, the instruction expert's level-0 group on it pools steps of different histories."""
    from stratagym.envs.webshop.agents import InstructionExpert

    batch = play("stratagym/WebShop-v0", {"split": "train", "max_steps": 15}, lambda env: InstructionExpert(env),
                 n_tasks=4, group_size=4)
    out = context_check(batch, levels=(0, 1, 2))
    assert out["repeat rate: state"] == 1.0  # identical copies: every step has its twins
    options = sum(t.steps[i].action not in ("click[buy now]",) and t.steps[i].action.startswith("click[")
                  and i >= 2 for t in batch.ok for i in range(len(t.steps)))
    assert options > 0  # some goal names an option, clicked on the item page
    assert out["mean group size: state"] > 4  # ... so that page's group holds more steps than copies
    assert out["level-0 groups mixing histories (k=2)"] > 0
