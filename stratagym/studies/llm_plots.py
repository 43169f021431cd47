"""``figures.png`` of an LLM study: the registered test drawn, then what training did.

One figure a study, written by :func:`stratagym.studies.llm.compare_study` beside ``comparison.md``:

* **the registered test**: for each hypothesis, each seed's paired difference (new arm minus baseline)
  with its 95% bootstrap interval and the pooled one, against 0 and the registered smallest effect; a
  reader sees at once whether the seeds point the same way and whether the interval clears the bar;
* **by stratum** (studies with ``strata``): each arm's metric per stratum, mean over seeds;
* **training**, from the runs' logs where the study kept them: the rollout return per step (each seed a
  thin line, the mean over seeds thick), the share of tied groups (no learning signal), and, for
  step-level estimators, the mean group size at each history level (GiGPO's exact-state groups are
  level 0; HGPO's deeper levels share more history).

Labels come from study files, so text is drawn literally (no ``$...$`` maths), as on the board.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from stratagym.atomic import atomic_write_with
from stratagym.leaderboard.render import literal_plot_text

__all__ = ["plot_llm_study", "Curves"]

#: Per arm label, per seed: the run's logged steps (rows of its ``metrics.jsonl``).
Curves = Mapping[str, Mapping[int, Sequence[Mapping[str, Any]]]]


def _series(rows: Sequence[Mapping[str, Any]], key: str) -> tuple[list[int], list[float]]:
    pts = [(int(r["step"]), float(r[key])) for r in rows
           if isinstance(r.get(key), (int, float)) and isinstance(r.get("step"), int)]
    return [p[0] for p in pts], [p[1] for p in pts]


def _has(curves: Curves, key: str) -> bool:
    return any(_series(rows, key)[0] for seeds in curves.values() for rows in seeds.values())


def _levels(curves: Curves) -> list[int]:
    keys = {k for seeds in curves.values() for rows in seeds.values() for r in rows for k in r}
    levels = []
    for k in keys:
        parts = k.split("/")
        if len(parts) == 3 and parts[0] == "groups" and parts[2] == "size" and parts[1].startswith("level"):
            tail = parts[1][len("level"):]
            if tail.isdigit():
                levels.append(int(tail))
    return sorted(levels)


def _draw_test(ax: Any, results: Mapping[str, Any], h: Mapping[str, Any]) -> None:
    pre = results["preregistration"]
    rows = [(f"seed {s}", c) for s, c in h["per_seed"].items()] + [("pooled", h["pooled"])]
    y = np.arange(len(rows))[::-1]
    for yi, (name, c) in zip(y, rows):
        pooled = name == "pooled"
        ax.errorbar(c["diff"], yi, xerr=[[c["diff"] - c["ci_low"]], [c["ci_high"] - c["diff"]]], fmt="o",
                    color="black" if pooled else "tab:blue", ms=7 if pooled else 5, capsize=3, lw=2 if pooled else 1)
    ax.axvline(0.0, color="grey", lw=1)
    sign = 1.0 if h["direction"] == "greater" else -1.0
    ax.axvline(sign * float(pre["min_effect"]), color="tab:red", lw=1, ls="--")
    ax.set_yticks(y, [r[0] for r in rows])
    ax.set_xlabel(f"{h['arm']} - {h['baseline']}: {pre['metric']} on {pre['split']}, 95% CI")
    ax.set_title(f"registered test: {h['verdict']} (dashed: smallest effect {sign * float(pre['min_effect']):+g})",
                 fontsize=9)
    ax.grid(alpha=0.3, axis="x")


def _draw_strata(ax: Any, results: Mapping[str, Any]) -> None:
    arms = [(label, a["by_stratum"]) for label, a in results["arms"].items() if a.get("by_stratum")]
    strata = sorted({k for _, by in arms for k in by})
    width = 0.8 / max(len(arms), 1)
    x = np.arange(len(strata))
    for i, (label, by) in enumerate(arms):
        ax.bar(x + (i - (len(arms) - 1) / 2) * width, [by.get(k, {}).get("mean", math.nan) for k in strata],
               width, label=label)
    ns = [next((by[k]["n"] for _, by in arms if k in by), 0) for k in strata]
    ax.set_xticks(x, [f"{k}\n(n={n})" for k, n in zip(strata, ns)])
    ax.set_xlabel(results["study"].get("strata") or "stratum")
    ax.set_ylabel(f"{results['preregistration']['metric']}, mean over seeds")
    ax.set_title("by stratum", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, axis="y")


def _draw_curve(ax: Any, curves: Curves, key: str, ylabel: str, colors: Sequence[str]) -> None:
    for c, (label, seeds) in enumerate(curves.items()):
        color = colors[c % len(colors)]
        by_step: dict[int, list[float]] = {}
        for rows in seeds.values():
            steps, vals = _series(rows, key)
            if steps:
                ax.plot(steps, vals, color=color, alpha=0.3, lw=0.8)
            for s, v in zip(steps, vals):
                by_step.setdefault(s, []).append(v)
        if by_step:
            xs = sorted(by_step)
            ax.plot(xs, [float(np.mean(by_step[s])) for s in xs], color=color, lw=2,
                    label=f"{label} ({len(seeds)} seed{'s' if len(seeds) != 1 else ''})")
    ax.set_xlabel("training step")
    ax.set_ylabel(ylabel)
    ax.set_title(f"training: {key}", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)


def _draw_levels(ax: Any, curves: Curves, levels: Sequence[int], colors: Sequence[str]) -> None:
    width = 0.8 / max(len(curves), 1)
    for c, (label, seeds) in enumerate(curves.items()):
        means = []
        for lv in levels:
            vals = [v for rows in seeds.values() for v in _series(rows, f"groups/level{lv}/size")[1]]
            means.append(float(np.mean(vals)) if vals else math.nan)
        ax.bar(np.arange(len(levels)) + (c - (len(curves) - 1) / 2) * width, means, width,
               color=colors[c % len(colors)], label=label)
    ax.set_xticks(np.arange(len(levels)), [str(lv) for lv in levels])
    ax.set_xlabel("history level (0: the current observation only)")
    ax.set_ylabel("mean group size, all steps and seeds")
    ax.set_title("training: step groups by shared history", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, axis="y")


def plot_llm_study(results: Mapping[str, Any], curves: Curves, path: str | Path) -> Path:
    """Draw ``results`` (:func:`~stratagym.studies.llm.compare_study`'s dict) and the kept training logs
    ``curves`` into one PNG at ``path``, written atomically. Panels without data are left out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    panels: list[Callable[[Any], None]] = [lambda ax, h=h: _draw_test(ax, results, h) for h in results["hypotheses"]]
    if any(a.get("by_stratum") for a in results["arms"].values()):
        panels.append(lambda ax: _draw_strata(ax, results))
    for key, ylabel in (("rollout/return", "sampled rollout return"), ("adv/tied_groups", "share of tied groups")):
        if _has(curves, key):
            panels.append(lambda ax, key=key, ylabel=ylabel: _draw_curve(ax, curves, key, ylabel, colors))
    if levels := _levels(curves):
        panels.append(lambda ax: _draw_levels(ax, curves, levels, colors))
    cols = min(3, len(panels))
    nrows = math.ceil(len(panels) / cols)
    path = Path(path)
    with literal_plot_text():
        fig, axes = plt.subplots(nrows, cols, figsize=(5.0 * cols, 3.6 * nrows), squeeze=False)
        try:
            for ax, draw in zip(axes.flat, panels):
                draw(ax)
            for ax in list(axes.flat)[len(panels):]:
                ax.set_visible(False)
            done = results.get("seeds_done", [])
            fig.suptitle(f"{results['study']['title']} (seeds in: {', '.join(map(str, done))}"
                         + ("" if results.get("complete", True) else ", interim") + ")", fontsize=10)
            fig.tight_layout()
            atomic_write_with(path, lambda tmp: fig.savefig(tmp, dpi=100))
        finally:
            plt.close(fig)
    return path
