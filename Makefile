# Two entry points (README): `make demo` runs the main job on real text, `make test` runs the tests.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CORPUS ?= $(if $(wildcard ../shared/data/fineweb_edu_sample),../shared/data/fineweb_edu_sample,hf:HuggingFaceFW/fineweb-edu:sample-10BT)
RESULTS ?= results
WORKERS ?= 2
GRID ?= ablations/rd_controls_mini.toml
GRID_NAME = $(basename $(notdir $(GRID)))
THREADS ?= 1
export HARNESS_PROGRESS = lines

.PHONY: venv test test-quick lint demo reports lock clean

# Each step says what it does first (pip -q is silent for minutes otherwise).
$(STAMP): pyproject.toml requirements.lock
	@echo "== make venv: the virtual environment $(VENV) ($(PY) -m venv), then rd-harness and its pinned dependencies"
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@echo "== upgrading pip in $(VENV)"
	$(BIN)/python -m pip install -q --upgrade pip
	@echo "== installing rd-harness[test] with requirements.lock's versions (torch, Lightning, DuckDB, polars, ...): the long step, minutes on a fresh venv"
	$(BIN)/python -m pip install -q -c requirements.lock -e '.[test]'
	touch $(STAMP)
	@echo "== $(VENV) ready: $(BIN)/harness --help; make test; make demo"

venv: $(STAMP)

# The test files in $(TEST_WORKERS) processes (pytest-xdist; a file's tests stay in one process, so each
# file's fixtures start once): 3 on 2 cores, so that one process's waits (a lease running out, SLURM's
# scheduler, a poll) leave no core idle (docs/running.md: 15 min 23 s with 3, 16 min 10 s with 2).
# --no-loadscope-reorder: the files go out in conftest's order (LONGEST_FIRST), not xdist's default of
# most tests first, which sent the longest files (few tests each) out last, to one process alone at the end.
TEST_WORKERS ?= 3
XDIST = -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
test: $(STAMP)
	$(BIN)/python -m pytest -q $(XDIST)

# The developer's inner loop (docs/running.md: its time and what it covers): every test not marked slow.
test-quick: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow" $(XDIST)

# ruff (rules and why in pyproject's [tool.ruff]): the lint, then the formatter as a check; `ruff format .` fixes the latter;
# then the largest files and functions, printed as guidance (scripts/size_report.py; never a failure).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python scripts/size_report.py

# The main job on real text: queue the grid, drain it with $(WORKERS) workers, write the report, print the plan.
demo: $(STAMP)
	@case "$(CORPUS)" in hf:*) $(BIN)/python -m pip install -q -c requirements.lock -e '.[hub]' ;; esac
	@echo "== corpus: $(CORPUS)"
	$(BIN)/harness queue $(GRID) --corpus "$(CORPUS)" --results $(RESULTS)
	@echo "== training with $(WORKERS) workers ($(THREADS) thread(s) each); progress below"
	@start=$$(date +%s); pids=""; \
	for i in $$(seq $(WORKERS)); do $(BIN)/harness work --results $(RESULTS) --threads $(THREADS) & pids="$$pids $$!"; done; \
	status=0; for p in $$pids; do wait $$p || status=1; done; \
	echo "== workers finished in $$(( $$(date +%s) - start )) s"; exit $$status
	$(BIN)/harness status --results $(RESULTS)
	$(BIN)/harness report --grid $(GRID_NAME) --results $(RESULTS)
	@echo "== what it would take to decide: the plan for this grid, its own runs as the pilot"
	$(BIN)/harness plan $(GRID) --pilot $(GRID_NAME) --results $(RESULTS)

# The committed reports (reports/) rewritten by this code from their committed archives (the others are named
# with the reason they cannot be); tests/tooling/test_committed_reports.py fails while one is stale.
reports: $(STAMP)
	$(BIN)/python scripts/regenerate_reports.py

lock: $(STAMP)
	$(BIN)/python -m pip freeze --exclude-editable | sed 's/+cpu$$//' > requirements.lock.new && mv requirements.lock.new requirements.lock

clean:
	rm -rf $(VENV) $(RESULTS)
