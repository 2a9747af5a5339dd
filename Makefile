# Two commands do everything on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
# Extra things `make test` needs (client environments and the like); files in mk/ add to it.
TEST_DEPS :=
-include mk/*.mk

.PHONY: install run test lint bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[embedded,test,dev]"
	touch $@

run: install
	$(VENV)/bin/tasks-backend run

test: install $(TEST_DEPS)
	$(PY) -m pytest $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) .tasks-backend .pytest_cache .mypy_cache .ruff_cache
