"""The leaderboard: a validated result store (SQLite or PostgreSQL via SQLAlchemy), rankings with CIs,
and the rendered board (``leaderboard/LEADERBOARD.md``, a static HTML page with sortable tables, plots).

    >>> from stratagym.leaderboard import Leaderboard
    >>> lb = Leaderboard()                      # leaderboard/board.db
    >>> lb.submit(record); lb.ranking(env, split); lb.dataframe()

Submodules: :mod:`.store` (Leaderboard), :mod:`.validate` (submission checks), :mod:`.render`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Leaderboard", "SubmissionError", "render_board"]


def __getattr__(name: str) -> Any:  # lazy: keep `import stratagym.leaderboard` free of SQLAlchemy
    if name in ("Leaderboard", "SubmissionError"):
        from stratagym.leaderboard import store  # lazy: the store loads SQLAlchemy and pydantic

        return getattr(store, name)
    if name == "render_board":
        from stratagym.leaderboard.render import render_board  # lazy: the renderer's imports cost ~15 ms

        return render_board
    raise AttributeError(name)
