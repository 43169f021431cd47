"""Rendering the board: ``LEADERBOARD.md``, a static ``index.html`` with sortable tables, and plots.

One table per (env, split), rows in rank order of the env's primary metric (WebShop score, ALFWorld
success, QA EM, else success), each cell ``value [95% CI]``, with the across-seed std, sample size and
seeds; before an env's tables, where it has results on several splits (SearchQA ``test`` and
``test_unseen``), one table with each agent's primary metric per split side by side. Plots (matplotlib, Agg backend, PNG): per board the primary metric with CI error bars, and per
env the training curves of bench runs (records whose ``training.curve`` lists ``{step, reward}``).

The HTML page is self-contained (inline CSS and vanilla JS, no network): clicking a column header sorts
by it (numbers numerically via ``data-sort``), clicking again reverses. Everything echoed is escaped.
"""

from __future__ import annotations

import html
import math
import os
import re
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from stratagym.atomic import atomic_write, atomic_write_with
from stratagym.paths import slug
from stratagym.envs.fingerprint import protocol_diff
from stratagym.envs.registry import get_spec
from stratagym.eval.aggregate import higher_is_better, metric_order, primary_metric
from stratagym.eval.search_dependence import ABLATIONS
from stratagym.leaderboard.protocols import protocol_for
from stratagym.leaderboard.scripts import SORTABLE_TABLES_JS

__all__ = ["render_board", "render_markdown", "render_html", "board_tables", "BoardTable", "SplitComparison", "protocol_text",
           "split_comparisons", "transcripts_cell", "NO_TRANSCRIPTS",
           "search_dependence_cell", "SEARCH_DEPENDENCE"]

class BoardTable:
    """The rows of one (env, split, protocol) board in rank order, ready to render.

    ``columns`` are every secondary metric (the HTML board shows them all); ``md_columns`` the few the
    env's spec chooses (``EnvSpec.board_columns``) for the Markdown board. ``fingerprint``/``source`` say
    which protocol the rows share (docs/protocol.md); ``differences`` name how it differs from the first
    table of the same env and split (empty for that one)."""

    def __init__(self, env: str, split: str, metric: str, columns: list[str], rows: list[dict[str, Any]], *,
                 md_columns: list[str] | None = None, fingerprint: str = "", source: str = "measured",
                 differences: list[str] | None = None, main: bool = True):
        self.env, self.split, self.metric, self.columns, self.rows = env, split, metric, columns, rows
        self.md_columns = list(columns if md_columns is None else md_columns)
        self.fingerprint, self.source, self.differences, self.main = fingerprint, source, list(differences or []), main
        #: a "data" column (the records' ``env.data_source``: bundled or real data) when any row has one
        self.show_data = any(r.get("data") for r in rows)
        #: the search-dependence column (docs/eval.md) on every retrieval-QA table, "-" where not run
        self.shows_search_dependence = env.startswith("stratagym/SearchQA")

    @property
    def slug(self) -> str:
        fp = self.fingerprint.removeprefix("sha256:")[:8]
        return slug(f"{self.env}-{self.split}" + (f"-{fp}" if fp else ""))


def _spec_columns(env: str) -> tuple[str, ...]:
    """The secondary metrics ``env``'s spec puts on the Markdown board (none known: the first three of
    :func:`~stratagym.eval.aggregate.metric_order` that a row has)."""
    try:
        return tuple(get_spec(env).board_columns)
    except KeyError:
        return ()


_SOURCE_ORDER = {"measured": 0, "recomputed": 1, "legacy": 2}


def _rank_key(row: dict[str, Any], asc: bool) -> tuple[Any, ...]:
    """Rank order with a stable tie key: value, then CI low end, then agent label and record id (never the
    order rows reached the store, which differs from one board to the next)."""
    v, lo = row["metric"][0], row["metric"][1]
    return ((v, lo) if asc else (-v, -lo)) + (row["agent"], row["record_id_full"])


#: What the board shows for a record that names no committed transcript archive.
NO_TRANSCRIPTS = "no transcripts"


def transcripts_cell(record: Mapping[str, Any]) -> str:
    """The board's ``transcripts`` cell: how many of the record's episodes have a committed transcript
    (``200/200``; a record over its archive's size budget keeps fewer), else :data:`NO_TRANSCRIPTS`."""
    ref = record.get("transcripts")
    if isinstance(ref, Mapping) and isinstance(ref.get("episodes"), int):
        return f"{ref['episodes']}/{record.get('n_episodes', ref.get('of'))}"
    return NO_TRANSCRIPTS


