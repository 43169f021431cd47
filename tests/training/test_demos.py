"""Expert demonstrations (``stratagym.training.demos``): prompts are the policy's, tasks are train-only,
bad files name their line.

The record layout follows TRL's conversational dataset format (``{"messages": [{"role", "content"}]}``,
trl/data_utils.py ``is_conversational``), checked here with TRL itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from stratagym.agents.policy import Turn
from stratagym.agents.prompts import SEARCH_R1, THINK_ACTION
from stratagym.errors import ConfigError
from stratagym.training.demos import (DemosFormatError, collect_demos, episode_messages, expert_completion,
                                      read_demos, write_demos)

ENV = "stratagym/SearchQA-v0"
SHORT = "Search with <search> query </search>, answer with <answer> answer </answer>. Question: {question}\n"
KW = {"topk": 3, "max_turns": 4, "prompt_template": SHORT}


@pytest.fixture(scope="module")
def demos() -> list[dict]:
    return collect_demos(ENV, "scripted:oracle", split="train", n=12, env_kwargs=KW, memory_k=2)


def test_first_turn_is_the_question_and_the_oracle_search(demos):
    """Known answer from data/search_qa/train.jsonl row 0 (a 3-hop question with its oracle queries)."""
    row = json.loads(Path("data/search_qa/train.jsonl").read_text().splitlines()[0])
    rec = next(r for r in demos if r["task_id"] == row["id"])
    first = rec["turns"][0]
    assert first["prompt"] == [{"role": "user", "content": SHORT.format(question=row["question"])}]
    q1 = row["metadata"]["oracle_queries"][0]
    assert first["completion"] == f"<think>I need hop 1 of 3.</think>\n<search> {q1} </search>"
    assert rec["turns"][-1]["completion"].endswith(f"<answer> {row['golden_answers'][0]} </answer>")
    assert len(rec["turns"]) == 4 and rec["won"] and rec["score"] == 1.0


def test_prompts_are_the_templates_with_the_memory_rule(demos):
    """Turn t's prompt is SEARCH_R1.build(obs_t, info, history of (obs, action) turns, memory_k): rebuild the
    history from the recorded completions and the observations found in the next prompts."""
    for rec in demos:
        history: list[Turn] = []
        obs0 = rec["turns"][0]["prompt"][0]["content"]
        for t, turn in enumerate(rec["turns"]):
            if t > 0:
                assistant = turn["prompt"][-1]["content"]
                # the current observation is the last <information> block of this prompt
                obs = assistant[assistant.rindex("<information>"):].rstrip("\n")
            else:
                obs = obs0
            assert turn["prompt"] == SEARCH_R1.build(obs, {}, tuple(history), 2)
            history.append(Turn(obs0 if t == 0 else obs, turn["completion"]))
        # memory_k = 2: the 4th prompt of a 3-hop episode no longer shows the first search
        if len(rec["turns"]) == 4:
            first_search = rec["turns"][0]["completion"]
            assert first_search not in rec["turns"][3]["prompt"][-1]["content"]


def test_messages_field_is_a_trl_conversation(demos):
    from trl.data_utils import is_conversational

    for rec in demos:
        assert is_conversational({"messages": rec["messages"]})
        assert rec["messages"] == episode_messages(rec["turns"])
        assert rec["messages"][-1]["content"].endswith(rec["turns"][-1]["completion"])


def test_only_train_tasks(demos):
    train = {json.loads(l)["id"] for l in Path("data/search_qa/train.jsonl").read_text().splitlines()}
    test = {json.loads(l)["id"] for l in Path("data/search_qa/test.jsonl").read_text().splitlines()}
    ids = {r["task_id"] for r in demos}
    assert ids <= train and not ids & test
    assert all(r["split"] == "train" for r in demos)


def test_test_split_refused():
    with pytest.raises(ConfigError, match="train split"):
        collect_demos(ENV, "scripted:oracle", split="test", n=2, env_kwargs=KW)


def test_train_split_sharing_a_task_with_test_refused(tmp_path):
    """A custom dataset whose train file repeats a test question: the split name alone would pass."""
    rows = [json.loads(l) for l in Path("data/search_qa/train.jsonl").read_text().splitlines()[:3]]
    test_rows = [json.loads(l) for l in Path("data/search_qa/test.jsonl").read_text().splitlines()[:3]]
    leaked = dict(test_rows[0])
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows + [leaked]))
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in test_rows))
    with pytest.raises(ConfigError, match="shares 1 task"):
        collect_demos(ENV, "scripted:oracle", split="train", env_kwargs={**KW, "dataset": str(tmp_path)})


def test_think_action_completion_wraps_the_bare_action():
    text = expert_completion(THINK_ACTION, "go to countertop 1")
    parsed = THINK_ACTION.parse(text)
    assert parsed.action == "go to countertop 1" and parsed.format_ok
    assert text.startswith("<think>") and text.endswith("<action> go to countertop 1 </action>")
    # a Search-R1 turn that is already well-formed stays as written
    turn = "<think>x</think>\n<search> q </search>"
    assert expert_completion(SEARCH_R1, turn) == turn


def test_roundtrip_and_bad_lines(tmp_path, demos):
    path = write_demos(demos[:3], tmp_path / "d.jsonl")
    assert read_demos(path) == demos[:3]
    lines = path.read_text().splitlines(keepends=True)
    truncated = tmp_path / "trunc.jsonl"
    truncated.write_text(lines[0] + lines[1] + lines[2][: len(lines[2]) // 2])
    with pytest.raises(DemosFormatError, match=r"line 3 is not valid JSON.*truncated"):
        read_demos(truncated)
    missing = tmp_path / "missing.jsonl"
    missing.write_text(lines[0] + json.dumps({"messages": []}) + "\n")
    with pytest.raises(DemosFormatError, match=r"line 2: missing key"):
        read_demos(missing)
    bad_turn = tmp_path / "badturn.jsonl"
    rec = dict(demos[0], turns=[{"prompt": "not a list", "completion": "x"}])
    bad_turn.write_text(json.dumps(rec) + "\n")
    with pytest.raises(DemosFormatError, match=r"line 1: turn 0"):
        read_demos(bad_turn)


def test_cli_refuses_test_split_without_traceback(tmp_path):
    out = tmp_path / "d.jsonl"
    proc = subprocess.run([sys.executable, "-m", "stratagym.cli", "demos", "collect", "--env", ENV, "--split", "test",
                           "--n", "2", "--out", str(out)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "train split" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()


def test_cli_collects(tmp_path):
    out = tmp_path / "d.jsonl"
    proc = subprocess.run([sys.executable, "-m", "stratagym.cli", "demos", "collect", "--env", ENV, "--n", "3",
                           "--memory-k", "4", "-E", f"prompt_template={json.dumps(SHORT)}", "--out", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    recs = read_demos(out)
    assert len(recs) == 3 and all(r["memory_k"] == 4 for r in recs)
    assert recs[0]["turns"][0]["prompt"][0]["content"].startswith("Search with <search>")


def test_cli_collects_reasons_and_refuses_them_from_an_expert_that_gives_none(tmp_path):
    """``--reasons`` is the recipes' ``demos.reasons`` from the command line (scripts/device/job-reasons.sh packs
    demonstrations made with it); an expert without reasons is a user error, not a traceback."""
    out = tmp_path / "d.jsonl"
    proc = subprocess.run([sys.executable, "-m", "stratagym.cli", "demos", "collect", "--env", "stratagym/WebShop-v0",
                           "--agent", "scripted:expert", "--n", "2", "--memory-k", "0", "--reasons", "--out", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    recs = read_demos(out)
    assert recs and all(r["reasons"] is True for r in recs)
    assert recs[0]["turns"][0]["completion"].startswith("<think>I search with the words of the instruction.</think>")
    proc = subprocess.run([sys.executable, "-m", "stratagym.cli", "demos", "collect", "--env", ENV, "--n", "1",
                           "--reasons", "--out", str(tmp_path / "o.jsonl")], capture_output=True, text=True)
    assert proc.returncode == 2 and "states no reasons" in proc.stderr and "Traceback" not in proc.stderr


def test_several_episodes_per_task_and_a_demonstrator_meant_to_lose():
    """ValueCorridor has 8 tasks whose episodes differ by reset seed: episodes_per_task plays each task
    with seeds seed, seed+1, ...; the door-blind demonstrator loses most episodes, and dropping those
    (only_won) would keep exactly the episodes that took the best door at every fork."""
    vc = "stratagym/ValueCorridor-v0"
    kept = collect_demos(vc, "scripted:blind_doors", n=2, seed=5, episodes_per_task=6, only_won=False)
    assert sorted((r["task_id"], r["seed"]) for r in kept) == [(t, s) for t in ("maze00", "maze01") for s in range(5, 11)]
    assert any(not r["won"] for r in kept) and all(len(r["turns"]) == 12 for r in kept)
    won_only = collect_demos(vc, "scripted:blind_doors", n=2, seed=5, episodes_per_task=6)
    assert [r for r in kept if r["won"]] == won_only
    with pytest.raises(ConfigError, match="episodes per task"):
        collect_demos(vc, "scripted:blind_doors", episodes_per_task=0)
