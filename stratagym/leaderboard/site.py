"""The static site: the board's tables and, per record, its episodes and their transcripts.

``stratagym leaderboard site OUT`` writes a folder that opens from disk (``file://``), with no server and
no network: ``index.html`` (one table per env, split and protocol, as on the board) and one page per record
under ``records/``. Why a site beside ``LEADERBOARD.md``: a number is believed once people can read the
episodes behind it, and a 21-column table is unreadable in Markdown.

* **Narrow tables.** Each board table shows rank, agent, algorithm, the primary metric with its CI, n,
  seeds and a link to the record's episodes; every other metric sits behind a click ("all metrics", a
  ``<details>`` block holding the full table, sortable by any column).
* **A record's page**: who and what was evaluated, the protocol fingerprint field by field, every metric,
  small charts (success per task type where the env names types, episodes per search count split by
  outcome, and from the transcripts how many episodes searched at each turn), and the episodes, filterable by outcome, task type and task id. Each episode opens to its
  outcome and, where the eval left a transcript (``stratagym eval`` keeps them in the progress file; see
  :mod:`stratagym.eval.transcripts`), every turn: what the agent saw, what the model wrote, the action
  sent, the reward, validity, the search count after the step and the env's info.
* **Escaped.** Every string from a record or transcript (labels, task ids, observations, model text) is
  HTML-escaped, in text and in attributes; the pages' one script is pinned by a Content-Security-Policy
  hash, so even a string that escaped escaping could not run script.
* **Deterministic.** The same records and transcripts give the same bytes (no build time, stable order);
  the folder is published atomically (:func:`stratagym.atomic.publish_dir`): a reader never sees half a site.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import os
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Mapping, Sequence

from stratagym.atomic import atomic_write, publish_dir
from stratagym.errors import UserError
from stratagym.eval.aggregate import higher_is_better
from stratagym.leaderboard.protocols import protocol_for
from stratagym.leaderboard.render import BoardTable, _cell, _fmt, protocol_text, board_tables
from stratagym.leaderboard.scripts import EPISODE_FILTERS_JS, SORTABLE_TABLES_JS
from stratagym.paths import slug

__all__ = ["build_site", "SiteError", "MARKER", "record_page_name"]

#: A file every site folder holds: ``build_site`` replaces only a folder that has it (or an empty one).
MARKER = ".stratagym-site"
#: Transcripts of one record: ``(seed, task_id) -> {"steps": [...], "final_observation": ...}``.
Transcripts = Mapping[tuple[int, str], Mapping[str, Any]]


class SiteError(UserError, ValueError):
    """A site that cannot be written where asked."""


def _e(value: Any) -> str:
    """Any value as HTML text, escaped for text and for (double-quoted) attributes alike."""
    return html.escape("" if value is None else str(value), quote=True)


def record_page_name(record_id: str) -> str:
    """The file name of a record's page (under ``records/``): the first 16 characters of its id."""
    return f"{slug(record_id)[:16]}.html"


