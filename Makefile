# Two promises: `make demo` runs the main job, `make test` runs the tests. Each sets itself up.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/privbandit simulate --algo sblb --env linear --d 5 --K 20 --T 200000 --runs 2 --seed 1 \
		--confidence-scale 0.1 --regularizer clip --eps0 32 --batch-size 1000 \
		--json out/demo.json --plot out/demo.png

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/pytest -q

bench: $(STAMP)
	$(BIN)/python bench/simulator.py

clean:
	rm -rf $(VENV) out
