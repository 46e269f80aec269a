# The two commands of the quickstart: `make demo` and `make test`.
# Both create the virtual environment if it is missing and install the package with its dev extras.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck scan bench lock clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml constraints.txt
	$(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/tracelock demo

test: $(STAMP)
	$(BIN)/python -m pytest -n 2 -q
	$(BIN)/mypy
	$(BIN)/ruff check tracelock tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

lint: $(STAMP)
	$(BIN)/ruff check tracelock tests bench

bench: $(STAMP)
	$(BIN)/python -m bench

lock: $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'
	( echo '# Exact versions a fresh install resolves to (used as pip constraints by the Makefile).'; \
	  echo '# Regenerate with `make lock` after changing dependency ranges in pyproject.toml.'; \
	  $(BIN)/pip freeze --exclude-editable | grep -v '^#' ) > constraints.txt

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
