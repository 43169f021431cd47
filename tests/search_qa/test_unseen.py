"""The unseen-world split ``test_unseen``: a second generated world, disjoint names, its own corpus."""

from __future__ import annotations

import re
from pathlib import Path

import gymnasium as gym
import pytest

import stratagym  # noqa: F401  (registers the envs)
from stratagym.envs.core import ConfigError
from stratagym.envs.search_qa.data import BUNDLED_CORPUS, BUNDLED_DIR, bundled_corpus, load_corpus, load_qa
from tests.helpers import load_script

REPO = Path(__file__).resolve().parents[2]
#: Words that appear in titles of both worlds because the templates write them, not the name maker.
TEMPLATE_WORDS = {"The", "River", "Mountains", "of", "Guild", "Order", "Brotherhood", "Society", "League", "Circle",
                  "Festival", "Flood", "Treaty", "Fair", "Siege", "Council", "Eclipse", "Tournament",
                  "loom", "orrery", "water", "clock", "lantern", "compass", "printing", "press", "windmill", "kiln",
                  "telescope", "bellows", "sextant", "pump", "plough", "hourglass", "crane", "sundial"}


def _generator():
    return load_script(REPO / "scripts" / "make_search_qa_data.py", "make_search_qa_data")


def _title_words(corpus) -> set[str]:
    return {w for t in corpus.titles() for w in re.findall(r"[A-Za-z]+", t)}


def test_unseen_split_shape_and_its_own_corpus():
    unseen = load_qa("bundled", "test_unseen")
    corpus = load_corpus(bundled_corpus("test_unseen"))
    assert bundled_corpus("test_unseen") == BUNDLED_DIR / "unseen" / "corpus.jsonl" != BUNDLED_CORPUS
    assert bundled_corpus("test") == bundled_corpus("train") == BUNDLED_CORPUS
    assert len(unseen) == 500 and 2000 <= len(corpus) <= 5000
    assert {q.split for q in unseen} == {"test_unseen"} and all(q.id.startswith("sqa-test_unseen-") for q in unseen)
    assert all(i.startswith("u") for i in corpus.ids)  # never the same id as a passage of the first world
    titles = dict(zip(corpus.ids, corpus.titles()))
    for q in unseen:
        meta = q.metadata
        assert [titles[d] for d in meta["supporting_doc_ids"]] == meta["supporting_titles"]
        last = corpus.contents[corpus.ids.index(meta["supporting_doc_ids"][-1])]
        assert any(a in last for a in q.golden_answers)


def test_unseen_world_shares_no_invented_name_with_the_first():
    main_words = _title_words(load_corpus("bundled"))
    unseen_words = _title_words(load_corpus(bundled_corpus("test_unseen")))
    shared = main_words & unseen_words
    # only the templates' own words; years in event titles are digits, not words
    assert shared <= TEMPLATE_WORDS, sorted(shared - TEMPLATE_WORDS)[:10]
    assert len(unseen_words - TEMPLATE_WORDS) > 1000  # the check compares real name sets
    # and no unseen gold answer made of letters is a name of the first world
    train_answers = {a for q in load_qa("bundled", "train") for a in q.golden_answers}
    unseen_answers = {a for q in load_qa("bundled", "test_unseen") for a in q.golden_answers if not a.isdigit()}
    assert not train_answers & unseen_answers


def test_generator_reserves_the_first_worlds_names(tmp_path):
    mod = _generator()
    base = mod.world_names(20251)
    assert "kubae" in base or len(base) > 1000
    sizes = mod.generate_unseen(tmp_path, n_test=500)
    assert sizes == {"unseen_passages": 2791, "test_unseen": 500}
    for name in ("corpus.jsonl", "test_unseen.jsonl"):  # the committed files are the generator's output
        assert (tmp_path / "unseen" / name).read_bytes() == (BUNDLED_DIR / "unseen" / name).read_bytes(), name
    # a name maker with reserved names never draws one of them
    import random

    reserved = {f"name{i}" for i in range(5)} | base
    maker = mod.NameMaker(random.Random(1), reserved)
    drawn = {maker.word().lower() for _ in range(500)}
    assert not drawn & reserved


def test_env_switches_corpus_with_the_split():
    env = gym.make("stratagym/SearchQA-v0", split="test_unseen")
    test_env = gym.make("stratagym/SearchQA-v0", split="test")
    try:
        u, t = env.unwrapped, test_env.unwrapped
        assert u.retriever is not t.retriever  # two corpora, two indexes (keyed by corpus fingerprint)
        assert len(u.retriever.corpus) == len(load_corpus(bundled_corpus("test_unseen")))
        ex = u.example(u.task_ids()[0])
        obs, info = env.reset(options={"task_id": ex.id})
        assert info["split"] == "test_unseen"
        obs, *_ = env.step(f"<search> {ex.oracle_queries[0]} </search>")
        assert ex.metadata["supporting_titles"][0] in obs
        # the same query against the first world's corpus finds nothing of that entity
        test_env.reset(options={"task_id": t.task_ids()[0]})
        obs_t, *_ = test_env.step(f"<search> {ex.oracle_queries[0]} </search>")
        assert ex.metadata["supporting_titles"][0] not in obs_t
    finally:
        env.close()
        test_env.close()


