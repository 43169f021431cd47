"""Every script in benchmarks/ runs at its smallest settings: `make bench` cannot break unnoticed.

No test ran the benchmark scripts, so an API change (``act(observations, infos, episodes)``) broke
``benchmarks/webshop.py`` and ``make bench`` silently (issue 29). Here each script runs as a subprocess,
as ``make bench`` runs it, with options that make it take seconds; the test checks its exit status and
one line of its output that shows it did its work (a known answer where the script has one, such as
the oracle's score of 1), never a timing. A new script in benchmarks/ fails
:func:`test_benchmark_script_runs` until it gets an entry in :data:`SMOKE`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"

# script -> (arguments for its smallest run, a regular expression its output must match). "{tmp}" is
# replaced by a fresh folder of the test.
SMOKE: dict[str, tuple[list[str], str]] = {
    # sync vs async rollouts on Ray: three trainers, one step each after the warm-up, on the committed
    # SFT model's recipe (the policy and env read from it)
    "async_rollouts.py": (["--steps", "1", "--repeats", "1", "--tasks", "1", "--group", "2", "--max-new", "4",
                           "--recipe", "recipes/cpu/grpo-tiny-searchqa.yaml"],
                          r"steps/hour ratio to sync: async-1 \d+\.\d\d, async-2 \d+\.\d\d"),
    "advantages.py": (["--sizes", "200", "--ref-max", "200", "--repeat", "1"], r"(?m)^hgpo\(K=4\)\s+200\s"),
    "alfworld.py": (["--steps", "5", "--games", "1", "--repeats", "1", "--env-steps", "10"],
                    r"transcripts identical \(stock = cold = on disk = warm.*\): True"),
    "alfworld_translate.py": (["--games", "1", "--repeats", "1"], r"SAS texts identical: True"),
    # SIGKILL after the first of three shards, then resume: the resumed build re-encodes exactly the shards
    # that were not complete at the kill (a race may let a second one finish first, hence the back-reference)
    "dense_index.py": (["--passages", "600", "--shard-size", "200", "--kill-after", "1", "--kinds", "",
                        "--queries", "10", "--workdir", "{tmp}"],
                       r"re-encoded (\d)/3 shards \(reused \d; expected \1\)"),
    # the RL study (hours at its defaults): SFT eval, one worker run of 1 step, the report
    # the gateway vs the backend in-process on the tiny model: the same sampled ids both ways
    "gateway.py": (["--model", "tiny", "--turns", "2", "--repeats", "1", "--max-new", "4"],
                   r"sampled ids identical: True"),
    "llm_learning.py": (["run", "--methods", "grpo", "--seeds", "0", "--steps", "1", "--eval-n", "2", "--jobs", "1",
                         "--out", "{tmp}", "--set", "rollout.group_size=2", "--set", "rollout.tasks_per_step=1",
                         "--set", "rollout.filter_groups=false", "--set", "policy.max_new_tokens=8"],
                        r"finished grpo-s0 \(exit 0\)[\s\S]*\| grpo \| 0 \| 1 \|"),
    "multiturn_reuse.py": (["--smoke", "--steps", "1", "--warmup", "0"],
                           r"rollouts identical in tokens and returns in \d of 1 steps"),
    # the oracle's episodes replayed in-process and through `stratagym serve env` in another process
    "openenv_server.py": (["--smoke"], r"ratio \d+\.\d; transcripts identical: True"),
    # the phases in fp32 and bf16 on the tiny model instead of SmolLM2 (one step each; on a CPU without
    # bf16 instructions STRATAGYM_CPU_BF16=1 below lets the bf16 step run emulated)
    "precision_step.py": (["--recipe", "recipes/cpu/grpo-tiny-searchqa.yaml", "--tasks", "1", "--set",
                           "rollout.group_size=2", "--set", "policy.max_new_tokens=4", "--set", "policy.lora=null"],
                          r"(?m)^step\s+\d+\.\d\d\s+\d+\.\d\d\s+\d+\.\d\dx$"),
    "ray_rollout.py": (["--tasks", "1", "--group", "2", "--steps", "3", "--repeats", "1", "--workers", "1",
                        "--noop-calls", "2"], r"ray/inprocess: "),
    # bm25s and dense (flat) only: the pyserini backend and the server section start a JVM
    "retrieval.py": (["--passages", "2000", "--queries", "50", "--backends", "bm25s,dense", "--faiss", "flat",
                      "--no-minilm", "--episodes", "10"], r"(?m)^  bm25s: 1\.000$"),
    "searchqa_env.py": (["--passages", "2000", "--queries", "50", "--episodes", "10", "--repeats", "1"],
                        r"C/Python env time"),
    "synthetic_envs.py": (["--seconds", "0.1"], r"stratagym/CueCorridor-v0\s+\d+ steps/s"),
    "trainer.py": (["--steps", "1", "--warmup", "0", "--max-new", "4"],
                   r"model .*\(0\.12M parameters, qwen2\)[\s\S]*ratio stratagym / TRL: "),
    # the browser part runs where /usr/bin/chromium exists (make setup installs it) and says so otherwise
    "webshop.py": (["--episodes", "2", "--browser-episodes", "1"],
                   r"text: oracle .*\(mean score 1\.000\)[\s\S]*browser: (\d+ actions|skipped)"),
}


def _scripts() -> list[str]:
    # vllm*.py need vLLM, which lives in the second environment (.venv-vllm): they are smoked by the
    # vLLM tests (marker `vllm`), not here.
    return sorted(p.name for p in BENCHMARKS.glob("*.py") if not p.name.startswith("vllm"))


@pytest.mark.slow
@pytest.mark.parametrize("script", _scripts())
def test_benchmark_script_runs(script: str, tmp_path: Path) -> None:
    if script not in SMOKE:
        pytest.fail(f"benchmarks/{script} has no smoke run: add its smallest settings to SMOKE in {__file__}")
    args, expected = SMOKE[script]
    work = tmp_path / "work"
    work.mkdir()
    args = [a.replace("{tmp}", str(work)) for a in args]
    # TMPDIR: the scripts' own temporary folders (tempfile.mkdtemp) go to a folder removed afterwards; a
    # short path under /tmp, not tmp_path: Ray puts AF_UNIX sockets there (at most 107 bytes of path)
    scratch = tempfile.mkdtemp(prefix="sg-bench-", dir="/tmp" if os.path.isdir("/tmp") else None)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TMPDIR": scratch, "STRATAGYM_CPU_BF16": "1"}
    try:
        proc = subprocess.run([sys.executable, str(BENCHMARKS / script), *args], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=600)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    tail = f"\n--- stdout ---\n{proc.stdout[-3000:]}\n--- stderr ---\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, f"benchmarks/{script} exited {proc.returncode}{tail}"
    assert re.search(expected, proc.stdout), f"benchmarks/{script}: no match for {expected!r}{tail}"


def test_smoke_table_names_only_existing_scripts() -> None:
    """A renamed or removed script leaves no stale entry that would hide a missing one."""
    assert sorted(SMOKE) == _scripts()
