# The two set-up commands:  make emulate  (an emulated cluster to submit to)  and  make test.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: emulate test test-fast docs lint bench clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

emulate: $(BIN)/.installed
	$(BIN)/wattsched emulate etc/emulated.conf

test: $(BIN)/.installed docs
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache --no-logo
	$(BIN)/mypy
	$(BIN)/python -m pytest -q

# the pure core and the unit tests alone: no daemon is started (the e2e mark, tests/conftest.py)
test-fast: $(BIN)/.installed docs
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache --no-logo
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -m "not e2e"

# the documentation site, strictly (a broken link or anchor fails it) into build/site/
docs: $(BIN)/.installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

bench: $(BIN)/.installed
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) wattsched-state build *.egg-info
