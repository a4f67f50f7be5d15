# One-command set-up: `make demo` and `make test` each create the virtualenv
# (.venv) on first use and reuse it after; re-running is a no-op once installed.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-requirements
PACKAGE := $(VENV)/.installed-package

.PHONY: install shim demo test test-fast clean

$(BIN)/python:
	@command -v $(PYTHON) >/dev/null 2>&1 || { \
	  echo "error: $(PYTHON) not found; tff-hdp needs Python 3.11 (TensorFlow 2.14 / TFF 0.87). Set PYTHON=/path/to/python3.11." >&2; exit 1; }
	@$(PYTHON) -c 'import sys; v = sys.version_info[:2]; sys.exit(0 if v == (3, 11) else "error: tff-hdp needs Python 3.11 (TensorFlow 2.14 / TFF 0.87), but $(PYTHON) is %d.%d." % v)'
	$(PYTHON) -m venv $(VENV)

# The TFF worker's shim library, compiled into the virtualenv (runs need no
# compiler). Built before the packages, so a missing compiler is one line at
# once, not after minutes of downloads; a no-op once built.
shim: $(BIN)/python
	@$(BIN)/python tff_hdp/simulation/worker_shim.py

$(STAMP): requirements.txt | shim
	$(BIN)/python -m pip install -q --disable-pip-version-check --no-deps -r requirements.txt
	TF_CPP_MIN_LOG_LEVEL=3 $(BIN)/python -c 'import tensorflow_federated, tensorflow_privacy, dp_accounting'
	touch $(STAMP)

# The project itself, editable (pyproject.toml): `import tff_hdp` from any
# folder with .venv's Python, the checkout's code as it is.
$(PACKAGE): pyproject.toml $(STAMP)
	$(BIN)/python -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $(PACKAGE)

install: shim $(STAMP) $(PACKAGE)

# A short comparison on the embedded digits task (no download): non-private
# FedAvg, DP-FedAvg and FedHDP at two ratios r; prints the results table.
demo: install
	$(BIN)/python run_experiment.py --task=digits \
	  --algorithms=nonprivate,dp_fedavg,fedhdp --r=0.1,1 \
	  --rounds=40 --clients_per_round=20 \
	  --output_dir=results/demo

# The whole suite, on both cores (pytest-xdist), the 25 slowest tests listed
# at the end so they stay in sight.
test: install
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup --durations=25 tests

# The edit loop's tier: every test that needs no TensorFlow, in no process
# (tests/conftest.py makes TensorFlow unimportable here). Nothing else runs it.
test-fast: install
	TFF_HDP_FAST_TIER=1 $(BIN)/python -m pytest -q -n 2 --dist loadgroup -m "not tf" tests

clean:
	rm -rf $(VENV) results
