"""The vLLM tests run in .venv-vllm (`make test`: `.venv-vllm/bin/python -m pytest -m vllm`). Where vLLM is
not installed (the main .venv) they are not collected at all, neither run nor reported as skipped; in
.venv-vllm a missing vLLM leaves `pytest -m vllm` with no test, which fails `make test` (exit 5)."""

import importlib.util
import os

import pytest

collect_ignore_glob = ["test_*.py"] if importlib.util.find_spec("vllm") is None else []


@pytest.fixture(autouse=True)
def _environment_restored():
    """Put ``os.environ`` back after each test. Building an in-process vLLM engine writes about twenty
    variables into it (``LOCAL_WORLD_SIZE``, ``VLLM_DIST_IDENT``, ``LD_PRELOAD``, ...), and every later
    test's subprocesses (``stratagym train``, ``accelerate launch``, ``vllm serve``) would inherit them."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)
