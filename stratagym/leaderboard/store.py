"""The leaderboard store: result records in a SQL database behind SQLAlchemy.

SQLite file by default (``leaderboard/board.db``), PostgreSQL (or anything SQLAlchemy speaks) by URL::

    lb = Leaderboard()                                          # sqlite:///leaderboard/board.db
    lb = Leaderboard("postgresql+psycopg2://user@127.0.0.1:5432/board")
    lb.submit(record)                                           # validated; returns the row id
    lb.ranking("stratagym/SearchQA-v0", "test", "em")          # pandas DataFrame, best first

Two tables: ``results`` (one row per record: identity columns + the full record JSON) and ``metrics``
(one row per (result, metric): value, n, CI, across-seed mean/std) so rankings are plain SQL.

Concurrency. Many processes may submit to one board at once. ``record_id`` is UNIQUE, so a duplicate is
refused by the database itself, race or not. On SQLite every write transaction starts with ``BEGIN
IMMEDIATE`` (takes the write lock up front, so two writers never deadlock upgrading read locks), the
journal is WAL and the busy timeout is long; a still-locked database is retried with backoff. On
PostgreSQL each submit is one transaction; concurrent first-time schema creation is retried.
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path
from typing import Any, Callable, Collection, Mapping, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError, ProgrammingError

from stratagym.errors import ConfigError
from stratagym.eval.aggregate import higher_is_better, primary_metric
from stratagym.eval.records import utc_now
from stratagym.leaderboard.schema import COLUMN_LENGTHS
from stratagym.leaderboard.validate import SubmissionError, validate_record

__all__ = ["Leaderboard", "SubmissionError", "DEFAULT_BOARD", "resolve_url"]

DEFAULT_BOARD = Path("leaderboard") / "board.db"
T = TypeVar("T")

metadata = sa.MetaData()

results = sa.Table(
    "results",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("record_id", sa.String(COLUMN_LENGTHS["record_id"]), nullable=False, unique=True),
    sa.Column("schema", sa.String(COLUMN_LENGTHS["schema"]), nullable=False),
    sa.Column("env_id", sa.String(COLUMN_LENGTHS["env_id"]), nullable=False, index=True),
    sa.Column("env_version", sa.String(COLUMN_LENGTHS["env_version"]), nullable=False),
    sa.Column("data_hash", sa.String(COLUMN_LENGTHS["data_hash"]), nullable=False),
    sa.Column("split", sa.String(COLUMN_LENGTHS["split"]), nullable=False),
    sa.Column("agent_label", sa.String(COLUMN_LENGTHS["agent_label"]), nullable=False),
    sa.Column("agent_kind", sa.String(COLUMN_LENGTHS["agent_kind"]), nullable=False),
    sa.Column("agent_hash", sa.String(COLUMN_LENGTHS["agent_hash"]), nullable=False),
    sa.Column("algorithm", sa.String(COLUMN_LENGTHS["algorithm"])),
    sa.Column("n_tasks", sa.Integer, nullable=False),
    sa.Column("n_episodes", sa.Integer, nullable=False),
    sa.Column("seeds", sa.Text, nullable=False),
    sa.Column("created", sa.String(COLUMN_LENGTHS["created"]), nullable=False),
    sa.Column("submitted", sa.String(COLUMN_LENGTHS["submitted"]), nullable=False),
    sa.Column("stratagym_version", sa.String(COLUMN_LENGTHS["stratagym_version"]), nullable=False),
    sa.Column("record", sa.Text, nullable=False),
    sa.Index("ix_results_env_split", "env_id", "split"),
)

metrics_table = sa.Table(
    "metrics",
    metadata,
    sa.Column("result_id", sa.Integer, sa.ForeignKey("results.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("name", sa.String(COLUMN_LENGTHS["metric_name"]), primary_key=True),
    sa.Column("value", sa.Float, nullable=False),
    sa.Column("n", sa.Integer, nullable=False),
    sa.Column("ci_low", sa.Float, nullable=False),
    sa.Column("ci_high", sa.Float, nullable=False),
    sa.Column("seed_mean", sa.Float),
    sa.Column("seed_std", sa.Float),
    sa.Column("n_seeds", sa.Integer),
)


def resolve_url(board: str | os.PathLike[str] | None) -> str:
    """A SQLAlchemy URL for ``board``: None -> the default SQLite file; a path -> SQLite at that path."""
    if board is None:
        board = os.environ.get("STRATAGYM_BOARD") or DEFAULT_BOARD
    text = str(board)
    if "://" in text:
        return text
    path = Path(text).expanduser().resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


def _hide_password(url: str) -> str:
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL SQLAlchemy can parse: shown as given (it holds no parsed password)
        return url


def _is_locked(exc: BaseException) -> bool:
    msg = str(exc).lower()
    return "database is locked" in msg or "database is busy" in msg or "deadlock" in msg


class Leaderboard:
    """A result store with validation, ranking and pandas views (see the module docstring)."""

    def __init__(
        self,
        url: str | os.PathLike[str] | None = None,
        *,
        known_envs: Collection[str] | None = None,
        extra_splits: Mapping[str, Collection[str]] | None = None,
        validate: bool = True,
    ):
        self.url = resolve_url(url)
        shown = _hide_password(self.url)
        self.known_envs = known_envs
        self.extra_splits = extra_splits
        self.validate = validate
        self.is_sqlite = self.url.startswith("sqlite")
        try:
            if self.is_sqlite:
                self.engine = sa.create_engine(self.url, connect_args={"timeout": 60, "isolation_level": None}, poolclass=sa.pool.NullPool)
                event.listen(self.engine, "connect", _sqlite_on_connect)
                event.listen(self.engine, "begin", lambda conn: conn.exec_driver_sql("BEGIN IMMEDIATE"))
            else:
                self.engine = sa.create_engine(self.url, pool_pre_ping=True)
        except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError, ImportError) as exc:
            raise ConfigError(f"cannot use leaderboard URL {shown!r}: {exc}. Give a SQLite path or a URL such as "
                              "postgresql+psycopg2://user@host:5432/board") from None
        try:
            self._retry(lambda: metadata.create_all(self.engine), create=True)
        except (OperationalError, ProgrammingError) as exc:
            raise ConfigError(f"cannot open the leaderboard at {shown!r}: {str(getattr(exc, 'orig', exc)).strip()}. "
                              "Check the path or URL, that its folder exists and is writable, and that the server runs") from None

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> "Leaderboard":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Leaderboard({self.engine.url.render_as_string(hide_password=True)!r})"

    # ---- writing ---------------------------------------------------------------------------------
    def _retry(self, fn: Callable[[], T], *, create: bool = False, attempts: int = 60) -> T:
        delay = 0.01
        for attempt in range(attempts):
            try:
                return fn()
            except IntegrityError as exc:
                if not create:
                    raise
                err: BaseException = exc  # concurrent CREATE TABLE on PostgreSQL (pg_type unique index)
            except (OperationalError, ProgrammingError) as exc:
                if not (_is_locked(exc) or (create and "already exists" in str(exc).lower())):
                    raise
                err = exc
            if attempt == attempts - 1:
                raise RuntimeError(f"leaderboard {self!r} stayed busy after {attempts} attempts: {err}")
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 1.0)
        raise AssertionError("unreachable")

    def submit(self, record: Mapping[str, Any]) -> int:
        """Validate and store ``record``; return its row id. Raises :class:`SubmissionError` when refused
        (schema, non-finite metric, unknown env or split, or the same record already on the board)."""
        if self.validate:
            validate_record(record, known_envs=self.known_envs, extra_splits=self.extra_splits)
        row = _result_row(record)
        metric_rows = _metric_rows(record)

        def insert() -> int:
            with self.engine.begin() as conn:
                rid = conn.execute(results.insert().values(**row)).inserted_primary_key[0]
                conn.execute(metrics_table.insert(), [{**m, "result_id": rid} for m in metric_rows])
                return int(rid)

        try:
            return self._retry(insert)
        except IntegrityError:
            existing = self._find(record["record_id"])
            where = f" (#{existing['id']}, submitted {existing['submitted']})" if existing else ""
            if existing and existing.get("record") != row["record"]:
                # the id covers everything but ``created``: the same evaluation stamped at another time (a
                # re-run), which must not replace the row people have seen
                raise SubmissionError(
                    f"duplicate id with different content: a record with this id (the same evaluation stamped at another "
                    f"time) is already on the board{where}; "
                    "the board keeps the first (delete it first to replace it)", record_id=record["record_id"]
                ) from None
            raise SubmissionError(
                f"duplicate: this exact record is already on the board{where}", record_id=record["record_id"]
            ) from None
        except (sa.exc.StatementError, ValueError) as exc:  # psycopg2 raises ValueError for NUL unwrapped
            if isinstance(exc, OperationalError):  # the database itself failed (not this record): a real error
                raise
            # a value the schema let through but this database cannot hold (defence in depth: the schema
            # is bounded by the columns, so this is a bug to report, not a crash of the whole submit loop)
            raise SubmissionError(f"the database refused the record: {str(getattr(exc, 'orig', exc)).strip()[:300]}",
                                  record_id=record["record_id"]) from None

    def delete(self, result_id: int) -> bool:
        def run() -> int:
            with self.engine.begin() as conn:
                conn.execute(metrics_table.delete().where(metrics_table.c.result_id == result_id))
                return conn.execute(results.delete().where(results.c.id == result_id)).rowcount

        return bool(self._retry(run))

    def delete_record(self, record_id: str) -> bool:
        """Delete the result with this record id (a superseded record); False when it is not on the board."""
        found = self._find(record_id)
        return bool(found) and self.delete(int(found["id"]))

    # ---- reading ---------------------------------------------------------------------------------
    def _find(self, record_id: str) -> dict[str, Any] | None:
        with self.engine.connect() as conn:
            r = conn.execute(sa.select(results.c.id, results.c.submitted, results.c.record).where(results.c.record_id == record_id)).first()
        return dict(r._mapping) if r else None

    def has_record(self, record_id: str) -> bool:
        """Whether a record with this id is on the board (submitting it again would be a duplicate)."""
        return self._find(record_id) is not None

    def __len__(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(results)).scalar_one())

    def boards(self) -> list[tuple[str, str]]:
        """The (env, split) pairs that have results, sorted."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(results.c.env_id, results.c.split).distinct()).all()
        return sorted((r[0], r[1]) for r in rows)

    def records(self, env: str | None = None, split: str | None = None) -> list[dict[str, Any]]:
        """The stored records (full JSON), oldest first, optionally of one env/split."""
        q = sa.select(results.c.id, results.c.record).order_by(results.c.id)
        if env is not None:
            q = q.where(results.c.env_id == env)
        if split is not None:
            q = q.where(results.c.split == split)
        with self.engine.connect() as conn:
            out = []
            for rid, text in conn.execute(q):
                rec = json.loads(text)
                rec["_board_id"] = rid
                out.append(rec)
        return out

    def metric_names(self, env: str | None = None, split: str | None = None) -> list[str]:
        q = sa.select(metrics_table.c.name).distinct().join(results, results.c.id == metrics_table.c.result_id)
        if env is not None:
            q = q.where(results.c.env_id == env)
        if split is not None:
            q = q.where(results.c.split == split)
        with self.engine.connect() as conn:
            return sorted(r[0] for r in conn.execute(q))

    def dataframe(self, env: str | None = None, split: str | None = None, *, wide: bool = True) -> Any:
        """A pandas DataFrame of the board.

        ``wide=True``: one row per result with identity columns and, per metric ``m``, columns ``m``,
        ``m_ci_low``, ``m_ci_high``, ``m_seed_std``. ``wide=False``: one row per (result, metric).
        """
        import pandas as pd

        q = (
            sa.select(
                results.c.id, results.c.record_id, results.c.env_id.label("env"), results.c.env_version,
                results.c.split, results.c.agent_label.label("agent"), results.c.agent_kind, results.c.algorithm,
                results.c.n_tasks, results.c.n_episodes, results.c.seeds, results.c.created, results.c.submitted,
                metrics_table.c.name.label("metric"), metrics_table.c.value, metrics_table.c.n, metrics_table.c.ci_low,
                metrics_table.c.ci_high, metrics_table.c.seed_mean, metrics_table.c.seed_std, metrics_table.c.n_seeds,
            )
            .join(metrics_table, results.c.id == metrics_table.c.result_id)
            .order_by(results.c.id, metrics_table.c.name)
        )
        if env is not None:
            q = q.where(results.c.env_id == env)
        if split is not None:
            q = q.where(results.c.split == split)
        with self.engine.connect() as conn:
            long = pd.DataFrame(conn.execute(q).mappings().all())
        ident = ["id", "record_id", "env", "env_version", "split", "agent", "agent_kind", "algorithm", "n_tasks",
                 "n_episodes", "seeds", "created", "submitted"]
        if long.empty:
            return pd.DataFrame(columns=ident if wide else ident + ["metric", "value", "n", "ci_low", "ci_high"])
        long["seeds"] = long["seeds"].map(lambda s: tuple(json.loads(s)))
        if not wide:
            return long
        base = long[ident].drop_duplicates("id").set_index("id")
        parts = [base]
        for col, suffix in (("value", ""), ("ci_low", "_ci_low"), ("ci_high", "_ci_high"), ("seed_std", "_seed_std")):
            p = long.pivot(index="id", columns="metric", values=col)
            p.columns = [f"{c}{suffix}" for c in p.columns]
            parts.append(p)
        wide_df = pd.concat(parts, axis=1).reset_index()
        return wide_df

    def ranking(self, env: str, split: str, metric: str | None = None) -> Any:
        """Results of one (env, split) ranked by ``metric`` (default: the env's primary metric), best first.

        Columns: rank, agent, algorithm, value, ci_low, ci_high, n, seed_mean, seed_std, n_seeds, ... Ties
        share a rank (competition ranking: 1, 1, 3). Lower-is-better metrics (``turns``) rank ascending.
        """
        metric = metric or primary_metric(env)
        df = self.dataframe(env, split, wide=False)
        if df.empty:
            return df.assign(rank=[])
        df = df[df["metric"] == metric].copy()
        if df.empty:
            return df.assign(rank=[])
        asc = not higher_is_better(metric, env)
        df = df.sort_values(["value", "ci_low", "id"], ascending=[asc, asc, True], kind="mergesort")
        df["rank"] = df["value"].rank(method="min", ascending=asc).astype(int)
        cols = ["rank", "agent", "algorithm", "value", "ci_low", "ci_high", "n", "seed_mean", "seed_std", "n_seeds",
                "seeds", "n_tasks", "agent_kind", "env", "env_version", "split", "metric", "created", "id", "record_id"]
        return df[cols].reset_index(drop=True)


