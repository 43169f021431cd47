"""The faster translator loops (fast_translate) give the stock translator's SAS text, byte for byte."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stratagym.envs.alfworld import speedups
from stratagym.envs.alfworld.games import load_records, logic_files, problem_pddl
from stratagym.envs.alfworld.generator import TASK_TYPES


def _translate(domain: str, problem: str, *, fast: bool, optimize: bool):
    """(task dump, SAS text): through the speed-ups (cache emptied first, so the translator runs) or stock."""
    import fast_downward

    speedups.install()
    if fast:
        speedups.clear_caches(games_only=True)
        with speedups.active(disk_cache=False):  # the translator itself, not a result it wrote earlier
            task, sas = fast_downward.pddl2sas(domain, problem, optimize=optimize)
        assert speedups.cache_info()["sas_misses"] == 1
    else:
        task, sas = fast_downward.pddl2sas(domain, problem, optimize=optimize)
    facts = sorted(map(str, task.init))
    actions = [(a.name, str(a.parameters)) for a in task.actions]
    return (facts, actions, [(o.name, o.type_name) for o in task.objects]), sas


def _problems(sample: bool) -> list[tuple[str, str]]:
    out = []
    for split in ("train", "valid_seen", "valid_unseen"):
        records = [r for r, _ in load_records(split)]
        if sample:  # one game per task type of train, the first of each valid split
            seen: set[str] = set()
            records = [r for r in records if split != "train" or not (r.task_type in seen or seen.add(r.task_type))]
            records = records[:len(TASK_TYPES)] if split == "train" else records[:1]
        out += [(f"{split}/{r.key}", problem_pddl(r)) for r in records]
    return out


def _check(problem: str, optimize: bool) -> str:
    domain, _ = logic_files()
    stock_task, stock_sas = _translate(domain, problem, fast=False, optimize=optimize)
    fast_task, fast_sas = _translate(domain, problem, fast=True, optimize=optimize)
    assert stock_sas.startswith("begin_version")
    assert fast_sas == stock_sas
    assert fast_task == stock_task
    return stock_sas


@pytest.mark.parametrize("optimize", [False, True])
@pytest.mark.parametrize("name, problem", _problems(sample=True), ids=lambda x: x if "/" in str(x) else "")
def test_sas_identical_to_stock_on_sample_of_games(name, problem, optimize):
    assert "begin_operator" in _check(problem, optimize)  # a real task, not the translator's trivial one


if os.environ.get("STRATAGYM_ALFWORLD_ALL_GAMES"):
    # All 180 bundled games take ~3 min, so they are collected only on request (no skipped tests in the
    # suite that could hide a regression): STRATAGYM_ALFWORLD_ALL_GAMES=1 pytest tests/alfworld/test_fast_translate.py
    @pytest.mark.slow
    @pytest.mark.parametrize("name, problem", _problems(sample=False), ids=lambda x: x if "/" in str(x) else "")
    def test_sas_identical_to_stock_on_every_bundled_game(name, problem):
        assert "begin_operator" in _check(problem, optimize=False)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_sas_identical_to_stock_on_problems_with_facts_removed(data):
    """Dropping init facts changes what is reachable (fewer actions, unreachable goals, empty models)."""
    _, problem = _problems(sample=True)[0]
    head, sep, rest = problem.partition("(:init")
    body, sep2, tail = rest.partition("(:goal")
    lines = body.split("\n")
    fact_rows = [i for i, line in enumerate(lines) if line.strip().startswith("(") and "total-cost" not in line]
    dropped = set(data.draw(st.lists(st.sampled_from(fact_rows), max_size=len(fact_rows) // 2)))
    body = "\n".join(line for i, line in enumerate(lines) if i not in dropped)
    _check(head + sep + body + sep2 + tail, optimize=data.draw(st.booleans()))
