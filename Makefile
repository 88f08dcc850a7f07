# Two entry points (README): `make demo` runs the main job on real text, `make test` runs the tests.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CORPUS ?= $(if $(wildcard ../shared/data/fineweb_edu_sample),../shared/data/fineweb_edu_sample,hf:HuggingFaceFW/fineweb-edu:sample-10BT)
RESULTS ?= results
WORKERS ?= 2
GRID ?= ablations/rd_controls_small.toml

.PHONY: venv test demo lock clean

$(STAMP): pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c requirements.lock -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q

lock: $(STAMP)
	$(BIN)/python -m pip freeze --exclude-editable | sed 's/+cpu$$//' > requirements.lock.new && mv requirements.lock.new requirements.lock

clean:
	rm -rf $(VENV) $(RESULTS) reports/out
