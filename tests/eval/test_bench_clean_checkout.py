"""`make demo` (`stratagym bench`) leaves the checkout clean (issue 32 item 5): by default the board, its
store and its records go under the run folder; the committed records are read, never rewritten; only
`--update-committed` writes leaderboard/. `stratagym leaderboard rebuild` regenerates a board from a
records folder alone, byte for byte the same twice."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

from typer.testing import CliRunner

from tests.leaderboard.lb_helpers import make_record

SUITE = textwrap.dedent(
    """
    name: tiny-clean
    seeds: [0]
    batch_size: 4
    evals:
      - {env: stratagym/DifficultyMix-v0, n: 2}
    baselines: [scripted:oracle]
    """
)


def _app():
    from stratagym.cli import _load_plugins, app

    _load_plugins()
    return app


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_bench_by_default_writes_under_the_run_folder_and_reads_the_committed_records(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("STRATAGYM_BOARD", raising=False)
    committed = tmp_path / "leaderboard" / "records"
    committed.mkdir(parents=True)
    (committed / "old.json").write_text(json.dumps(make_record("committed agent", 0.5)))
    before = _snapshot(tmp_path / "leaderboard")
    (tmp_path / "tiny.yaml").write_text(SUITE)
    res = CliRunner().invoke(_app(), ["bench", "-q", "--suite", "tiny.yaml", "--runs-dir", "runs/x"])
    assert res.exit_code == 0, res.output
    assert _snapshot(tmp_path / "leaderboard") == before  # nothing written, nothing rewritten
    md = (tmp_path / "runs" / "x" / "board" / "LEADERBOARD.md").read_text()
    assert "committed agent" in md and "scripted:oracle" in md
    assert (tmp_path / "runs" / "x" / "board.db").is_file() and list((tmp_path / "runs" / "x" / "board" / "records").glob("*.json"))


def test_rebuild_renders_a_records_folder_the_same_bytes_twice(tmp_path):
    records = tmp_path / "records"
    records.mkdir()
    for i, (label, rate, n) in enumerate([("a", 0.5, 10), ("b", 0.5, 10), ("c", 0.9, 10), ("d", 0.3, 6)]):
        (records / f"r{i}.json").write_text(json.dumps(make_record(label, rate, n=n, training={"curve": [[1, 0.1], [2, 0.2]]})))
    outs = []
    for name in ("one", "two"):
        res = CliRunner().invoke(_app(), ["leaderboard", "rebuild", "--records", str(records), "-o", str(tmp_path / name)])
        assert res.exit_code == 0, res.output
        outs.append(_snapshot(tmp_path / name))
    assert outs[0] == outs[1] and any(k.endswith(".png") for k in outs[0])
    md = outs[0]["LEADERBOARD.md"].decode()
    assert "another protocol" in md and "10 tasks" in md  # d (6 tasks) is not ranked with a, b, c
    shutil.rmtree(records)
    records.mkdir()
    res = CliRunner().invoke(_app(), ["leaderboard", "rebuild", "--records", str(records), "-o", str(tmp_path / "three")])
    assert res.exit_code != 0 and "no record files" in str(res.exception or res.output)
