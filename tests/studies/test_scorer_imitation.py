"""The scorer's warm start: goal features, behaviour cloning of a scripted expert, and a study that
clones before RL (stratagym/training/scorer_imitation.py, the studies' ``goal`` and ``warm_start``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import stratagym  # noqa: F401
from stratagym.agents.policy import GenerationRequest, Turn
from stratagym.agents.scorer import Featurizer, ScorerPolicy, goal_text
from stratagym.errors import ConfigError
from stratagym.studies.definitions import get_study, study_from_dict
from stratagym.studies.runner import recipe_for, run_one
from stratagym.training.scorer_imitation import collect_scorer_demos, imitate

ALFWORLD_FIRST = ("-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly around you, "
                  "you see a desk 1, and a shelf 1.\n\nYour task is to: put some mug on desk.")


def test_goal_text_reads_each_family_goal():
    assert goal_text(ALFWORLD_FIRST) == "put some mug on desk."
    assert goal_text("WebShop [SEP] Instruction: [SEP] i need a red  shirt [SEP] Search") == "i need a red shirt"
    assert goal_text("A cue:\n the lamp is gold") == "A cue: the lamp is gold"  # no stated goal: the whole text


def _request(history_len: int) -> GenerationRequest:
    history = [Turn(ALFWORLD_FIRST, "go to shelf 1")] + [Turn(f"obs {i}", f"act {i}") for i in range(1, history_len)]
    info = {"admissible_actions": ["take mug 1 from shelf 1", "go to desk 1", "look"]}
    return GenerationRequest("On the shelf 1, you see a mug 1.", info, history, "stratagym/ALFWorld-v0")


def test_goal_features_are_off_by_default_and_kept_at_every_turn_when_on():
    req = _request(6)  # the goal's turn is older than the scorer's memory of 2
    f = Featurizer()
    plain = ScorerPolicy(seed=0, memory=2)
    ctx, cands, actions = plain._encode(req)
    expected_ctx = f.context(req.observation, [(t.observation, t.action) for t in req.history[-2:]])
    np.testing.assert_array_equal(ctx, expected_ctx)  # off: the features studies were run with
    np.testing.assert_array_equal(cands[0], f.candidate(actions[0], req.observation))

    with_goal = ScorerPolicy(seed=0, memory=2, goal=True)
    gctx, gcands, _ = with_goal._encode(req)
    np.testing.assert_array_equal(gctx, np.concatenate([expected_ctx, f.text("g", "put some mug on desk.")]))
    # "take mug 1 from shelf 1" repeats one goal word (mug), "go to desk 1" one (desk), "look" none
    n = f.buckets
    assert list(gcands[0][len(cands[0]):]) == [f.goal_overlap("mug", "mug")[0], f.goal_overlap("mug", "mug")[1]]
    assert len(gcands[1]) - len(cands[1]) == 2 and len(gcands[2]) == len(cands[2])
    assert all(0 <= i < n for c in gcands for i in c)


def test_goal_option_survives_save_and_load(tmp_path):
    policy = ScorerPolicy(seed=1, hidden=8, goal=True)
    policy.save_pretrained(str(tmp_path))
    assert ScorerPolicy.from_pretrained(str(tmp_path)).config.goal is True


ENV = "stratagym/CueCorridor-v0"


def test_demonstrations_record_the_experts_choices_and_cloning_reproduces_them():
    scorer = ScorerPolicy(seed=0, hidden=16, memory=4)
    demos = collect_scorer_demos(scorer, ENV, "scripted:oracle")
    summary = demos.summary()
    assert summary["episodes"] == summary["won"] == summary["tasks"] > 0 and summary["off_list_turns"] == 0
    assert summary["turns"] == len(demos.payloads) > summary["episodes"]
    before = [p.chosen for p in demos.payloads]
    history = imitate(scorer, demos, epochs=40, lr=0.05, batch_size=32, seed=0)
    assert history[0]["loss"] > history[-1]["loss"] and history[-1]["accuracy"] == 1.0
    greedy = scorer.sequence_log_probs(demos.payloads).logprobs  # log-prob of each demonstrated choice
    assert (greedy.exp() > 0.5).all()
    assert [p.chosen for p in demos.payloads] == before  # cloning does not touch the demonstrations

    # the same demonstrations and seed give the same weights; the global random stream is left alone
    a, b = ScorerPolicy(seed=0, hidden=16), ScorerPolicy(seed=0, hidden=16)
    torch.manual_seed(123)
    state = torch.random.get_rng_state()
    imitate(a, demos, epochs=3, lr=0.05, batch_size=7, seed=5)
    assert torch.equal(torch.random.get_rng_state(), state)
    imitate(b, demos, epochs=3, lr=0.05, batch_size=7, seed=5)
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)


def test_demonstrations_refuse_an_evaluation_split_and_bad_options():
    scorer = ScorerPolicy(seed=0)
    with pytest.raises(ConfigError, match="train split"):
        collect_scorer_demos(scorer, "stratagym/ALFWorld-v0", "scripted:searcher", split="in_distribution", n=1)
    with pytest.raises(ConfigError, match="no splits"):
        collect_scorer_demos(scorer, ENV, "scripted:oracle", split="test")
    with pytest.raises(ConfigError, match="scripted agent"):
        collect_scorer_demos(scorer, ENV, "scripted:")
    with pytest.raises(ConfigError, match="nope"):
        collect_scorer_demos(scorer, ENV, "scripted:nope")
    demos = collect_scorer_demos(scorer, ENV, "scripted:oracle", n=1)
    with pytest.raises(ConfigError, match="epochs"):
        imitate(scorer, demos, epochs=-1, lr=0.1)


def test_the_searcher_demonstrates_alfworld_in_the_scorers_features():
    """The real engine: the searcher's turns on two train games are all admissible, so none is dropped."""
    scorer = ScorerPolicy(seed=0, goal=True)
    demos = collect_scorer_demos(scorer, "stratagym/ALFWorld-v0", "scripted:searcher",
                                 env_kwargs={"task_types": ["look_at_obj_in_light"], "max_steps": 50}, n=2)
    summary = demos.summary()
    assert {k: summary[k] for k in ("episodes", "won", "off_list_turns", "tasks")} == {
        "episodes": 2, "won": 2, "off_list_turns": 0, "tasks": 2}
    assert summary["turns"] == len(demos.payloads) and len(summary["tasks_sha256"]) == 16
    assert len(demos.payloads) >= 4


