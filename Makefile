# casque: the two commands a newcomer needs are `make demo` and `make test`.
# Everything they need is installed by this file: a venv with the locked Python dependencies,
# the Java and Go SDK checks (for the tests), and Apache Cassandra from Maven Central (cached in ~/.cache/casque).

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat requirements.lock pyproject.toml | sha1sum | cut -c1-12)
JS     := tests/js/node_modules/.installed-$(shell sha1sum < tests/js/package-lock.json | cut -c1-12)
PYTEST_ARGS ?=

.PHONY: setup browser faults sdks demo test lint format cassandra stop bench lock clean

setup: $(STAMP)

# The Java and Go SDK checks (tests/java, tests/go; run by tests/test_sqs_sdks.py): Maven jars, Go modules and
# the builds are cached in ~/.cache/casque/sdk-checks, keyed by the sources' hash (a no-op once built). Only `make test`
# needs them (and Go): `make demo` does not. A failed build (`-`) does not stop `make test`: those tests then fail saying why.
sdks: $(STAMP) $(JS)
	-$(BIN)/python -m tests.support.sdkbuild

# The console's browser tests drive Debian's chromium (Playwright downloads no browser here).
browser:
	@[ -x /usr/bin/chromium ] || { if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium; \
	  else echo "casque: the console's browser tests need Chromium (skipped without it): sudo apt-get install -y chromium" >&2; fi; }

# The node-fault tests cut a ring's loopback traffic with iptables (bench/nemesis/faults.py: network partitions).
faults:
	@[ -x /usr/sbin/iptables ] || command -v iptables >/dev/null || { if [ "$$(id -u)" = 0 ]; then apt-get update -qq && \
	  apt-get install -y -qq iptables; else echo "casque: the fault tests need iptables: sudo apt-get install iptables" >&2; fi; }

$(STAMP): requirements.lock pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "casque needs Python 3.11 or newer: install python3.11 and run make PYTHON=python3.11")'
	@command -v mvn >/dev/null || { echo "casque: Maven is needed to fetch Cassandra: apt-get install maven" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check --require-hashes -r requirements.lock
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -e .
	@rm -f $(VENV)/.installed-*; touch $@

# The JS SDK checks' packages (tests/js, run by tests/test_sqs_sdks.py): only `make test` needs them.
$(JS): tests/js/package-lock.json
	@command -v npm >/dev/null || { echo "casque: npm is needed for the JS SDK tests: apt-get install nodejs npm" >&2; exit 1; }
	cd tests/js && npm ci --no-audit --no-fund --silent
	@rm -f tests/js/node_modules/.installed-*; touch $@

# A local node (downloaded on first use), the schema, the daemon with the example handlers, jobs. No browser,
# no SDK checks: those are the tests'.
demo: setup
	$(BIN)/casque demo

# The whole suite against a real Cassandra node (and real 3-node clusters for the cluster tests), a file per core at
# a time (at most 4), each worker with a keyspace of its own (tests/conftest.py).
test: setup sdks browser faults
	$(BIN)/casque cassandra start
	$(BIN)/python -m pytest --numprocesses auto --maxprocesses 4 --dist loadfile $(PYTEST_ARGS)

# The style checks alone (they also run within `make test`, as tests/test_code_style.py): settings in pyproject.toml.
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# Rewrites the tree to the style: ruff's safe fixes (imports sorted, old syntax upgraded), then the formatter (after
# the fixes, so their output is formatted too). What's left needs a hand: `make lint` lists it.
format: setup
	$(BIN)/ruff check --fix --exit-zero .
	$(BIN)/ruff format .

cassandra: setup
	$(BIN)/casque cassandra start

stop: setup
	$(BIN)/casque cassandra stop

bench: setup
	$(BIN)/python -m bench $(BENCH_ARGS)

# Re-pin the dependencies (needs network): writes requirements.lock with hashes.
lock:
	$(BIN)/pip install --quiet uv && $(BIN)/uv pip compile pyproject.toml --extra test --generate-hashes --python-version 3.11 -o requirements.lock

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .ruff_cache .mypy_cache