#: The board's column for the search-dependence eval (SearchQA tables): the primary metric under each ablation.
SEARCH_DEPENDENCE = "search dependence (none / random / shuffled)"


def search_dependence_cell(record: Mapping[str, Any]) -> str:
    """``0.020 / 0.050 / 0.045``: the record's primary metric with no retrieval, random passages and
    shuffled gold passages (:mod:`stratagym.eval.search_dependence`), ``-`` where it was not run."""
    block = record.get("search_dependence")
    ablations = block.get("ablations") if isinstance(block, Mapping) else None
    if not isinstance(ablations, Mapping) or not ablations:
        return "-"
    return " / ".join(f"{ablations[a]['value']:.3f}" if a in ablations else "-" for a in ABLATIONS)


def board_tables(lb: Any, *, rank_by: str | None = None,
                 boards: Iterable[tuple[str, str]] | None = None) -> list[BoardTable]:
    """One :class:`BoardTable` per (env, split, protocol fingerprint) on the board ``lb``: records measured
    under different protocols are never ranked together.

    ``rank_by``: a metric to rank by instead of each env's primary one (a board where no record has it gets
    no table); ``boards``: only these (env, split) pairs. ``leaderboard show`` and the rendered pages read
    their tables here, so the terminal and the pages group records alike."""
    tables = []
    wanted = None if boards is None else set(boards)
    for env, split in lb.boards():
        if wanted is not None and (env, split) not in wanted:
            continue
        metric = rank_by or primary_metric(env)
        ranked = lb.ranking(env, split, metric)
        if ranked.empty and rank_by is not None:
            continue
        if ranked.empty:  # no result has the primary metric: fall back to success
            metric = "success"
            ranked = lb.ranking(env, split, metric)
        wide = lb.dataframe(env, split).set_index("id")
        recs = lb.records(env, split)
        sources = {rec.get("record_id"): str((rec.get("env") or {}).get("data_source") or "") for rec in recs}
        agent_hashes = {rec.get("record_id"): str((rec.get("agent") or {}).get("content_hash") or "") for rec in recs}
        protocols = {rec.get("record_id"): protocol_for(rec) for rec in recs}
        transcribed = {rec.get("record_id"): transcripts_cell(rec) for rec in recs}
        dependence = {rec.get("record_id"): search_dependence_cell(rec) for rec in recs}
        metric_cols = [c for c in wide.columns if not c.endswith(("_ci_low", "_ci_high", "_seed_std"))
                       and c not in _IDENTITY_COLUMNS and c != metric]
        placed = metric_order(env)  # the common metrics and the env's declared ones (EnvSpec.metrics)
        present = [m for m in placed if m in metric_cols]
        extra = present + sorted(c for c in metric_cols if c not in placed)
        chosen = [c for c in _spec_columns(env) if c in extra] or present[:3]
        rows = []
        for _, r in ranked.iterrows():
            w = wide.loc[r["id"]]
            row = {
                "rank": int(r["rank"]),
                "agent": str(r["agent"]),
                "algorithm": "" if r["algorithm"] is None or (isinstance(r["algorithm"], float) and math.isnan(r["algorithm"])) else str(r["algorithm"]),
                "metric": (float(r["value"]), float(r["ci_low"]), float(r["ci_high"])),
                "seed_std": None if r["seed_std"] is None or (isinstance(r["seed_std"], float) and math.isnan(r["seed_std"])) else float(r["seed_std"]),
                "n": int(r["n"]),
                "seeds": ",".join(str(s) for s in r["seeds"]),
                "created": str(r["created"])[:10],
                "record_id": str(r["record_id"])[:12],
                "record_id_full": str(r["record_id"]),
                "data": sources.get(str(r["record_id"]), ""),
                "agent_hash": agent_hashes.get(str(r["record_id"]), ""),
                "transcripts": transcribed.get(str(r["record_id"]), NO_TRANSCRIPTS),
                "search_dependence": dependence.get(str(r["record_id"]), "-"),
                "extra": {},
            }
            for m in extra:
                v = w.get(m)
                if v is not None and not (isinstance(v, float) and math.isnan(v)):
                    row["extra"][m] = (float(v), float(w.get(f"{m}_ci_low")), float(w.get(f"{m}_ci_high")))
            rows.append(row)
        groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in rows:
            groups[protocols[row["record_id_full"]]["fingerprint"]].append(row)
        # the main table first: measured before recomputed before legacy, then the most rows, then the hash
        order = sorted(groups, key=lambda fp: (_SOURCE_ORDER.get(protocols[groups[fp][0]["record_id_full"]]["source"], 3),
                                                -len(groups[fp]), fp))
        asc = not higher_is_better(metric, env)
        first = protocols[groups[order[0]][0]["record_id_full"]] if order else None
        for i, fp in enumerate(order):
            proto = protocols[groups[fp][0]["record_id_full"]]
            group = sorted(groups[fp], key=lambda r: _rank_key(r, asc))
            for j, row in enumerate(group):  # competition ranking within the protocol: 1, 1, 3
                tie = j > 0 and row["metric"][0] == group[j - 1]["metric"][0]
                row["rank"] = group[j - 1]["rank"] if tie else j + 1
            diff = [] if i == 0 or first is None else (
                protocol_diff(proto["fields"], first["fields"]) if proto["fields"] is not None and first["fields"] is not None
                else [f"protocol {proto['source']} vs {first['source']}"])
            tables.append(BoardTable(env, split, metric, extra, group, md_columns=chosen, fingerprint=fp,
                                     source=proto["source"], differences=diff, main=i == 0))
    return tables


