# The two commands of the quickstart: `make demo` and `make test`.
# Both create the virtual environment if it is missing and install the package with its dev extras.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck scan bench lock clean postgres-server browser strace

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml constraints.txt
	$(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/tracelock demo

# The storage tests start throwaway PostgreSQL clusters: Debian's server package is installed
# when initdb is found neither by `pg_config --bindir` nor under /usr/lib/postgresql.
postgres-server:
	@if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || [ -x "$$(pg_config --bindir 2>/dev/null)/initdb" ]; then :; else \
	  echo "test: installing PostgreSQL (Debian's postgresql package)"; \
	  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql || exit 1; \
	fi

# The web UI's tests drive Debian's Chromium with Playwright (no browser can be downloaded):
# the package is installed when /usr/bin/chromium is missing.
browser:
	@if [ -x /usr/bin/chromium ]; then :; else \
	  echo "test: installing Chromium (Debian's chromium package)"; \
	  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium || exit 1; \
	fi

# `make bench`'s table counts system calls per run with strace: Debian's package is installed
# when strace is missing (without it, the table counts /proc/self/io's reads and writes only).
strace:
	@if command -v strace >/dev/null 2>&1; then :; else \
	  echo "bench: installing strace (Debian's strace package)"; \
	  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y strace || exit 1; \
	fi

test: $(STAMP) postgres-server browser
	$(BIN)/python -m pytest -n 2 -q
	$(BIN)/mypy
	$(BIN)/ruff check tracelock tests bench
	$(BIN)/tracelock scan tracelock --config tracelock-scan.toml

# The entropy scan of tracelock's own code (also run by `make test`).
scan: $(STAMP)
	$(BIN)/tracelock scan tracelock --config tracelock-scan.toml

typecheck: $(STAMP)
	$(BIN)/mypy

lint: $(STAMP)
	$(BIN)/ruff check tracelock tests bench

# `make bench` (full: 10k runs per system) or `make bench QUICK=1` (~500 runs), then the
# concurrency benchmark (bench.concurrency: 1 to 1,024 runs in flight), then the speed-and-scaling
# table (bench.table: every measure side by side in one run, ranges over passes, on the
# directory store and on a throwaway PostgreSQL server). It uses its own
# environment, .venv-bench (the project with the extras its benchmarks drive: openai for
# bench.capture, postgres for bench.postgres, mcp and langgraph for bench.mcp/bench.adapters; plus the peers
# it is compared with; reinstalled when this Makefile changes), never .venv, and is not part of
# `make test`. Each peer is installed on its own: one that fails to install is
# reported as such by the harness (see .venv-bench/install-<peer>.log), and the rest still run.
BENCH_VENV := .venv-bench
BENCH_BIN := $(BENCH_VENV)/bin
BENCH_STAMP := $(BENCH_VENV)/.installed
BENCH_PEERS := dbos langgraph langgraph-checkpoint-sqlite langgraph-checkpoint-postgres intentusnet
BENCH_PIP := $(BENCH_BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt -c bench/requirements-peers.txt
QUICK ?=
BENCH_FLAGS := $(if $(QUICK),--quick,)

bench: postgres-server strace
	test -x $(BENCH_BIN)/python || $(PYTHON) -m venv $(BENCH_VENV)
	@if [ ! -f $(BENCH_STAMP) ] || [ -n "$$(find Makefile pyproject.toml constraints.txt bench/requirements-peers.txt -newer $(BENCH_STAMP))" ]; then \
	  echo "bench: installing the project and the peers into $(BENCH_VENV)"; \
	  $(BENCH_PIP) -e '.[openai,postgres,mcp,langgraph]' langchain-openai rfc8785 || exit 1; \
	  complete=1; \
	  for extra in matplotlib $(BENCH_PEERS); do \
	    $(BENCH_PIP) $$extra > $(BENCH_VENV)/install-$$extra.log 2>&1 \
	      || { complete=0; echo "bench: $$extra did not install, see $(BENCH_VENV)/install-$$extra.log"; }; \
	  done; \
	  if [ $$complete = 1 ]; then touch $(BENCH_STAMP); fi; \
	fi
	$(BENCH_BIN)/python -m bench $(BENCH_FLAGS)
	$(BENCH_BIN)/python -m bench.peers $(BENCH_FLAGS)
	$(BENCH_BIN)/python -m bench.concurrency $(BENCH_FLAGS)
	$(BENCH_BIN)/python -m bench.table $(BENCH_FLAGS) --write build/bench/table.json

lock: $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'
	( echo '# Exact versions a fresh install resolves to (used as pip constraints by the Makefile).'; \
	  echo '# Regenerate with `make lock` after changing dependency ranges in pyproject.toml.'; \
	  $(BIN)/pip freeze --exclude-editable | grep -v '^#' ) > constraints.txt

clean:
	rm -rf $(VENV) $(BENCH_VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
