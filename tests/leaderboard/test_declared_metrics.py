"""A metric declared in an env's spec (``EnvSpec.metrics``) is aggregated as declared and shown on the board,
placed and ranked as declared, without an edit to ``eval/aggregate.py`` or ``leaderboard/render.py``."""

from __future__ import annotations

import pytest

from stratagym.envs.metric_spec import MetricSpec
from stratagym.envs.registry import EnvSpec, register_env
from stratagym.eval.aggregate import aggregate, higher_is_better, metric_order
from stratagym.eval.harness import build_record
from stratagym.eval.records import content_hash_text
from stratagym.leaderboard.render import board_tables, render_board
from stratagym.leaderboard.store import Leaderboard

ENV = "t/DeclaredMetric-v0"

register_env(EnvSpec(
    id=ENV, entry_point="stratagym.envs.synthetic.cue_corridor:CueCorridorEnv", description="declared-metric probe",
    source=__name__,  # a test's env, not a built-in one (tests/core/test_behaviour_pins.py pins built-ins)
    record_info_keys=("cost", "hit", "near"), primary_metric="cost", board_columns=("hit", "cost/miss"),
    # cost: lower is better, ranks the board; hit: a rate, with cost on the hits and on the misses
    metrics=(MetricSpec("cost", "mean", higher_is_better=False), MetricSpec("hit", "rate", parts=("hit", "miss"))),
))


def _episodes(costs, hits):
    return [{"task_id": f"t{i}", "seed": 0, "total_reward": 0.0, "won": False, "score": 0.0, "turns": 1,
             "search_count": 0, "valid_actions": 1, "truncated": False,
             "extra": {"cost": c, "hit": h, "near": float(i)}} for i, (c, h) in enumerate(zip(costs, hits))]


def _record(label, costs, hits):
    agent = {"spec": f"scripted:{label}", "kind": "scripted", "label": label, "content_hash": content_hash_text(label)}
    return build_record(agent=agent, env_id=ENV, data_hash=content_hash_text(ENV), split="default", seeds=(0,),
                        episodes=_episodes(costs, hits), config={"test": True})


def test_declared_metrics_are_aggregated_as_declared():
    """By hand: costs 1, 2, 3, 4 with hits on the first two: cost 2.5, hit 0.5, cost on hits 1.5, on misses 3.5."""
    m = aggregate(_episodes([1, 2, 3, 4], [True, True, False, False]), env_id=ENV).metrics
    assert (m["cost"].value, m["cost"].method) == (2.5, "bootstrap")
    assert (m["hit"].value, m["hit"].method) == (0.5, "wilson")
    assert (m["cost/hit"].value, m["cost/hit"].n) == (1.5, 2)
    assert (m["cost/miss"].value, m["cost/miss"].n) == (3.5, 2)
    assert m["near"].value == 1.5  # undeclared numeric key: still a metric (a mean)
    assert not higher_is_better("cost", ENV) and higher_is_better("hit", ENV) and not higher_is_better("turns")
    assert metric_order(ENV) == ["success", "score", "cost", "hit", "cost/hit", "cost/miss", "success_in_distribution",
                                 "success_out_of_distribution", "search_count", "turns", "valid_ratio"]


def test_a_declared_metric_ranks_and_shows_on_the_board(tmp_path):
    lb = Leaderboard(tmp_path / "board.db")
    lb.submit(_record("cheap", [1, 2, 3, 4], [True, True, False, False]))
    lb.submit(_record("costly", [5, 6, 7, 8], [True, False, False, False]))
    [table] = [t for t in board_tables(lb) if t.env == ENV]
    assert table.metric == "cost"
    assert [r["agent"] for r in table.rows] == ["cheap", "costly"]  # lower cost first
    assert table.columns == ["success", "score", "hit", "cost/hit", "cost/miss", "search_count", "turns", "valid_ratio",
                             "mean_reward", "near"]  # placed as declared, then the rest by name
    assert table.md_columns == ["hit", "cost/miss"]
    assert table.rows[1]["extra"]["cost/hit"][0] == 5.0 and table.rows[1]["extra"]["hit"][0] == 0.25
    paths = render_board(lb, tmp_path / "site", plots=False)
    lb.close()
    md = paths["markdown"].read_text()
    assert "Ranked by **cost** (lower is better)" in md
    assert "| rank | agent | algorithm | cost | seed std | n | seeds | hit | cost/miss | transcripts | date | record |" in md
    html = paths["html"].read_text()
    assert 'data-col="cost/hit"' in html and 'data-col="near"' in html


def test_the_static_site_states_a_declared_direction(tmp_path):
    from stratagym.leaderboard.site import build_site

    lb = Leaderboard(tmp_path / "board.db")
    lb.submit(_record("cheap", [1, 2, 3, 4], [True, True, False, False]))
    build_site(lb, tmp_path / "site")
    lb.close()
    pages = "".join(p.read_text() for p in (tmp_path / "site").glob("*.html"))
    assert "Ranked by <b>cost</b> (lower is better)" in pages


def test_bad_metric_declarations_name_the_fix():
    with pytest.raises(ValueError, match="add it to record_info_keys"):
        EnvSpec(id="t/BadMetric-v0", entry_point="x:Y", description="d", metrics=(MetricSpec("cost", "mean"),))
    with pytest.raises(ValueError, match="kind must be one of rate, mean"):
        MetricSpec("cost", "median")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not both"):
        MetricSpec("cost", "mean", key="c", field="score")
    with pytest.raises(ValueError, match="parts names the two halves"):
        MetricSpec("hit", "rate", parts=("hit",))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="MetricSpec objects"):
        EnvSpec(id="t/BadMetric-v0", entry_point="x:Y", description="d", metrics=("cost",))  # type: ignore[arg-type]
