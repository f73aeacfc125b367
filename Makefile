# Two promises: `make demo` runs the main job, `make test` runs the tests. Each sets itself up.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo simulate test bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/privbandit demo --threat-model shuffle --users 10000 --json out/demo.json --plot out/demo.png

simulate: $(STAMP)
	$(BIN)/privbandit simulate --algo sblb --env linear --d 5 --K 20 --T 1000000 --runs 3 --seed 1 \
		--eps0 30 --batch-size 1000 --aggregation secure-sum --confidence-scale 0.1 \
		--regularizer clip --json out/simulate.json --plot out/simulate.png

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/pytest -q

bench: $(STAMP)
	$(BIN)/python bench/simulator.py
	$(BIN)/python bench/secure_sum.py
	$(BIN)/python bench/service_ingest.py

clean:
	rm -rf $(VENV) out
