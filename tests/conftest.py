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