#: Columns of :meth:`Leaderboard.dataframe` that are not metrics.
_IDENTITY_COLUMNS = frozenset({"record_id", "env", "env_version", "split", "agent", "agent_kind", "algorithm", "n_tasks",
                               "n_episodes", "seeds", "created", "submitted", "id"})


class SplitComparison:
    """One env's primary metric per split, one row per agent, so e.g. SearchQA's ``test`` and
    ``test_unseen`` (the unseen world) sit side by side: a model that learned to search scores alike on
    both, one that memorised the training world does not.

    An agent is its label, algorithm and content hash. Its cell on a split comes from that split's main
    table where it has a result there, else from another table of the split whose protocol was measured
    (a different number of tasks, say; the per-split boards below name the difference): a row then still
    sets one agent's splits side by side. Tables whose protocol is recomputed from old records (or unknown)
    count only as a split's main table.
    Among several results, the one with the most episodes is shown (the first in rank order among equals)."""

    def __init__(self, env: str, metric: str, splits: list[str], rows: list[dict[str, Any]]):
        self.env, self.metric, self.splits, self.rows = env, metric, splits, rows

    @property
    def slug(self) -> str:
        return slug(f"{self.env}-splits")


def split_comparisons(tables: Sequence[BoardTable]) -> dict[str, SplitComparison]:
    """env -> :class:`SplitComparison` for every env with boards on two or more splits (same metric)."""
    by_env: dict[str, list[BoardTable]] = defaultdict(list)
    for t in tables:
        if t.main or t.source == "measured":
            by_env[t.env].append(t)
    out = {}
    for env, ts in by_env.items():
        metric = next(t.metric for t in ts if t.main)
        ts = [t for t in ts if t.metric == metric]
        splits = list(dict.fromkeys(t.split for t in ts))
        if len(splits) < 2:
            continue
        rows: dict[tuple[str, str, str], dict[str, Any]] = {}
        best: dict[tuple[tuple[str, str, str], str], tuple[bool, int]] = {}  # (main table, episodes) of each cell
        for t in ts:
            for r in t.rows:
                key = (r["agent"], r["algorithm"], r.get("agent_hash", ""))
                row = rows.setdefault(key, {"agent": r["agent"], "algorithm": r["algorithm"], "cells": {}})
                if (key, t.split) not in best or (t.main, r["n"]) > best[(key, t.split)]:
                    best[(key, t.split)] = (t.main, r["n"])
                    row["cells"][t.split] = (r["metric"], r["n"])
        first = splits[0]
        ordered = sorted(rows.values(), key=lambda r: (-(r["cells"][first][0][0] if first in r["cells"] else -math.inf),
                                                       r["agent"]))
        out[env] = SplitComparison(env, metric, splits, ordered)
    return out


def _fmt(v: float) -> str:
    if abs(v) >= 100:
        return f"{v:.1f}"
    if abs(v) >= 10:
        return f"{v:.2f}"
    return f"{v:.3f}"


