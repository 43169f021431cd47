"""Fixtures shared with the leaderboard tests: a real PostgreSQL server (skipped with the reason when it
cannot start) and hand-made result records."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "leaderboard"))

from tests.leaderboard.conftest import postgres_server, postgres_url  # noqa: E402,F401