# ---- the study fields -------------------------------------------------------------------------------

def _study(**extra):
    data = {"name": "mine", "title": "t", "claim": "c", "env": ENV, "methods": ["grpo", "gigpo"], **extra}
    return study_from_dict(data, where="mine.yaml")


def test_warm_start_is_checked_and_filled_with_its_defaults():
    study = _study(warm_start={"agent": "scripted:oracle", "epochs": 5})
    assert study.warm_start == {"agent": "scripted:oracle", "episodes_per_task": 1, "epochs": 5, "lr": 0.01,
                                "batch_size": 256}
    assert _study().warm_start == {} and _study().goal is False
    for bad, match in (({"agent": "oracle"}, "scripted agent"), ({"epochs": 3}, "scripted agent"),
                       ({"agent": "scripted:oracle", "epochs": 0}, "epochs must be"),
                       ({"agent": "scripted:oracle", "lr": "fast"}, "lr must be"),
                       ({"agent": "scripted:oracle", "steps": 3}, "unknown key")):
        with pytest.raises(ConfigError, match=match):
            _study(warm_start=bad)
    with pytest.raises(ConfigError, match="goal must be"):
        _study(goal="yes")


def test_a_warm_started_run_starts_from_the_clone_the_same_for_every_arm(tmp_path):
    study = get_study("context").with_overrides(
        iterations=1, tasks_per_iteration=2, group_size=2, eval_every=1, eval_episodes_per_task=2, n_seeds=1,
        # 4 episodes a task: CueCorridor's cue changes with the reset seed, and one seed's clone memorises it
        warm_start={"agent": "scripted:oracle", "episodes_per_task": 4, "epochs": 40, "lr": 0.05, "batch_size": 32})
    assert recipe_for(study, study.methods[0], 0, str(tmp_path)).policy.get("goal") is None
    cold = run_one(study.with_overrides(warm_start={}), study.methods[0], 0, final_episodes_per_task=1)
    warm = [run_one(study, m, 0, final_episodes_per_task=1) for m in study.methods[:2]]
    assert cold.imitation is None and cold.curve[0]["success"] < 0.5  # random play
    for run in warm:
        assert run.imitation["accuracy"] == 1.0
        assert run.curve[0]["success"] == 1.0  # iteration 0 is the clone: it plays the oracle's moves on new seeds
        assert run.to_dict()["imitation"] == run.imitation
    assert warm[0].curve[0] == warm[1].curve[0]
