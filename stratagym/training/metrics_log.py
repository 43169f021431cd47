"""The trainer's metrics log: ``metrics.jsonl`` (+ TensorBoard, + W&B when installed and enabled).

One row per logged step, written on the main process only. A resumed run first drops the rows of steps
after its checkpoint (:meth:`MetricsLog.truncate_after`): those steps are redone, so the log of a resumed
run equals an uninterrupted one's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stratagym.atomic import atomic_write
from stratagym.jsonl import read_jsonl

__all__ = ["MetricsLog"]


class MetricsLog:
    """metrics.jsonl (+ TensorBoard, + W&B when installed and enabled), on the main process only."""

    def __init__(self, output_dir: Path, *, enabled: bool, tensorboard: bool, wandb: bool, project: str,
                 run_name: str, config: dict[str, Any]):
        self.path = output_dir / "metrics.jsonl"
        self.enabled = enabled
        self.tb = None
        self.wandb = None
        if not enabled:
            return
        output_dir.mkdir(parents=True, exist_ok=True)
        if tensorboard:
            try:  # optional dependency: tensorboard
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(log_dir=str(output_dir / "tensorboard"))
            except Exception:  # tensorboard not installed: JSONL still works
                self.tb = None
        if wandb:
            try:  # optional dependency: wandb
                import wandb as wb

                self.wandb = wb.init(project=project, name=run_name, config=config, resume="allow")
            except Exception:
                self.wandb = None

    def truncate_after(self, step: int) -> None:
        """Drop rows of steps after ``step`` (they were lost with the process and will be redone)."""
        if not self.enabled or not self.path.exists():
            return
        # a row torn by a kill mid-write is skipped: it belongs to a step that is redone
        keep = [line.text for line in read_jsonl(self.path, skip_bad=True) if line.value.get("step", 0) <= step]
        atomic_write(self.path, "".join(k + "\n" for k in keep))

    def log(self, row: dict[str, Any]) -> None:
        if not self.enabled:
            return
        with open(self.path, "a") as fh:
            fh.write(json.dumps(row, sort_keys=True) + "\n")
            fh.flush()
        step = int(row.get("step", 0))
        if self.tb is not None:
            for k, v in row.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "step":
                    self.tb.add_scalar(k, v, step)
            self.tb.flush()
        if self.wandb is not None:
            self.wandb.log({k: v for k, v in row.items() if k != "step"}, step=step)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()
