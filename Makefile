# The two set-up commands:  make emulate  (an emulated cluster to submit to)  and  make test.
# The venv's interpreter: the distribution's /usr/bin/python3 where it is 3.11 or newer and can make a
# venv, else python3 on PATH. Debian's is built with PGO and LTO and linked statically: a command starts
# about 3 ms (15 %) sooner under it than under pyenv's default build (--enable-shared, no PGO), and the
# daemons run faster too (docs/status.md).
PYTHON ?= $(shell /usr/bin/python3 -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))' \
                  2>/dev/null && echo /usr/bin/python3 || echo python3)
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: emulate test test-fast docs lint bench clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	@# setuptools is only a build backend (pip fetches it into each build's own environment); left in
	@# the venv, its distutils-precedence.pth costs every Python start about 1 ms
	$(BIN)/pip uninstall -q -y setuptools
	@# the Slurm commands start without the site module, the path it would make written in (about 2 ms
	@# of a command's 16, wattsched/cli/startscripts.py)
	$(BIN)/python -m wattsched.cli.startscripts
	touch $@

emulate: $(BIN)/.installed
	$(BIN)/wattsched emulate etc/emulated.conf

# the suite in parallel workers, a test module each (its cluster fixture stays in one worker; the
# harness gives each worker ports, cgroups and accounts of its own), then alone the few tests that
# measure what the machine gives a job (the serial mark): 3 workers take a 2-core VM's suite from
# about 25 minutes to under 11. TEST_WORKERS=0 runs everything in one process.
TEST_WORKERS ?= 3
test: $(BIN)/.installed docs
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache --no-logo
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not serial"
	$(BIN)/python -m pytest -q -m serial

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