def test_oracle_scores_one_on_test_unseen():
    from stratagym.eval.harness import EvalConfig, evaluate

    record = evaluate(EvalConfig(agent="scripted:oracle", env_id="stratagym/SearchQA-v0", split="test_unseen",
                                 seeds=[0], batch_size=64), out=None, progress=False)
    assert record["split"] == "test_unseen" and record["n_episodes"] == 500
    assert record["metrics"]["em"]["value"] == 1.0


def test_index_of_another_corpus_is_refused_for_test_unseen(tmp_path):
    from stratagym.envs.search_qa.index import build_index
    from stratagym.envs.search_qa.env import SearchQAEnv

    index = build_index("bundled", tmp_path / "main-bm25s", "bm25s")
    with pytest.raises(ConfigError, match="corpus mismatch"):
        SearchQAEnv(split="test_unseen", index=str(index))


def test_demonstrations_from_test_unseen_are_refused():
    from stratagym.training.demos import collect_demos

    with pytest.raises(ConfigError, match="train split"):
        collect_demos("stratagym/SearchQA-v0", "scripted:oracle", split="test_unseen", n=2)
    # and a train file that holds a test_unseen question is refused by task id, whatever its split is called
    from stratagym.training.demos import EVAL_SPLIT_NAMES, check_train_split

    assert "test_unseen" in EVAL_SPLIT_NAMES
    with pytest.raises(ConfigError, match="'test_unseen' split"):
        check_train_split("stratagym/SearchQA-v0", "train", {}, ["sqa-train-00000", "sqa-test_unseen-00007"])


def test_eval_cli_two_splits_then_board_side_by_side(tmp_path, capsys):
    """`stratagym eval --split test --split test_unseen --submit`, then the rendered board shows both
    splits in one table (oracle 1.0 on both, no-search 0.0 on both) and the overlap parts in the output."""
    from stratagym import cli
    from stratagym.leaderboard.render import render_board
    from stratagym.leaderboard.store import Leaderboard

    board = tmp_path / "board.db"
    for agent in ("scripted:oracle", "scripted:no_search"):
        with pytest.raises(SystemExit) as info:
            cli.main(["eval", agent, "--env", "stratagym/SearchQA-v0", "--split", "test", "--split", "test_unseen",
                      "-n", "40", "--out", str(tmp_path / agent.split(":")[1]), "--submit", "--board", str(board), "-q"])
        assert info.value.code in (0, None)
    out = capsys.readouterr().out
    rows = [ln.rstrip() for ln in out.splitlines() if ln.startswith("scripted:oracle ")]
    assert [r.split()[2] for r in rows] == ["test", "test_unseen"]
    assert "overlap / no overlap" in out
    # oracle on the first 40 questions: EM 1 on every part; the parts' sizes are the audit's flags
    from stratagym.envs.search_qa.overlap import overlap_flags

    for r, split in zip(rows, ["test", "test_unseen"]):
        flags = overlap_flags(load_qa("bundled", split)[:40], load_qa("bundled", "train")).any
        ov, no = int(flags.sum()), int((~flags).sum())
        assert r.endswith(" / ".join(f"1 (n={k})" if k else "-" for k in (ov, no))), r
    assert rows[0].endswith("1 (n=40) / -") and rows[1].endswith("1 (n=4) / 1 (n=36)")  # 4 unseen year answers

    lb = Leaderboard(board)
    paths = render_board(lb, tmp_path / "site", plots=False)
    lb.close()
    md = paths["markdown"].read_text()
    assert "## stratagym/SearchQA-v0 — splits side by side" in md
    section = md.split("splits side by side", 1)[1].split("\n## ", 1)[0]
    lines = [ln for ln in section.splitlines() if ln.startswith("|")]
    assert lines[0].startswith("| agent | algorithm | test em | test_unseen em | test n | test_unseen n |")
    assert lines[2].startswith("| scripted:oracle | - | 1.000 [") and lines[2].endswith("| 40 | 40 |")
    assert lines[3].startswith("| scripted:no_search | - | 0.000 [")
    assert "## stratagym/SearchQA-v0 — split `test_unseen`" in md
    page = paths["html"].read_text()
    assert 'class="sortable splits"' in page and "test_unseen em" in page
    # an agent whose test_unseen result sits in another protocol's table of that split (20 questions, not
    # 40) still has both of its splits side by side in its row
    for split, n in (("test", "40"), ("test_unseen", "20")):
        with pytest.raises(SystemExit) as info:
            cli.main(["eval", "scripted:oracle", "--env", "stratagym/SearchQA-v0", "--split", split, "-n", n,
                      "--label", "oracle, 20 unseen", "--out", str(tmp_path / f"twenty-{split}"), "--submit",
                      "--board", str(board), "-q"])
        assert info.value.code in (0, None)
    lb = Leaderboard(board)
    md = render_board(lb, tmp_path / "site2", plots=False)["markdown"].read_text()
    lb.close()
    assert "## stratagym/SearchQA-v0 — split `test_unseen` — another protocol" in md
    section = md.split("splits side by side", 1)[1].split("\n## ", 1)[0]
    (row,) = [ln for ln in section.splitlines() if ln.startswith("| oracle, 20 unseen |")]
    assert row.endswith("| 40 | 20 |") and row.count("1.000 [") == 2, row