def _cell(t: tuple[float, float, float] | None) -> str:
    return "" if t is None else f"{_fmt(t[0])} [{_fmt(t[1])}, {_fmt(t[2])}]"


#: Characters with a meaning in (GitHub-flavoured) Markdown inline text: backslash-escaped in cells.
#: An underscore between two letters or digits (``success_in_distribution``) cannot start or end
#: emphasis in GFM, so it stays as it is; any other is escaped.
_MD_SPECIAL = re.compile(r"([\\`*\[\]|~$]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z]))")


def _md_escape(text: str) -> str:
    """``text`` shown literally in a Markdown table cell or heading.

    Code hosts render Markdown as HTML, so ``<``, ``>`` and ``&`` become entities (no tag or
    ``onerror=`` from a label reaches the page), Markdown punctuation (emphasis, links, code, table
    pipes, ``$`` maths) is backslash-escaped (intraword underscores excepted: they are inert), and line
    breaks become spaces (a row is one line).
    """
    text = html.escape(str(text), quote=False)
    text = _MD_SPECIAL.sub(r"\\\1", text)
    return re.sub(r"[\r\n]+", " ", text)


def _md_code(text: str) -> str:
    """``text`` inside a Markdown code span (no escapes work there: backticks and newlines removed)."""
    return re.sub(r"[`\r\n]+", "'", str(text))


def render_markdown(tables: Sequence[BoardTable], *, plots: dict[str, list[str]] | None = None, title: str = "stratagym leaderboard") -> str:
    plots = plots or {}
    out = [f"# {title}", "",
           "Generated by `stratagym leaderboard render`. Each cell is `value [95% CI]` (Wilson for rates, "
           "bootstrap for means); `seed std` is the spread of the primary metric across seeds; `n` counts "
           "episodes (tasks x seeds). Rows are in rank order of the primary metric (ties: CI low end, agent, "
           "record id). Only records measured under one protocol (env version, task-changing kwargs, tasks, "
           "data, retriever, prompt, reward, library versions: docs/protocol.md) share a table; "
           "`stratagym leaderboard diff A B` says why two records do not. This page shows the few secondary "
           "metrics each env chooses; `index.html` has every metric, sortable.", ""]
    if not tables:
        out += ["_No results yet: run `stratagym bench` or `stratagym eval ... --submit`._", ""]
    comparisons = split_comparisons(tables)
    for i, t in enumerate(tables):
        if t.env in comparisons and (i == 0 or tables[i - 1].env != t.env):
            out += _md_comparison(comparisons[t.env])
        direction = "higher is better" if higher_is_better(t.metric, t.env) else "lower is better"
        out += [f"## {_md_escape(t.env)} — split `{_md_code(t.split)}`" + ("" if t.main else " — another protocol"), "",
                f"Ranked by **{_md_escape(t.metric)}** ({direction}). {_md_protocol(t)}", ""]
        data_col = ["data"] if t.show_data else []
        dep_col = [SEARCH_DEPENDENCE] if t.shows_search_dependence else []
        head = [_md_escape(h) for h in ["rank", "agent", "algorithm", t.metric, "seed std", "n", "seeds", *data_col, *t.md_columns,
                                        *dep_col, "transcripts", "date", "record"]]
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "|".join("---" for _ in head) + "|")
        for r in t.rows:
            cells = [str(r["rank"]), _md_escape(r["agent"]), _md_escape(r["algorithm"] or "-"), _cell(r["metric"]),
                     "-" if r["seed_std"] is None else _fmt(r["seed_std"]), str(r["n"]), _md_escape(r["seeds"]),
                     *([_md_escape(r.get("data") or "-")] if t.show_data else []),
                     *[_cell(r["extra"].get(c)) or "-" for c in t.md_columns],
                     *([_md_escape(r["search_dependence"])] if dep_col else []), _md_escape(r["transcripts"]),
                     _md_escape(r["created"]), f"`{_md_code(r['record_id'])}`"]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
        for p in plots.get(t.slug, []):
            out += [f"![{_md_escape(t.env)} {_md_escape(t.split)}]({p})", ""]
    for p in plots.get("_training", []):
        out += [f"![training curves]({p})", ""]
    return "\n".join(out)


