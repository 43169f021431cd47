"""A checkpoint's provenance (issue 50 item 5): the training data it saw, named by content, kept out of
its content hash. SearchQA's overlap against it: tests/search_qa/test_training_overlap.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stratagym.errors import ConfigError
from stratagym.eval.records import content_hash_path
from stratagym.provenance import (TRAINING_DATA_FILE, provenance_digest, read_provenance, training_set,
                                  training_sets_for, write_provenance)

ENV = "stratagym/SearchQA-v0"
TRAIN = [
    {"id": "t1", "question": "Who founded the Alpha guild of salt traders?", "golden_answers": ["Zedrin"]},
    {"id": "t2", "question": "Where does the Beta river meet the sea?", "golden_answers": ["Quillon"]},
]
TEST = [
    {"id": "e1", "question": "Which captain sailed the Gamma northward first?", "golden_answers": ["Zedrin"]},
    {"id": "e2", "question": "What mountain overlooks Delta town?", "golden_answers": ["Morvath"]},
]


@pytest.fixture()
def dataset(tmp_path) -> Path:
    d = tmp_path / "qa"
    d.mkdir()
    for name, rows in (("train", TRAIN), ("test", TEST)):
        (d / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d


def _sft_set(dataset: Path, ids: list[str]) -> dict:
    return training_set(stage="sft", env_id=ENV, split="train", task_ids=ids, data_kwargs={"dataset": str(dataset)},
                        demos_sha256="ab" * 32)


def test_a_training_set_names_its_tasks_and_hashes_its_split_file(dataset):
    ts = _sft_set(dataset, ["t2", "t1", "t2"])
    assert ts["task_ids"] == ["t1", "t2"]  # deduplicated, sorted
    import hashlib

    assert ts["tasks_sha256"] == hashlib.sha256(b"t1\nt2").hexdigest()
    # the dataset folder's train file, not the whole folder: the test split may change without touching it
    assert ts["data_sha256"] == {"dataset": hashlib.sha256((dataset / "train.jsonl").read_bytes()).hexdigest()}
    bundled = training_set(stage="rl", env_id=ENV, split=None, task_ids=[], data_kwargs={"dataset": "bundled"})
    assert bundled["data_sha256"] == {}  # the bundled data is versioned with the code


def test_provenance_round_trips_and_stays_out_of_the_content_hash(tmp_path, dataset):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "adapter_model.safetensors").write_bytes(b"weights")
    before = content_hash_path(ckpt)
    write_provenance(ckpt, [_sft_set(dataset, ["t1"])])
    assert content_hash_path(ckpt) == before  # committed records' agent.content_hash survive a back-fill
    prov = read_provenance(ckpt)
    assert prov["schema"] == "stratagym.provenance/1" and training_sets_for(prov, ENV)[0]["task_ids"] == ["t1"]
    assert training_sets_for(prov, "stratagym/WebShop-v0") == [] and read_provenance(tmp_path) is None
    assert len(provenance_digest(prov)) == 64
    (ckpt / TRAINING_DATA_FILE).write_text("{not json")
    with pytest.raises(ConfigError, match="not a readable provenance file"):
        read_provenance(ckpt)
    (ckpt / TRAINING_DATA_FILE).write_text(json.dumps({"schema": "stratagym.provenance/1", "training_sets": [{}]}))
    with pytest.raises(ConfigError, match="entries name env_id and task_ids"):
        read_provenance(ckpt)
