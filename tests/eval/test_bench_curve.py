"""The bench's training curve is read from the trainer's metrics.jsonl through the one JSONL reader."""

from __future__ import annotations

import json

from stratagym.bench.runner import _curve


def test_curve_reads_rollout_rows_and_passes_over_a_torn_row(tmp_path):
    rows = [{"step": 1, "rollout/return": 0.25, "rollout/success": 0.5},
            {"step": 1, "eval/success": 1.0},  # not a rollout row: not a point
            {"step": 2, "rollout/return": 0.75}]
    text = "\n".join(json.dumps(r) for r in rows) + "\n\n" + '{"step": 3, "rollout/ret'  # killed mid-write
    (tmp_path / "metrics.jsonl").write_text(text, encoding="utf-8")
    assert _curve(tmp_path) == [{"step": 1, "reward": 0.25, "success": 0.5}, {"step": 2, "reward": 0.75}]


def test_no_metrics_file_is_no_curve(tmp_path):
    assert _curve(tmp_path) == []