def protocol_text(t: BoardTable) -> str:
    """One sentence on a table's protocol: its fingerprint and source, and for a table after the first of
    its split, what differs from the first (``topk 1 vs 3``); plain text, escaped by the caller."""
    fp = t.fingerprint.removeprefix("sha256:")[:12]
    what = {"measured": "measured", "recomputed": "recomputed from legacy records' stored config (version, data "
            "and libraries unknown)", "legacy": "legacy records: protocol unknown"}.get(t.source, t.source)
    text = f"Protocol {fp} ({what})."
    if t.differences:
        shown = t.differences[:6] + ([f"and {len(t.differences) - 6} more"] if len(t.differences) > 6 else [])
        text += " Not ranked with the first table of this split: " + "; ".join(shown) + "."
    return text


def _md_protocol(t: BoardTable) -> str:
    return _md_escape(protocol_text(t))


def _md_comparison(c: SplitComparison) -> list[str]:
    out = [f"## {_md_escape(c.env)} — splits side by side", "",
           f"**{_md_escape(c.metric)}** per split (`n` episodes); the per-split boards follow.", ""]
    head = ["agent", "algorithm", *[f"{s} {c.metric}" for s in c.splits], *[f"{s} n" for s in c.splits]]
    out.append("| " + " | ".join(_md_escape(h) for h in head) + " |")
    out.append("|" + "|".join("---" for _ in head) + "|")
    for r in c.rows:
        cells = [_md_escape(r["agent"]), _md_escape(r["algorithm"] or "-"),
                 *[_cell(r["cells"][s][0]) if s in r["cells"] else "-" for s in c.splits],
                 *[str(r["cells"][s][1]) if s in r["cells"] else "-" for s in c.splits]]
        out.append("| " + " | ".join(cells) + " |")
    return out + [""]


def _html_comparison(c: SplitComparison) -> list[str]:
    e = html.escape
    parts = [f'<h2 id="h-{e(c.slug)}">{e(c.env)} — splits side by side</h2>',
             f"<p><b>{e(c.metric)}</b> per split (n episodes); the per-split boards follow.</p>",
             f'<table class="sortable splits" id="splits-{e(c.slug)}" data-env="{e(c.env)}"><thead><tr>']
    heads = [("agent", "t"), ("algorithm", "t"), *[(f"{s} {c.metric}", "") for s in c.splits], *[(f"{s} n", "") for s in c.splits]]
    parts.append("".join(f'<th class="{cls}">{e(h)}</th>' for h, cls in heads))
    parts.append("</tr></thead><tbody>")
    for r in c.rows:
        cells = [(r["agent"], "", "t agent"), (r["algorithm"] or "-", "", "t"),
                 *[(_cell(r["cells"][s][0]), repr(r["cells"][s][0][0]), "") if s in r["cells"] else ("-", "", "")
                   for s in c.splits],
                 *[(str(r["cells"][s][1]), str(r["cells"][s][1]), "") if s in r["cells"] else ("-", "", "") for s in c.splits]]
        parts.append("<tr>" + "".join(f'<td class="{cls}" data-sort="{e(v2)}">{e(v)}</td>' for v, v2, cls in cells) + "</tr>")
    parts.append("</tbody></table>")
    return parts


