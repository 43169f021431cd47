"""Train/test overlap against the questions a checkpoint really trained on (issue 50 item 5).

The tiny QA dataset is written so every flag is known by hand: test question ``e1``'s gold answer ("Zedrin")
is the answer of train question ``t1`` and of nothing else; ``e2``'s ("Morvath") is nobody's. No question
names supporting passages and no two questions share most of their words, so only the answer flag can fire.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from stratagym.errors import ConfigError
from stratagym.eval.records import content_hash_path
from stratagym.eval.transcripts import find_transcripts, same_outcome
from stratagym.envs.search_qa.overlap import audit_dataset, training_overlap
from stratagym.provenance import provenance_digest, read_provenance, training_set, write_provenance
from tests.search_qa.test_overlap import run_main
from tests.training.test_provenance import ENV, _sft_set, dataset  # noqa: F401  (dataset: the fixture)


def test_overlap_is_measured_against_exactly_the_trained_questions(dataset):
    kwargs = {"dataset": str(dataset)}
    # the whole train split (the env's own flag): e1 shares t1's answer
    assert [a.any for a in audit_dataset(str(dataset), ["test"])] == [1]
    # trained on t1 only: the same; trained on t2 only: nothing overlaps
    assert training_overlap(kwargs, "test", [_sft_set(dataset, ["t1"])]) == {"e1": True, "e2": False}
    assert training_overlap(kwargs, "test", [_sft_set(dataset, ["t2"])]) == {"e1": False, "e2": False}
    # several stages: their union
    sets = [_sft_set(dataset, ["t2"]), training_set(stage="rl", env_id=ENV, split="train", task_ids=["t1"],
                                                    data_kwargs=kwargs)]
    assert training_overlap(kwargs, "test", sets) == {"e1": True, "e2": False}
    assert [a.any for a in audit_dataset(str(dataset), ["test"], training_sets=[_sft_set(dataset, ["t2"])])] == [0]


def test_changed_or_foreign_training_data_is_refused(dataset):
    ts = _sft_set(dataset, ["t1"])
    with pytest.raises(ConfigError, match="lacks.*first: 'nope'"):
        training_overlap({"dataset": str(dataset)}, "test", [{**ts, "task_ids": ["nope"]}])
    with (dataset / "train.jsonl").open("a") as fh:
        fh.write(json.dumps({"id": "t3", "question": "Another?", "golden_answers": ["Morvath"]}) + "\n")
    with pytest.raises(ConfigError, match="changed since the checkpoint trained on it"):
        training_overlap({"dataset": str(dataset)}, "test", [ts])


def test_envs_audit_takes_a_checkpoints_training_set(capsys, tmp_path, dataset):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    code, text = run_main(capsys, "envs", "audit", str(dataset), "--checkpoint", str(ckpt))
    assert code == 2 and "has no training_data.json naming SearchQA training data" in text and "Traceback" not in text
    write_provenance(ckpt, [_sft_set(dataset, ["t2"])])
    code, text = run_main(capsys, "envs", "audit", str(dataset), "--checkpoint", str(ckpt), "--json")
    assert code == 0, text
    assert [(r["split"], r["answer"], r["any"]) for r in json.loads(text)] == [("test", 0, 0)]
    code, text = run_main(capsys, "envs", "audit", str(dataset), "--json")
    assert [(r["split"], r["answer"], r["any"]) for r in json.loads(text)] == [("test", 1, 1)]
    code, text = run_main(capsys, "envs", "audit", str(dataset), "--checkpoint", str(ckpt))
    assert code == 0 and "against the 1 questions" in text


@pytest.mark.slow
def test_an_eval_of_a_checkpoint_with_provenance_splits_em_by_its_training_set(tmp_path, dataset):
    """The harness replaces the env's flag (against the train split: e1 overlaps) with the one against the
    checkpoint's training set (t2 only: nothing overlaps), names the provenance in the record, and a
    checkpoint without provenance keeps the env's flag."""
    from stratagym.agents.tiny_lm import tiny_lm_path
    from stratagym.eval.harness import EvalConfig, evaluate

    plain = tmp_path / "plain"
    shutil.copytree(tiny_lm_path(), plain)
    with_prov = tmp_path / "with_prov"
    shutil.copytree(plain, with_prov)
    write_provenance(with_prov, [_sft_set(dataset, ["t2"])])

    def run(agent: Path, out: Path | None = None) -> dict:
        return evaluate(EvalConfig(agent=str(agent), env_id=ENV, split="test", n=2, batch_size=2,
                                   env_kwargs={"dataset": str(dataset), "max_turns": 1},
                                   agent_options={"max_new_tokens": 4}), out=out, progress=False)

    flags = lambda rec: {e["task_id"]: e["extra"]["overlap"] for e in rec["episodes"]}  # noqa: E731
    rec = run(with_prov, tmp_path / "rec.json")
    assert flags(rec) == {"e1": False, "e2": False}
    # the progress file keeps the env's flag; its transcripts still belong to the record (overlap is the
    # task's relation to a training set, not an outcome: same_outcome leaves it out)
    assert find_transcripts([tmp_path / "rec.json.progress.jsonl"], [rec])[rec["record_id"]].keys() == {(0, "e1"), (0, "e2")}
    ep = rec["episodes"][0]
    assert same_outcome(ep, {**ep, "extra": {**ep["extra"], "overlap": not ep["extra"]["overlap"]}})
    assert not same_outcome(ep, {**ep, "extra": {**ep["extra"], "em": 1.0 - ep["extra"]["em"]}})
    assert rec["agent"]["provenance"] == {"sha256": provenance_digest(read_provenance(with_prov)),
                                          "overlap_against": "training sets", "training_tasks": 1, "stages": ["sft"]}
    assert rec["metrics"]["overlap"]["value"] == 0.0
    assert rec["agent"]["content_hash"] == content_hash_path(plain)
    rec = run(plain)
    assert flags(rec) == {"e1": True, "e2": False} and "provenance" not in rec["agent"]
    # training data that is not on this machine: the env's flag, and the record says against what
    write_provenance(with_prov, [{**_sft_set(dataset, ["t2"]), "data_kwargs": {"dataset": str(tmp_path / "gone")}}])
    rec = run(with_prov)
    assert flags(rec) == {"e1": True, "e2": False}
    assert rec["agent"]["provenance"]["overlap_against"].startswith("the env's train split: the training data")
