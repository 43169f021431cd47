"""The search-dependence eval: does a search agent's score come from what it retrieves?

A model that reads the passages should lose most of its EM when retrieval is taken away; a model that
memorised the answers (a bundled-world model on its own world) should not. ``stratagym eval ...
--retriever-ablation`` re-runs the same agent on the same questions and seeds three more times, with the
env's ``retrieval_ablation`` (:data:`stratagym.envs.search_qa.env.RETRIEVAL_ABLATIONS`):

* ``no_retrieval``: every search returns an empty ``<information>`` block;
* ``random_passage``: ``topk`` passages drawn at random from the corpus (per question and search);
* ``shuffled_gold``: the passages the *next* question's gold query retrieves at this hop: real,
  well-formed evidence for another question.

Each ablated eval is an ordinary resumable eval with its own record (``<out>.ablation-<name>.json``, its
own protocol fingerprint). The agent's record gains a ``search_dependence`` block: the primary metric
under the real retriever and under each ablation (value, n, Wilson interval, the ablated record's id and
its per-episode outcomes, so anyone can recompute it), and the drop from the real retriever. Like
``transcripts``, the block is left out of ``record_id``: it can be attached to a committed record later
without making it another evaluation.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Callable, Mapping

from stratagym.eval.stats import proportion

__all__ = ["ABLATIONS", "ablation_out", "search_dependence_block", "run_ablations"]

#: The order the block and the board list them in.
ABLATIONS = ("no_retrieval", "random_passage", "shuffled_gold")


def ablation_out(out: str | os.PathLike[str], ablation: str) -> Path:
    """Where the ablated eval of the record at ``out`` writes its own record."""
    out = Path(out)
    return out.with_name(f"{out.stem}.ablation-{ablation}{out.suffix or '.json'}")


def _outcomes(record: Mapping[str, Any], metric: str) -> dict[str, float]:
    """``task_id#seed -> value`` of ``metric`` per episode (the extra value, else the record field)."""
    out = {}
    for ep in record["episodes"]:
        v = (ep.get("extra") or {}).get(metric, ep.get(metric, ep.get("score")))
        out[f"{ep['task_id']}#{ep['seed']}"] = float(v)
    return out


def _rate(values: list[float]) -> dict[str, Any]:
    est = proportion(values)
    return {"value": est.value, "n": est.n, "ci_low": est.ci_low, "ci_high": est.ci_high}


def search_dependence_block(record: Mapping[str, Any], ablated: Mapping[str, Mapping[str, Any]], *,
                            metric: str = "em") -> dict[str, Any]:
    """The ``search_dependence`` block of ``record`` from its ablated records (``ablation -> record``),
    which must hold the same episodes (task and seed) as ``record``."""
    real = _outcomes(record, metric)
    block: dict[str, Any] = {"metric": metric, "real": _rate(list(real.values())), "ablations": {}, "drop": {}}
    for name in ABLATIONS:
        if name not in ablated:
            continue
        outcomes = _outcomes(ablated[name], metric)
        if set(outcomes) != set(real):
            raise ValueError(f"the {name} eval holds other episodes than the record (same agent, split, n and seeds needed)")
        block["ablations"][name] = {**_rate(list(outcomes.values())), "record_id": ablated[name]["record_id"],
                                    "outcomes": dict(sorted(outcomes.items()))}
        block["drop"][name] = block["real"]["value"] - block["ablations"][name]["value"]
    return block


def run_ablations(config: Any, out: str | os.PathLike[str], evaluate: Callable[..., dict[str, Any]],
                  **eval_kwargs: Any) -> dict[str, dict[str, Any]]:
    """Evaluate ``config`` (an :class:`~stratagym.eval.harness.EvalConfig`) once per ablation, each with its
    own resumable record beside ``out``; returns ``ablation -> record``."""
    records = {}
    for name in ABLATIONS:
        cfg = dataclasses.replace(config, env_kwargs={**config.env_kwargs, "retrieval_ablation": name},
                                  label=f"{config.label or config.agent} [{name}]")
        records[name] = evaluate(cfg, out=ablation_out(out, name), **eval_kwargs)
    return records