_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:80em}
table{border-collapse:collapse;margin:.5em 0}
th,td{border:1px solid #ccc;padding:3px 7px;text-align:right;vertical-align:top}
td.t,th.t{text-align:left}
th{background:#f0f0f0}
table.sortable th{cursor:pointer;user-select:none}
th[aria-sort=ascending]::after{content:" \\25B2"}
th[aria-sort=descending]::after{content:" \\25BC"}
.muted{color:#777}
details.more{margin:.3em 0 1.5em}
details.episode{border:1px solid #ddd;margin:.3em 0;padding:.2em .5em}
details.episode[data-won="1"]>summary{color:#1a6b1a}
details.episode[data-won="0"]>summary{color:#9b1c1c}
pre{white-space:pre-wrap;word-break:break-word;background:#f7f7f7;padding:.4em;margin:.2em 0;max-height:24em;overflow:auto}
ol.turns>li{margin:.6em 0}
.k{color:#555;font-size:90%}
.filters label{margin-right:1.2em}
svg text{font-size:11px;fill:#222}
"""

#: The one script of every page (the CSP admits it by hash alone): sortable tables and the episode filters.
_JS = SORTABLE_TABLES_JS + EPISODE_FILTERS_JS


def _csp() -> str:
    digest = base64.b64encode(hashlib.sha256(_JS.encode("utf-8")).digest()).decode("ascii")
    return (f"default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; img-src 'self' data:; "
            "base-uri 'none'; form-action 'none'")


def _page(title: str, body: list[str]) -> str:
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_e(_csp())}">',
        '<meta name="generator" content="stratagym leaderboard site">',
        f"<title>{_e(title)}</title>", f"<style>{_CSS}</style></head><body>",
        *body, f"<script>{_JS}</script></body></html>", ""])


# ---- the index: narrow board tables, the rest behind a click ------------------------------------------


def _narrow_table(t: BoardTable) -> list[str]:
    heads = [("rank", ""), ("agent", "t"), ("algorithm", "t"), (t.metric, ""), ("n", ""), ("seeds", "t"),
             ("transcripts", "t"), ("episodes", "t")]
    out = [f'<table class="sortable board" id="board-{_e(t.slug)}" data-env="{_e(t.env)}" data-split="{_e(t.split)}" '
           f'data-fingerprint="{_e(t.fingerprint)}"><thead><tr>'
           + "".join(f'<th class="{c}" data-col="{_e(h)}">{_e(h)}</th>' for h, c in heads) + "</tr></thead><tbody>"]
    for r in t.rows:
        page = "records/" + record_page_name(r["record_id_full"])
        cells = [
            f'<td data-sort="{r["rank"]}">{r["rank"]}</td>',
            f'<td class="t agent">{_e(r["agent"])}</td>',
            f'<td class="t">{_e(r["algorithm"] or "-")}</td>',
            f'<td class="primary" data-sort="{r["metric"][0]!r}">{_e(_cell(r["metric"]))}</td>',
            f'<td data-sort="{r["n"]}">{r["n"]}</td>',
            f'<td class="t">{_e(r["seeds"])}</td>',
            f'<td class="t transcripts">{_e(r["transcripts"])}</td>',
            f'<td class="t"><a class="record-link" href="{_e(page)}">{_e(r["record_id"])}</a></td>',
        ]
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    return out


def _wide_table(t: BoardTable) -> list[str]:
    heads = [("rank", ""), ("agent", "t"), (t.metric, ""), ("seed std", ""), ("n", ""),
             *([("data", "t")] if t.show_data else []), *[(c, "") for c in t.columns], ("date", "t")]
    out = [f'<details class="more"><summary>All metrics ({len(heads)} columns)</summary>',
           '<table class="sortable wide"><thead><tr>'
           + "".join(f'<th class="{c}" data-col="{_e(h)}">{_e(h)}</th>' for h, c in heads) + "</tr></thead><tbody>"]
    for r in t.rows:
        cells = [(str(r["rank"]), str(r["rank"]), ""), (r["agent"], "", "t agent"),
                 (_cell(r["metric"]), repr(r["metric"][0]), ""),
                 ("-" if r["seed_std"] is None else _fmt(r["seed_std"]), "" if r["seed_std"] is None else repr(r["seed_std"]), ""),
                 (str(r["n"]), str(r["n"]), ""), *([(r.get("data") or "-", "", "t")] if t.show_data else []),
                 *[(_cell(r["extra"].get(c)) or "-", repr(r["extra"][c][0]) if c in r["extra"] else "", "") for c in t.columns],
                 (r["created"], "", "t")]
        out.append("<tr>" + "".join(f'<td class="{c}" data-sort="{_e(s)}">{_e(v)}</td>' for v, s, c in cells) + "</tr>")
    out.append("</tbody></table></details>")
    return out


def render_index(tables: Sequence[BoardTable], *, title: str = "stratagym leaderboard") -> str:
    """The site's front page: every board table, narrow, each row linking to its record's page."""
    body = [f"<h1>{_e(title)}</h1>",
            '<p class="muted">Cells are value [95% CI]; n counts episodes. Only records measured under one protocol '
            "share a table (docs/protocol.md). Click a column header to sort; open <i>All metrics</i> for the rest "
            "of a table; follow a record to read its episodes.</p>"]
    if not tables:
        body.append("<p>No results yet.</p>")
    for t in tables:
        direction = "higher is better" if higher_is_better(t.metric, t.env) else "lower is better"
        body.append(f'<h2 id="h-{_e(t.slug)}">{_e(t.env)} — split <code>{_e(t.split)}</code>'
                    + ("" if t.main else " — another protocol") + "</h2>")
        body.append(f"<p>Ranked by <b>{_e(t.metric)}</b> ({direction}). "
                    f'<span class="protocol">{_e(protocol_text(t))}</span></p>')
        body += _narrow_table(t)
        body += _wide_table(t)
    return _page(title, body)


# ---- a record's page ------------------------------------------------------------------------------------


def _flat(prefix: str, value: Any, out: list[tuple[str, Any]]) -> None:
    if isinstance(value, Mapping) and value:
        for k in sorted(value, key=str):
            _flat(f"{prefix}.{k}" if prefix else str(k), value[k], out)
    else:
        out.append((prefix, value))


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _flat_table(css_class: str, value: Any) -> list[str]:
    """``value`` as a two-column key/value table, nested keys joined with dots; nothing for an empty or
    non-mapping value."""
    if not isinstance(value, Mapping) or not value:
        return []
    flat: list[tuple[str, Any]] = []
    _flat("", value, flat)
    return [f'<table class="{css_class}">' + "".join(f'<tr><td class="t k">{_e(k)}</td><td class="t">{_e(_show(v))}</td></tr>'
                                                     for k, v in flat) + "</table>"]


def _task_type(ep: Mapping[str, Any]) -> str | None:
    extra = ep.get("extra")
    value = extra.get("task_type") if isinstance(extra, Mapping) else None
    return None if value is None else str(value)


def _bars_svg(title: str, rows: list[tuple[str, list[tuple[float, str]]]], *, scale: float, unit: str) -> str:
    """A horizontal stacked bar chart as inline SVG: ``rows`` of ``(label, [(value, colour), ...])``; bars
    are ``value / scale`` of the full width. Labels are escaped text nodes."""
    width, label_w, bar_w, row_h = 640, 170, 330, 18
    height = 24 + row_h * len(rows)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{width}" height="{height}" role="img">'
           f'<title>{_e(title)}</title><text x="0" y="13">{_e(title)}</text>']
    for i, (label, parts) in enumerate(rows):
        y = 22 + i * row_h
        out.append(f'<text x="0" y="{y + 12}">{_e(label[:28])}</text>')
        x = float(label_w)
        for value, colour in parts:
            w = bar_w * (value / scale if scale else 0.0)
            out.append(f'<rect x="{x:.1f}" y="{y + 2}" width="{w:.1f}" height="{row_h - 5}" fill="{colour}"/>')
            x += w
        total = sum(v for v, _ in parts)
        out.append(f'<text x="{x + 4:.1f}" y="{y + 12}">{_e(f"{total:g} {unit}")}</text>')
    out.append("</svg>")
    return "".join(out)


_WON, _LOST = "#3a8f3a", "#c44e4e"


_SEARCHED, _OTHER = "#4c72b0", "#bbbbbb"


def _searches_per_turn(episodes: Sequence[Mapping[str, Any]], transcripts: Transcripts) -> list[str]:
    """Per turn index, across the episodes with a transcript: how many searched at that turn (the search
    count rose) and how many did something else. Empty when no transcribed episode searched."""
    by_turn: dict[int, Counter[bool]] = defaultdict(Counter)
    for ep in episodes:
        t = transcripts.get((ep.get("seed"), str(ep.get("task_id"))))
        steps = t.get("steps") if isinstance(t, Mapping) else None
        before = 0
        for i, step in enumerate(steps if isinstance(steps, list) else []):
            count = step.get("search_count") if isinstance(step, Mapping) else None
            if not isinstance(count, int) or isinstance(count, bool):
                break
            by_turn[i][count > before] += 1
            before = count
    if not any(c[True] for c in by_turn.values()):
        return []
    rows = [(f"turn {i}", [(float(c[True]), _SEARCHED), (float(c[False]), _OTHER)]) for i, c in sorted(by_turn.items())]
    scale = max(sum(c.values()) for c in by_turn.values())
    return [_bars_svg("Searches per turn (blue: searched, grey: another action)", rows, scale=scale, unit="episodes")]


def _charts(episodes: Sequence[Mapping[str, Any]]) -> list[str]:
    """Per task type: succeeded and failed episodes; per final search count: the same (where any episode
    searched). Empty when neither says anything."""
    out = []
    by_type: dict[str, Counter[bool]] = defaultdict(Counter)
    for ep in episodes:
        t = _task_type(ep)
        if t is not None:
            by_type[t][bool(ep.get("won"))] += 1
    if by_type:
        rows = [(t, [(float(c[True]), _WON), (float(c[False]), _LOST)]) for t, c in sorted(by_type.items())]
        scale = max(sum(c.values()) for c in by_type.values())
        out.append(_bars_svg("Episodes per task type (green: succeeded, red: failed)", rows, scale=scale, unit="episodes"))
    by_search: dict[int, Counter[bool]] = defaultdict(Counter)
    for ep in episodes:
        sc = ep.get("search_count")
        if isinstance(sc, int) and not isinstance(sc, bool):
            by_search[sc][bool(ep.get("won"))] += 1
    if any(k > 0 for k in by_search):
        rows = [(f"{k} search{'es' if k != 1 else ''}", [(float(c[True]), _WON), (float(c[False]), _LOST)])
                for k, c in sorted(by_search.items())]
        scale = max(sum(c.values()) for c in by_search.values())
        out.append(_bars_svg("Episodes per search count (green: succeeded, red: failed)", rows, scale=scale, unit="episodes"))
    return out


def _turn(step: Mapping[str, Any]) -> list[str]:
    text, action = step.get("text"), step.get("action")
    out = [f'<li class="turn" data-step="{_e(step.get("step"))}">',
           f'<div class="k">reward {_e(_show(step.get("reward")))} · '
           f'{"valid" if step.get("action_valid", True) else "<b>invalid</b>"} action · '
           f'format {"ok" if step.get("format_ok", True) else "not ok"} · searches so far {_e(step.get("search_count"))}</div>',
           '<div class="k">observation</div>', f'<pre class="obs">{_e(step.get("observation"))}</pre>',
           '<div class="k">model response</div>', f'<pre class="text">{_e(text)}</pre>']
    if action != text:
        out += ['<div class="k">action sent</div>', f'<pre class="action">{_e(action)}</pre>']
    out += _flat_table("info", step.get("info"))
    out.append("</li>")
    return out


def _episode(ep: Mapping[str, Any], transcript: Mapping[str, Any] | None) -> list[str]:
    won = bool(ep.get("won"))
    ttype = _task_type(ep)
    summary = (f'seed {_e(ep.get("seed"))} · task <code>{_e(ep.get("task_id"))}</code>'
               + (f" · {_e(ttype)}" if ttype is not None else "")
               + f' · {"succeeded" if won else "failed"} · reward {_e(_show(ep.get("total_reward")))} · '
               f'{_e(ep.get("turns"))} turns · {_e(ep.get("search_count"))} searches · '
               f'valid {_e(_show(ep.get("valid_ratio")))}' + (" · truncated" if ep.get("truncated") else ""))
    out = [f'<details class="episode" data-won="{1 if won else 0}" data-type="{_e(ttype or "")}" '
           f'data-task="{_e(ep.get("task_id"))}"><summary>{summary}</summary>']
    out += _flat_table("outcome", ep.get("extra"))
    steps = transcript.get("steps") if isinstance(transcript, Mapping) else None
    if isinstance(steps, list) and steps:
        out.append('<ol class="turns" start="0">')
        for step in steps:
            if isinstance(step, Mapping):
                out += _turn(step)
        out.append("</ol>")
        final = transcript.get("final_observation") if isinstance(transcript, Mapping) else None
        if final is not None:
            out += ['<div class="k">the env\'s answer to the last action</div>', f'<pre class="final">{_e(final)}</pre>']
    else:
        out.append('<p class="muted no-transcript">No transcript for this episode: the record names no committed '
                   "archive holding it (not back-filled, or beyond the archive's size budget), and no progress file "
                   "given to <code>stratagym leaderboard site --transcripts</code> holds it.</p>")
    out.append("</details>")
    return out


def render_record(record: Mapping[str, Any], table: BoardTable | None, transcripts: Transcripts | None = None, *,
                  title: str = "stratagym leaderboard") -> str:
    """The page of one record: identity, protocol, metrics, charts and its episodes (see the module
    docstring). ``transcripts``: ``(seed, task_id) -> transcript`` from :mod:`stratagym.eval.transcripts`."""
    agent = record.get("agent") or {}
    env = record.get("env") or {}
    proto = protocol_for(record)
    head = f"{agent.get('label', '?')} on {env.get('id', '?')} / {record.get('split', '?')}"
    episodes = [e for e in record.get("episodes") or [] if isinstance(e, Mapping)]
    transcripts = transcripts or {}
    n_with = sum(1 for ep in episodes if (ep.get("seed"), str(ep.get("task_id"))) in transcripts)
    body = [f'<p><a href="../index.html">← the board</a></p>', f"<h1>{_e(head)}</h1>"]
    facts = [("agent", agent.get("label")), ("agent spec", agent.get("spec")), ("kind", agent.get("kind")),
             ("algorithm", agent.get("algorithm") or "-"), ("agent content hash", agent.get("content_hash")),
             ("env", env.get("id")), ("split", record.get("split")), ("data source", env.get("data_source") or "-"),
             ("seeds", ",".join(str(s) for s in record.get("seeds") or [])), ("episodes", record.get("n_episodes")),
             ("created", record.get("created")), ("record id", record.get("record_id")),
             ("rank", f"{next((r['rank'] for r in table.rows if r['record_id_full'] == record.get('record_id')), '-')} "
                      f"of {len(table.rows)} in its table" if table is not None else "-")]
    body.append('<table class="facts">' + "".join(f'<tr><th class="t">{_e(k)}</th><td class="t">{_e(v)}</td></tr>'
                                                  for k, v in facts) + "</table>")
    fields: list[tuple[str, Any]] = []
    _flat("", proto["fields"] or {}, fields)
    body += [f'<details class="protocol"><summary>Protocol {_e(proto["fingerprint"][:19])} ({_e(proto["source"])}): '
             f"{len(fields)} fields</summary>",
             '<table class="protocol-fields">' + "".join(f'<tr><td class="t k">{_e(k)}</td><td class="t">{_e(_show(v))}</td></tr>'
                                                          for k, v in fields) + "</table></details>"]
    metrics = record.get("metrics") or {}
    body += ["<h2>Metrics</h2>", '<table class="sortable metrics"><thead><tr><th class="t">metric</th><th>value [95% CI]</th>'
             "<th>n</th></tr></thead><tbody>"]
    for name in sorted(metrics):
        m = metrics[name]
        try:
            cell = _cell((float(m["value"]), float(m["ci_low"]), float(m["ci_high"])))
            sort = repr(float(m["value"]))
        except (KeyError, TypeError, ValueError):
            cell, sort = "-", ""
        body.append(f'<tr><td class="t">{_e(name)}</td><td data-sort="{_e(sort)}">{_e(cell)}</td>'
                    f'<td>{_e(m.get("n") if isinstance(m, Mapping) else "")}</td></tr>')
    body.append("</tbody></table>")
    body += _charts(episodes) + _searches_per_turn(episodes, transcripts)
    types = sorted({t for t in (_task_type(ep) for ep in episodes) if t is not None})
    body += [f"<h2>Episodes</h2>",
             f'<p class="muted">{len(episodes)} episodes, {n_with} with a transcript. Open one to read its turns.</p>',
             '<p class="filters"><label>outcome <select id="f-won"><option value="">all</option>'
             '<option value="1">succeeded</option><option value="0">failed</option></select></label>']
    if types:
        body.append('<label>task type <select id="f-type"><option value="">all</option>'
                    + "".join(f'<option value="{_e(t)}">{_e(t)}</option>' for t in types) + "</select></label>")
    body.append('<label>task id <input id="f-task" type="search"></label> shown: <span id="f-count">'
                f"{len(episodes)}</span></p>")
    for ep in episodes:
        body += _episode(ep, transcripts.get((ep.get("seed"), str(ep.get("task_id")))))
    return _page(f"{head} — {title}", body)


# ---- the folder ------------------------------------------------------------------------------------------


def _replaceable(out: Path) -> bool:
    return not out.exists() or (out.is_dir() and ((out / MARKER).is_file() or not any(out.iterdir())))


def build_site(lb: Any, out_dir: str | os.PathLike[str], *,
               transcripts: Mapping[str, Transcripts] | None = None, title: str = "stratagym leaderboard") -> dict[str, Any]:
    """Write the site of board ``lb`` into ``out_dir`` (replacing an earlier site there, atomically).

    ``transcripts``: ``record_id -> {(seed, task_id): transcript}`` (from
    :func:`stratagym.eval.transcripts.find_transcripts`). Refuses (:class:`SiteError`) a folder that holds
    anything but an earlier site, so a mistyped path never deletes someone's files. Returns the index path,
    the number of record pages and of episodes with a transcript."""
    out = Path(out_dir)
    if not _replaceable(out):
        raise SiteError(f"{out} exists and is not a stratagym site (no {MARKER} file in it); give an empty or "
                        "new folder, or the folder of an earlier `stratagym leaderboard site`")
    tables = board_tables(lb)
    table_of = {r["record_id_full"]: t for t in tables for r in t.rows}
    records = sorted(lb.records(), key=lambda r: str(r.get("record_id")))
    transcripts = transcripts or {}
    shown = 0

    def write(tmp: Path) -> None:
        nonlocal shown
        atomic_write(tmp / MARKER, "A static site written by `stratagym leaderboard site`; rebuilt as a whole.\n")
        atomic_write(tmp / "index.html", render_index(tables, title=title))
        (tmp / "records").mkdir()
        for rec in records:
            rid = str(rec.get("record_id"))
            rec = {k: v for k, v in rec.items() if k != "_board_id"}
            mine = transcripts.get(rid) or {}
            shown += sum(1 for ep in rec.get("episodes") or [] if isinstance(ep, Mapping)
                         and (ep.get("seed"), str(ep.get("task_id"))) in mine)
            atomic_write(tmp / "records" / record_page_name(rid), render_record(rec, table_of.get(rid), mine, title=title))

    publish_dir(out, write)
    return {"index": out / "index.html", "records": len(records), "transcribed_episodes": shown}
