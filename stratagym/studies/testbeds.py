"""Checks that each LLM-level testbed has the structure its paper's claim needs, before any LLM run.

Issue 34 asks for three testbeds, each checked with oracle, random and scripted agents (cheap, no model):

* ``search-strata`` (Stratified GRPO vs GRPO, SearchQA with mixed hop counts): trajectories with
  different search counts must have different rewards, for reasons tied to the question (its hops),
  and GRPO's group baseline must then credit some answers with the wrong sign while stratified
  normalisation does not. Measured: mean reward per search count (the cross-stratum gap), reward by
  hops x searches, and on the same rollouts the share of wrong-sign answer advantages and the mean
  advantage per stratum under GRPO, Stratified GRPO (alpha 0.6) and SAN alone (alpha 1).
* ``difficulty`` (HA-DW, SearchQA prompts of mixed difficulty on shared parameters): per-question
  success rates ``p_hat`` of a group must spread between easy and hard questions. Measured: the
  spread of ``p_hat`` over questions, ``p_hat`` by hops, the share of tied groups (every member right
  or every member wrong: no signal for any group-relative estimator), and how HA-DW rescales the
  advantages of easy and hard questions on the same rollouts (mean ``|A_hadw| / |A_grpo|`` by hops).
* ``context`` (HGPO vs GiGPO, a long-horizon text env): steps of a group that share their current
  observation (GiGPO's anchor groups, level 0) and steps that share their last k+1 observations
  (HGPO's level k). Measured per level: the share of steps whose group holds another step (size >= 2)
  and the mean group size, the share of level-0 groups that mix different histories (context
  inconsistency), and the share of steps whose advantage is nonzero under GiGPO and HGPO.

The agents: the env's oracle or expert, the random agent, and scripted agents with a known flaw --
:class:`CountAgent` (searches a drawn number of hops, then answers what its last passage names) and
:class:`NoisyAgent` (the expert, with a random action at rate ``eps``: a stand-in for a pretrained model
that wins some of the time). What the LLM itself does on the same testbeds is measured by the runs.

Run: ``OMP_NUM_THREADS=1 python -m stratagym.studies.testbeds [search-strata|difficulty|context ...]``;
the output as measured is in ``docs/studies.md`` (section "LLM-level studies").
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import gymnasium as gym
import numpy as np
import torch

from stratagym.agents.scripted import ScriptedPolicy
from stratagym.algorithms.registry import get_estimator
from stratagym.envs.episode import EpisodeKey, EpisodeRngs
from stratagym.envs.alfworld.agents import PlannerExpertAgent
from stratagym.envs.random_agent import RandomAgent
from stratagym.envs.search_qa.agents import OracleAgent
from stratagym.envs.synthetic.agents import OracleAgent as CorridorOracle
from stratagym.training.rollout import InProcessPool, RolloutCollector, to_advantage_batch

__all__ = [
    "CountAgent", "NoisyAgent", "play", "search_strata_check", "difficulty_check", "context_check",
    "format_table", "SEARCHQA_TESTBED", "main",
]

#: The SearchQA testbed of the Stratified GRPO and HA-DW studies: the SmolLM2 recipes' env kwargs
#: (``recipes/cpu/grpo-smollm2-lora-searchqa.yaml``) on the unseen world's questions (1, 2 and 3 hops).
SEARCHQA_TESTBED: dict[str, Any] = {
    "split": "test_unseen", "topk": 1, "max_turns": 4,
    "prompt_template": "Search with <search> query </search>, answer with <answer> answer </answer>. Question: {question}\n",
}


class CountAgent:
    """A SearchQA reader that searches a drawn number of hops and answers what it found last.

    Per episode it draws ``k`` searches from ``counts`` (``{k: probability}``), sends the gold oracle
    queries for hops ``1..min(k, hops)`` (and the question itself for any search past the last hop),
    then answers: the gold answer if it searched every hop, else the entity its last passage names
    (the next hop's supporting title: the bridge entity, the answer a reader that stopped early gives;
    with no search, the question's own subject). So its reward depends on ``k`` against the
    question's hops exactly as a policy that chains too few or enough hops, and on nothing else.
    """

    def __init__(self, env: gym.Env, *, counts: dict[int, float], seed: int = 0):
        self.env = env.unwrapped
        ks = sorted(counts)
        p = np.asarray([counts[k] for k in ks], dtype=np.float64)
        if not ks or min(ks) < 0 or np.any(p < 0) or p.sum() <= 0:
            raise ValueError(f"counts must map search counts >= 0 to probabilities, got {counts!r}")
        self.ks, self.p = ks, p / p.sum()
        self.rngs = EpisodeRngs(seed)
        self.k: dict[EpisodeKey, int] = {}

    def act(self, observations: Sequence[str], infos: Sequence[dict[str, Any]], episodes: Sequence[EpisodeKey]) -> list[str]:
        return [self._one(info, ep) for info, ep in zip(infos, episodes)]

    def _one(self, info: dict[str, Any], episode: EpisodeKey) -> str:
        rng = self.rngs.get(episode, info)
        if int(info.get("step", 0)) == 0 or episode not in self.k:
            self.k[episode] = int(rng.choice(self.ks, p=self.p))
        k = self.k[episode]
        ex = self.env.example(info["task_id"])
        queries = ex.oracle_queries or [ex.question]
        done = int(info.get("search_count", 0))
        if done < k:
            q = queries[done] if done < len(queries) else ex.question
            return f"<search> {q} </search>"
        if min(k, len(queries)) >= len(queries):
            return f"<answer> {ex.golden_answers[0]} </answer>"
        titles = list(ex.metadata.get("supporting_titles", [])) or [ex.question]
        return f"<answer> {titles[min(k, len(titles) - 1)]} </answer>"


class NoisyAgent:
    """The ``expert`` with a uniformly random action (the env's random agent) at rate ``eps`` per turn.

    The expert sees every turn (its action is computed and discarded when the random one is taken), so
    a stateful expert keeps track of the episode."""

    def __init__(self, expert: Any, env: gym.Env, *, eps: float, seed: int = 0):
        if not 0.0 <= eps <= 1.0:
            raise ValueError(f"eps must be in [0, 1], got {eps}")
        self.expert, self.random, self.eps = expert, RandomAgent(env, seed=seed + 1), float(eps)
        self.rngs = EpisodeRngs(seed)

    def act(self, observations: Sequence[str], infos: Sequence[dict[str, Any]], episodes: Sequence[EpisodeKey]) -> list[str]:
        expert = self.expert.act(observations, infos, episodes)
        rand = self.random.act(observations, infos, episodes)
        flips = [self.rngs.get(ep, info).random() < self.eps for ep, info in zip(episodes, infos)]
        return [r if f else e for e, r, f in zip(expert, rand, flips)]


def play(env_id: str, env_kwargs: dict[str, Any], make_agent: Callable[[gym.Env], Any], *, n_tasks: int,
         group_size: int, seed: int = 0, max_turns: int = 200) -> Any:
    """Group rollouts of a scripted agent through the trainer's collector: ``group_size`` copies of each
    of the first ``n_tasks`` tasks, copy j of task i with seed ``seed + i`` (as the trainer draws them)."""
    env = gym.make(env_id, **env_kwargs)
    try:
        collector = RolloutCollector(env_id, ScriptedPolicy(make_agent(env)), group_size=group_size,
                                     pool=InProcessPool(env_id, env_kwargs), max_turns=max_turns)
        try:
            tasks = collector.task_ids()[:n_tasks]
            return collector.collect(tasks, [seed + i for i in range(len(tasks))])
        finally:
            collector.pool.close()
    finally:
        env.close()


def _answer_advantages(batch: Any, name: str, **kw: Any) -> tuple[torch.Tensor, Any]:
    rows, _, _ = to_advantage_batch(batch, "trajectory")
    return get_estimator(name, **kw)(rows), rows


def search_strata_check(batch: Any, hops_of: Callable[[str], int | None], *, min_n: int = 5) -> dict[str, Any]:
    """Cross-stratum structure of SearchQA rollouts (see the module docstring); ``hops_of(task_id)``.
    The cross-stratum gap is taken over strata with at least ``min_n`` episodes."""
    ok = batch.ok
    reward = np.array([t.env_return for t in ok])
    strata = np.array([t.search_count for t in ok])
    hops = np.array([hops_of(t.task_id) or 0 for t in ok])
    out: dict[str, Any] = {"episodes": len(ok), "mean reward": float(reward.mean()) if len(ok) else float("nan")}
    per = {int(s): (int((strata == s).sum()), float(reward[strata == s].mean())) for s in np.unique(strata)}
    out["reward by searches"] = per
    means = [m for n, m in per.values() if n >= min_n]
    out["cross-stratum gap"] = float(max(means) - min(means)) if len(means) > 1 else 0.0
    out["reward by hops x searches"] = {
        (int(h), int(s)): float(reward[(hops == h) & (strata == s)].mean())
        for h in np.unique(hops) for s in np.unique(strata[hops == h])
    }
    won = np.array([t.won for t in ok], dtype=bool)
    for label, name, kw in (("GRPO", "grpo", {}), ("Stratified 0.6", "stratified", {"alpha": 0.6}),
                            ("SAN alone", "stratified", {"alpha": 1.0})):
        adv = _answer_advantages(batch, name, **kw)[0].numpy()
        wrong = ((won & (adv < 0)) | (~won & (adv > 0)))
        out[f"wrong sign: {label}"] = float(wrong.mean())
        out[f"mean advantage by searches: {label}"] = {int(s): float(adv[strata == s].mean()) for s in np.unique(strata)}
    return out


def difficulty_check(batch: Any, hops_of: Callable[[str], int | None]) -> dict[str, Any]:
    """Difficulty spread of group rollouts (see the module docstring)."""
    ok = batch.ok
    by_task: dict[str, list[float]] = {}
    for t in ok:
        by_task.setdefault(t.task_id, []).append(float(t.won))
    p = {k: float(np.mean(v)) for k, v in by_task.items()}
    vals = np.array(list(p.values()))
    out: dict[str, Any] = {"questions": len(p), "mean p_hat": float(vals.mean()), "std of p_hat": float(vals.std())}
    out["p_hat quartiles"] = [float(x) for x in np.quantile(vals, [0.25, 0.5, 0.75])]
    out["tied groups (all wrong)"] = float(np.mean(vals == 0.0))
    out["tied groups (all right)"] = float(np.mean(vals == 1.0))
    hops = {k: hops_of(k) or 0 for k in p}
    out["p_hat by hops"] = {int(h): float(np.mean([p[k] for k in p if hops[k] == h])) for h in sorted(set(hops.values()))}
    a_grpo, rows = _answer_advantages(batch, "grpo")
    a_hadw = _answer_advantages(batch, "grpo+hadw")[0]
    ratio: dict[int, float] = {}
    row_hops = np.array([hops[t.task_id] for t in ok])
    moving = (a_grpo != 0).numpy()
    r = (a_hadw.abs() / a_grpo.abs().clamp_min(1e-12)).numpy()
    for h in sorted(set(hops.values())):
        m = moving & (row_hops == h)
        ratio[int(h)] = float(r[m].mean()) if m.any() else float("nan")
    out["HA-DW |A| / GRPO |A| by hops (rows with A != 0)"] = ratio
    return out


def context_check(batch: Any, *, levels: Sequence[int] = (0, 1, 2, 4), gamma: float = 0.95) -> dict[str, Any]:
    """State- and history-repeat structure of step-level group rollouts (see the module docstring)."""
    rows, _, _ = to_advantage_batch(batch, "step")
    group = rows.group.numpy()
    ctx = rows.context.numpy()
    kmax = ctx.shape[1] - 1
    out: dict[str, Any] = {"episodes": len(batch.ok), "steps": int(len(rows)),
                           "mean turns": float(np.mean([len(t.steps) for t in batch.ok])) if batch.ok else float("nan"),
                           "success": float(np.mean([t.won for t in batch.ok])) if batch.ok else float("nan"),
                           "levels reported": kmax + 1}
    for k in [k for k in levels if k <= kmax]:
        key = ctx[:, k]
        present = key != -1
        buckets: dict[tuple[int, int], int] = {}
        for g, h in zip(group[present], key[present]):
            buckets[(int(g), int(h))] = buckets.get((int(g), int(h)), 0) + 1
        sizes = np.array([buckets[(int(g), int(h))] for g, h in zip(group[present], key[present])])
        name = "state" if k == 0 else f"history k={k}"
        out[f"repeat rate: {name}"] = float(np.mean(sizes >= 2)) if sizes.size else 0.0
        out[f"mean group size: {name}"] = float(np.mean(sizes)) if sizes.size else 0.0
    deep = min(max(levels), kmax)
    mixed = total = 0
    by_state: dict[tuple[int, int], set[int]] = {}
    for g, h0, hk in zip(group, ctx[:, 0], ctx[:, deep]):
        by_state.setdefault((int(g), int(h0)), set()).add(int(hk))
    counts: dict[tuple[int, int], int] = {}
    for g, h0 in zip(group, ctx[:, 0]):
        counts[(int(g), int(h0))] = counts.get((int(g), int(h0)), 0) + 1
    for key, hist in by_state.items():
        if counts[key] >= 2:
            total += 1
            mixed += len(hist) > 1
    out[f"level-0 groups mixing histories (k={deep})"] = mixed / total if total else 0.0
    out["nonzero advantage: GiGPO"] = float((get_estimator("gigpo", gamma=gamma)(rows) != 0).float().mean())
    out[f"nonzero advantage: HGPO K={deep}"] = float(
        (get_estimator("hgpo", gamma=gamma)(type(rows)(**{**rows.__dict__, "context": rows.context[:, : deep + 1]})) != 0)
        .float().mean())
    return out


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3f}"
    if isinstance(v, dict):
        return ", ".join(f"{k}: {_fmt(x) if not isinstance(x, tuple) else f'{_fmt(x[1])} (n={x[0]})'}" for k, x in v.items())
    if isinstance(v, list):
        return ", ".join(_fmt(x) for x in v)
    return str(v)


def format_table(title: str, results: dict[str, dict[str, Any]]) -> str:
    """A Markdown table: one row per measured quantity, one column per agent."""
    agents = list(results)
    keys = list(dict.fromkeys(k for r in results.values() for k in r))
    lines = [f"### {title}", "", "| measure | " + " | ".join(agents) + " |", "|---" * (len(agents) + 1) + "|"]
    for k in keys:
        lines.append(f"| {k} | " + " | ".join(_fmt(results[a].get(k, "")) for a in agents) + " |")
    return "\n".join(lines) + "\n"


# ---- the three checks as run for docs/studies.md ---------------------------------------------------------

def _searchqa_agents(env_kwargs: dict[str, Any]) -> dict[str, Callable[[gym.Env], Any]]:
    return {
        "oracle": lambda env: OracleAgent(env),
        "random": lambda env: RandomAgent(env, seed=0),
        "1 search always": lambda env: CountAgent(env, counts={1: 1.0}),
        "1 or 2 searches (1:1)": lambda env: CountAgent(env, counts={1: 0.5, 2: 0.5}),
        "0-3 searches (uniform)": lambda env: CountAgent(env, counts={0: 1, 1: 1, 2: 1, 3: 1}),
        "oracle, eps 0.2": lambda env: NoisyAgent(OracleAgent(env), env, eps=0.2),
    }


def _hops_of(env_id: str, env_kwargs: dict[str, Any]) -> Callable[[str], int | None]:
    env = gym.make(env_id, **env_kwargs)
    table = {ex.id: ex.hops for ex in env.unwrapped.examples}
    env.close()
    return lambda task_id: table.get(task_id)


def run_search_strata(n_tasks: int = 200, group_size: int = 8, env_kwargs: dict[str, Any] | None = None) -> str:
    """The Stratified GRPO testbed's check: every agent of :func:`_searchqa_agents` on SearchQA."""
    kw = dict(SEARCHQA_TESTBED if env_kwargs is None else env_kwargs)
    hops_of = _hops_of("stratagym/SearchQA-v0", kw)
    res = {name: search_strata_check(play("stratagym/SearchQA-v0", kw, make, n_tasks=n_tasks, group_size=group_size), hops_of)
           for name, make in _searchqa_agents(kw).items()}
    return format_table(f"search-strata: SearchQA {kw.get('split')} ({n_tasks} questions x G={group_size})", res)


def run_difficulty(n_tasks: int = 200, group_size: int = 8, env_kwargs: dict[str, Any] | None = None) -> str:
    """The HA-DW testbed's check: difficulty spread of the SearchQA questions under each agent."""
    kw = dict(SEARCHQA_TESTBED if env_kwargs is None else env_kwargs)
    hops_of = _hops_of("stratagym/SearchQA-v0", kw)
    agents = {
        "random": lambda env: RandomAgent(env, seed=0),
        "0-3 searches (uniform)": lambda env: CountAgent(env, counts={0: 1, 1: 1, 2: 1, 3: 1}),
        "oracle, eps 0.2": lambda env: NoisyAgent(OracleAgent(env), env, eps=0.2),
        "oracle, eps 0.4": lambda env: NoisyAgent(OracleAgent(env), env, eps=0.4),
    }
    res = {name: difficulty_check(play("stratagym/SearchQA-v0", kw, make, n_tasks=n_tasks, group_size=group_size), hops_of)
           for name, make in agents.items()}
    return format_table(f"difficulty: SearchQA {kw.get('split')} ({n_tasks} questions x G={group_size})", res)


#: The HGPO testbed: ValueCorridor made long (6 halls, 2 dark corridor rooms: 30 turns, cue distance 3).
CORRIDOR_TESTBED: dict[str, Any] = {"segments": 6, "corridor": 2, "context_k": 4}


def _expert_ladder(name: str, expert: Callable[[gym.Env], Any], eps: Sequence[float], *, random_name: str = "random",
                   random: Callable[[gym.Env], Any] = lambda env: RandomAgent(env, seed=0)) -> dict[str, Callable[[gym.Env], Any]]:
    """The agents of one HGPO context table, from worst to best: a random agent, the expert with a random
    action at each rate in ``eps`` (:class:`NoisyAgent`), the expert itself."""
    agents = {random_name: random}
    for e in eps:
        agents[f"{name}, eps {e}"] = lambda env, e=e: NoisyAgent(expert(env), env, eps=e)
    agents[name] = expert
    return agents


def _context_table(title: str, env_id: str, env_kwargs: dict[str, Any], agents: dict[str, Callable[[gym.Env], Any]], *,
                   n_tasks: int, group_size: int) -> str:
    """One table of the HGPO check: :func:`context_check` of each agent's group rollouts on ``env_id``."""
    res = {name: context_check(play(env_id, env_kwargs, make, n_tasks=n_tasks, group_size=group_size))
           for name, make in agents.items()}
    return format_table(title, res)


def run_context(n_tasks: int = 8, group_size: int = 8, alfworld_tasks: int = 4, webshop_tasks: int = 16) -> str:
    """The HGPO testbed's check on the long ValueCorridor, on WebShop's train goals (members of a group that
    type the same search share its results page: GiGPO's anchor states) and, where the games are here,
    ALFWorld."""
    parts = []
    for title, kw in (("ValueCorridor (default: 3 halls)", {"context_k": 4}),
                      ("ValueCorridor, long testbed (6 halls, corridor 2)", CORRIDOR_TESTBED)):
        parts.append(_context_table(f"context: {title} ({n_tasks} tasks x G={group_size})", "stratagym/ValueCorridor-v0",
                                    {**kw, "oracle_info": True}, _expert_ladder("oracle", CorridorOracle, (0.2,)),
                                    n_tasks=n_tasks, group_size=group_size))
    if webshop_tasks:
        from stratagym.envs.webshop.agents import InstructionExpert, RandomShopper  # optional: the webshop extra (rapidfuzz)

        agents = _expert_ladder("expert", InstructionExpert, (0.2, 0.5), random_name="random shopper",
                                random=lambda env: RandomShopper(env, seed=0))
        parts.append(_context_table(f"context: WebShop (train, first {webshop_tasks} goals x G={group_size}, 15 turns)",
                                    "stratagym/WebShop-v0", {"split": "train", "max_steps": 15}, agents,
                                    n_tasks=webshop_tasks, group_size=group_size))
    if alfworld_tasks:
        try:
            parts.append(_context_table(
                f"context: ALFWorld (bundled, first {alfworld_tasks} games x G={group_size}, 30 turns)",
                "stratagym/ALFWorld-v0", {"max_steps": 30, "expert": "planner"},
                _expert_ladder("planner", PlannerExpertAgent, (0.2,)), n_tasks=alfworld_tasks, group_size=group_size))
        except ImportError as exc:  # the alfworld extra is not installed
            parts.append(f"(ALFWorld not measured: {exc})\n")
    return "\n".join(parts)


CHECKS = {"search-strata": run_search_strata, "difficulty": run_difficulty, "context": run_context}


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m stratagym.studies.testbeds [check ...] [--tasks N] [--group-size G]``: print the tables."""
    parser = argparse.ArgumentParser(prog="python -m stratagym.studies.testbeds", description=__doc__.split("\n")[0])
    parser.add_argument("checks", nargs="*", help=f"any of {', '.join(CHECKS)} (default: all three)")
    parser.add_argument("--tasks", type=int, default=None, help="questions (SearchQA) or tasks (corridor) per check")
    parser.add_argument("--group-size", type=int, default=8)
    args = parser.parse_args(argv)
    unknown = [c for c in args.checks if c not in CHECKS]
    if unknown:
        parser.error(f"unknown check(s) {', '.join(unknown)}; checks: {', '.join(CHECKS)}")
    torch.set_num_threads(1)
    for name in args.checks or list(CHECKS):
        kw: dict[str, Any] = {"group_size": args.group_size}
        if args.tasks:
            kw["n_tasks"] = args.tasks
        print(CHECKS[name](**kw))
    return 0


if __name__ == "__main__":
    sys.exit(main())