_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0}
th,td{border:1px solid #ccc;padding:4px 8px;text-align:right}
td.t,th.t{text-align:left}
th{background:#f0f0f0;cursor:pointer;user-select:none}
th[aria-sort=ascending]::after{content:" \\25B2"}
th[aria-sort=descending]::after{content:" \\25BC"}
img{max-width:48em;display:block}
.muted{color:#777}
"""



def render_html(tables: Sequence[BoardTable], *, plots: dict[str, list[str]] | None = None, title: str = "stratagym leaderboard") -> str:
    e = html.escape
    plots = plots or {}
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{e(title)}</title>", f"<style>{_CSS}</style></head><body>", f"<h1>{e(title)}</h1>",
        '<p class="muted">Cells are value [95% CI]. Click a column header to sort; click again to reverse.</p>',
    ]
    if not tables:
        parts.append("<p>No results yet.</p>")
    comparisons = split_comparisons(tables)
    for i, t in enumerate(tables):
        if t.env in comparisons and (i == 0 or tables[i - 1].env != t.env):
            parts += _html_comparison(comparisons[t.env])
        parts.append(f'<h2 id="h-{e(t.slug)}">{e(t.env)} — split <code>{e(t.split)}</code>'
                     + ("" if t.main else " — another protocol") + "</h2>")
        parts.append(f'<p>Ranked by <b>{e(t.metric)}</b>. <span class="protocol" data-fingerprint="{e(t.fingerprint)}">'
                     f"{e(protocol_text(t))}</span></p>")
        parts.append(f'<table class="sortable board" id="board-{e(t.slug)}" data-env="{e(t.env)}" data-split="{e(t.split)}" '
                     f'data-fingerprint="{e(t.fingerprint)}"><thead><tr>')
        heads = [("rank", ""), ("agent", "t"), ("algorithm", "t"), (t.metric, ""), ("seed std", ""), ("n", ""),
                 ("seeds", "t"), *([("data", "t")] if t.show_data else []), *[(c, "") for c in t.columns],
                 *([(SEARCH_DEPENDENCE, "t")] if t.shows_search_dependence else []),
                 ("transcripts", "t"), ("date", "t"), ("record", "t")]
        parts.append("".join(f'<th class="{cls}" data-col="{e(h)}">{e(h)}</th>' for h, cls in heads))
        parts.append("</tr></thead><tbody>")
        for r in t.rows:
            cells = [
                (str(r["rank"]), str(r["rank"]), ""),
                (r["agent"], "", "t agent"),
                (r["algorithm"] or "-", "", "t"),
                (_cell(r["metric"]), repr(r["metric"][0]), "primary"),
                ("-" if r["seed_std"] is None else _fmt(r["seed_std"]), "" if r["seed_std"] is None else repr(r["seed_std"]), ""),
                (str(r["n"]), str(r["n"]), ""),
                (r["seeds"], "", "t"),
                *([(r.get("data") or "-", "", "t")] if t.show_data else []),
                *[(_cell(r["extra"].get(c)) or "-", repr(r["extra"][c][0]) if c in r["extra"] else "", "") for c in t.columns],
                *([(r["search_dependence"], "", "t")] if t.shows_search_dependence else []),
                (r["transcripts"], "", "t"),
                (r["created"], "", "t"),
                (r["record_id"], "", "t"),
            ]
            parts.append("<tr>" + "".join(f'<td class="{cls}" data-sort="{e(s)}">{e(v)}</td>' for v, s, cls in cells) + "</tr>")
        parts.append("</tbody></table>")
        for p in plots.get(t.slug, []):
            parts.append(f'<img src="{e(p)}" alt="{e(t.env)} {e(t.split)} {e(t.metric)}">')
    for p in plots.get("_training", []):
        parts.append(f'<h2>Training curves</h2><img src="{e(p)}" alt="training curves">')
    parts.append(f"<script>{SORTABLE_TABLES_JS}</script></body></html>")
    return "\n".join(parts)


def literal_plot_text() -> Any:
    """A matplotlib rc context in which text is drawn literally: labels are user text, and matplotlib
    would otherwise parse ``$...$`` in them as maths (``$\\foo$`` raises and fails the whole render)."""
    import matplotlib

    return matplotlib.rc_context({"text.parse_math": False, "text.usetex": False})


def save_figure(fig: Any, path: str | os.PathLike[str], *, dpi: int) -> None:
    """Lay ``fig`` out and write it to ``path`` atomically (PNG); the figure is closed whether or not the
    write succeeds."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    try:
        atomic_write_with(path, lambda tmp: fig.savefig(tmp, dpi=dpi))
    finally:
        plt.close(fig)


def _plot_metric(t: BoardTable, path: Path) -> None:
    with literal_plot_text():
        _draw_metric(t, path)


def _draw_metric(t: BoardTable, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = t.rows[:30]
    labels = [f"{r['agent']}" + (f" ({r['algorithm']})" if r["algorithm"] else "") for r in rows]
    vals = [r["metric"][0] for r in rows]
    lo = [max(0.0, r["metric"][0] - r["metric"][1]) for r in rows]
    hi = [max(0.0, r["metric"][2] - r["metric"][0]) for r in rows]
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(rows) + 1.2))
    y = list(range(len(rows)))[::-1]
    ax.barh(y, vals, xerr=[lo, hi], color="#4c72b0", ecolor="#222", capsize=3)
    ax.set_yticks(y, labels)
    ax.set_xlabel(f"{t.metric} (95% CI)")
    ax.set_title(f"{t.env} / {t.split}")
    save_figure(fig, path, dpi=90)


def _points(curve: Any) -> list[tuple[float, float]]:
    """``[{step, reward}]`` or ``[[step, value]]`` -> sorted (x, y) pairs (anything else: none)."""
    pts = []
    for p in curve if isinstance(curve, list) else []:
        if isinstance(p, dict) and "step" in p and "reward" in p:
            xy = (p["step"], p["reward"])
        elif isinstance(p, (list, tuple)) and len(p) == 2:
            xy = (p[0], p[1])
        else:
            continue
        try:  # a board stored before records were schema-checked may hold anything here: skip it
            x, y = float(xy[0]), float(xy[1])
        except (TypeError, ValueError):
            continue
        if math.isfinite(x) and math.isfinite(y):
            pts.append((x, y))
    return sorted(pts)


def _runs_of(training: dict[str, Any]) -> list[list[tuple[float, float]]]:
    """The training runs of a record: ``curve`` is one run, or a mapping seed -> run."""
    curve = training.get("curve")
    if isinstance(curve, dict):
        return [pts for pts in (_points(c) for _, c in sorted(curve.items())) if pts]
    pts = _points(curve)
    return [pts] if pts else []


def _plot_training(records: Iterable[dict[str, Any]], path: Path) -> bool:
    """Training curves per (env, algorithm): mean over seeds with a min-max band. False if none."""
    with literal_plot_text():
        return _draw_training(records, path)


def _draw_training(records: Iterable[dict[str, Any]], path: Path) -> bool:
    curves: dict[str, dict[str, list[list[tuple[float, float]]]]] = defaultdict(lambda: defaultdict(list))
    seen: set[tuple[str, str, str]] = set()
    for r in records:
        tr = r.get("training") or {}
        runs = _runs_of(tr)
        if not runs:
            continue
        alg = str(tr.get("algorithm") or r["agent"].get("algorithm") or r["agent"]["label"])
        key = (r["env"]["id"], alg, r["agent"]["content_hash"])
        if key in seen:  # the same training runs evaluated on several splits
            continue
        seen.add(key)
        curves[key[0]][alg].extend(runs)
    if not curves:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    envs = sorted(curves)
    fig, axes = plt.subplots(1, len(envs), figsize=(5.5 * len(envs), 3.6), squeeze=False)
    for ax, env in zip(axes[0], envs):
        for alg, runs in sorted(curves[env].items()):
            length = min(len(p) for p in runs)
            steps = np.array([p[0] for p in runs[0][:length]])
            ys = np.array([[p[1] for p in run[:length]] for run in runs])
            ax.plot(steps, ys.mean(axis=0), label=f"{alg} ({len(runs)} seed{'s' if len(runs) > 1 else ''})")
            if len(runs) > 1:
                ax.fill_between(steps, ys.min(axis=0), ys.max(axis=0), alpha=0.2)
        ax.set_title(env)
        ax.set_xlabel("training step")
        ax.set_ylabel("training reward")
        ax.legend(fontsize=8)
    save_figure(fig, path, dpi=90)
    return True


def render_board(lb: Any, out_dir: str | os.PathLike[str] = "leaderboard", *, plots: bool = True, title: str = "stratagym leaderboard") -> dict[str, Path]:
    """Write ``LEADERBOARD.md``, ``index.html`` and ``plots/*.png`` for board ``lb`` into ``out_dir``."""
    out = Path(out_dir)
    tables = board_tables(lb)
    plot_paths: dict[str, list[str]] = {}
    if plots:
        pdir = out / "plots"
        pdir.mkdir(parents=True, exist_ok=True)
        for t in tables:
            if t.rows:
                p = pdir / f"{t.slug}-{re.sub(r'[^A-Za-z0-9]+', '-', t.metric)}.png"
                _plot_metric(t, p)
                plot_paths[t.slug] = [p.relative_to(out).as_posix()]
        tp = pdir / "training-curves.png"
        if _plot_training(lb.records(), tp):
            plot_paths["_training"] = [tp.relative_to(out).as_posix()]
    md = out / "LEADERBOARD.md"
    page = out / "index.html"
    atomic_write(md, render_markdown(tables, plots=plot_paths, title=title))
    atomic_write(page, render_html(tables, plots=plot_paths, title=title))
    return {"markdown": md, "html": page, **{f"plot:{k}": out / v[0] for k, v in plot_paths.items()}}