def _sqlite_on_connect(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA busy_timeout = 60000")
    try:
        cur.execute("PRAGMA journal_mode = WAL")
    except Exception:  # another connection switching modes at the same instant: WAL is sticky anyway
        pass
    cur.execute("PRAGMA foreign_keys = ON")
    cur.close()


def _result_row(record: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "record_id": record["record_id"],
        "schema": record["schema"],
        "env_id": record["env"]["id"],
        "env_version": record["env"]["version"],
        "data_hash": record["env"]["data_hash"],
        "split": record["split"],
        "agent_label": record["agent"]["label"],
        "agent_kind": record["agent"]["kind"],
        "agent_hash": record["agent"]["content_hash"],
        "algorithm": record["agent"].get("algorithm"),
        "n_tasks": int(record["n_tasks"]),
        "n_episodes": int(record["n_episodes"]),
        "seeds": json.dumps(list(record["seeds"])),
        "created": record["created"],
        "submitted": utc_now(),
        "stratagym_version": record["stratagym_version"],
        "record": json.dumps(record, sort_keys=True, allow_nan=False),
    }


def _metric_rows(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    spread = record.get("across_seeds") or {}
    rows = []
    for name, m in sorted(record["metrics"].items()):
        s = spread.get(name) or {}
        rows.append(
            {
                "name": name,
                "value": float(m["value"]),
                "n": int(m["n"]),
                "ci_low": float(m["ci_low"]),
                "ci_high": float(m["ci_high"]),
                "seed_mean": _num(s.get("mean")),
                "seed_std": _num(s.get("std")),
                "n_seeds": s.get("n_seeds"),
            }
        )
    return rows


def _num(x: Any) -> float | None:
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if f == f and f not in (float("inf"), float("-inf")) else None
