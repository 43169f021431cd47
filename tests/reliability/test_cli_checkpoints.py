"""``stratagym eval <checkpoint>`` accepts every form a user may type (issue 15 item 9): the run folder
(its newest complete checkpoint), ``checkpoints/latest``, ``checkpoints/step-N`` and
``checkpoints/step-N/policy``; and the README's example runs as written.

Why the earlier tests missed it: they evaluated ``.../step-N/policy`` folders produced inside the test
(the only form the parser accepted), and nothing ran the README's command line.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from stratagym.cli import main
from stratagym.eval.records import content_hash_path

REPO = Path(__file__).resolve().parents[2]
ENV = "stratagym/CueCorridor-v0"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A run folder written by the trainer's own checkpoint writer: steps 1 and 2 complete, step 3
    interrupted (no COMPLETE marker), ``latest`` naming step 2."""
    pytest.importorskip("transformers")
    from stratagym.agents.tiny_lm import tiny_lm_path
    from stratagym.training.checkpoint import save_checkpoint
    from stratagym.training.trainer import build_policy

    run = tmp_path_factory.mktemp("runs") / "my-run"
    policy = build_policy({"model": str(tiny_lm_path()), "max_new_tokens": 8})
    for step in (1, 2):
        save_checkpoint(run, step, policy=policy, optimizer=None, scheduler=None, state={})
    half = save_checkpoint(run, 3, policy=policy, optimizer=None, scheduler=None, state={}, keep_last=5)
    (half / "COMPLETE").unlink()
    (run / "checkpoints" / "latest").write_text("step-00000002\n")
    return run


def _eval(capsys, agent: str, out: Path, *extra: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as info:
        main(["eval", agent, "--env", ENV, "-n", "1", "-q", "--out", str(out), *extra])
    cap = capsys.readouterr()
    return int(info.value.code or 0), cap.err + cap.out


@pytest.mark.parametrize("form, step", [
    ("{run}", 2), ("{run}/checkpoints/latest", 2), ("{run}/checkpoints", 2),
    ("{run}/checkpoints/step-00000001", 1), ("{run}/checkpoints/step-00000002/policy", 2),
])
def test_each_checkpoint_form_evaluates_the_right_policy(capsys, tmp_path, run_dir, form, step):
    out = tmp_path / "rec.json"
    code, text = _eval(capsys, form.format(run=run_dir), out)
    assert code == 0, text
    record = json.loads(out.read_text())
    policy = run_dir / "checkpoints" / f"step-{step:08d}" / "policy"
    assert record["agent"]["content_hash"] == content_hash_path(policy)
    assert record["agent"]["label"] == f"my-run@step-{step:08d}"


def test_an_interrupted_checkpoint_is_refused_and_skipped(capsys, tmp_path, run_dir):
    code, text = _eval(capsys, str(run_dir / "checkpoints" / "step-00000003"), tmp_path / "r.json")
    assert code == 2 and "incomplete checkpoint" in text and "Traceback" not in text
    (run_dir / "checkpoints" / "latest").write_text("step-00000003\n")  # a pointer to it is not followed
    try:
        code, text = _eval(capsys, str(run_dir), tmp_path / "r2.json")
        assert code == 0, text
        rec = json.loads((tmp_path / "r2.json").read_text())
        assert rec["agent"]["content_hash"] == content_hash_path(run_dir / "checkpoints" / "step-00000002" / "policy")
    finally:
        (run_dir / "checkpoints" / "latest").write_text("step-00000002\n")


def test_a_folder_that_is_no_checkpoint_names_the_forms(capsys, tmp_path):
    code, text = _eval(capsys, str(tmp_path), tmp_path / "r.json")
    assert code == 2 and "is not a checkpoint" in text and "checkpoints/latest" in text


def test_the_readme_example_runs_as_written(capsys, tmp_path, run_dir, monkeypatch):
    """README: ``stratagym eval runs/my-run --env stratagym/WebShop-v0 --split test --out webshop.json``,
    run from a folder holding ``runs/my-run`` (one task, so it stays quick)."""
    pytest.importorskip("flask")
    line = next(ln for ln in (REPO / "README.md").read_text().splitlines() if ln.startswith("stratagym eval runs/"))
    argv = shlex.split(line, comments=True)[1:]
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "my-run").symlink_to(run_dir, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        main([*argv, "-n", "1", "-q"])
    cap = capsys.readouterr()
    assert info.value.code in (0, None), cap.err
    out = Path(argv[argv.index("--out") + 1])
    rec = json.loads(out.read_text())
    assert rec["env"]["id"] == argv[argv.index("--env") + 1] and re.fullmatch(r"my-run@step-0+2", rec["agent"]["label"])


def test_a_lora_runs_step_folder_evaluates_its_adapter(capsys, tmp_path):
    """A LoRA run saves its policy as an adapter (``adapter_config.json``, no ``config.json``); the
    ``step-N`` form and the run folder resolve to it as they do for a full model. Before, both were
    refused ("has no policy/config.json"), which stopped the first LLM study at its first eval."""
    from stratagym.agents.tiny_lm import tiny_lm_path
    from stratagym.training.checkpoint import save_checkpoint
    from stratagym.training.trainer import build_policy

    run = tmp_path / "lora-run"
    policy = build_policy({"model": str(tiny_lm_path()), "max_new_tokens": 8, "lora": {"r": 4, "alpha": 8}})
    step = save_checkpoint(run, 1, policy=policy, optimizer=None, scheduler=None, state={})
    assert (step / "policy" / "adapter_config.json").is_file() and not (step / "policy" / "config.json").exists()
    for form in (step, run):
        out = tmp_path / f"{form.name}.json"
        code, text = _eval(capsys, str(form), out)
        assert code == 0, text
        assert json.loads(out.read_text())["agent"]["content_hash"] == content_hash_path(step / "policy")
