# switchcraft — the pipeline, one target a stage.
#   make reproduce   install into .venv/ and run the main job end to end
#   make test        install into .venv/ and run every test that can run on a 2-core CPU
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
RUN ?= runs/default
# The headline pool (15 LLMs of 2025 on BFCL v3) and its second benchmark's (SECOND= for none).
POOL ?= configs/pools/bfcl_v3_2025.yaml
SECOND ?= configs/pools/nexusbench_2025.yaml
STAMP := $(VENV)/.installed
# The MCP servers the MCP gateway's tests start over stdio (node/package.json), from npm.
NODE_STAMP := node/node_modules/.installed

.PHONY: install reproduce reproduce-2024 data outputs labels train tools-train test test-fast lint bench bench-tools clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first, pinned: a plain `torch` requirement pulls a multi-GB CUDA build.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[test]'
	# bfcl-eval ships the BFCL v3/v4 questions; its own pins clash with ours, and we only read its data files.
	$(BIN)/pip install --quiet --no-deps bfcl-eval
	# tritonserver 2.51 is bundled in nvidia-pytriton; its numpy<2 pin clashes with ours and we only use the binary.
	$(BIN)/pip install --quiet --no-deps nvidia-pytriton==0.7.0
	# Its Python-backend stub was built against NumPy 1.x: it gets NumPy 1.26 in an environment of its own.
	$(BIN)/pip install --quiet --no-deps --target $(VENV)/triton-stub-env/lib/python3.11/site-packages numpy==1.26.4
	@touch $(STAMP)

$(NODE_STAMP): node/package.json node/package-lock.json
	@command -v npm >/dev/null || { echo "error: npm not found; install Node.js 20+ (npm installs the MCP servers in node/package.json that the MCP gateway tests run)"; exit 1; }
	npm ci --prefix node --no-audit --no-fund --loglevel=error
	@touch $(NODE_STAMP)

install: $(STAMP) $(NODE_STAMP)

reproduce: $(STAMP)
	$(BIN)/switchcraft reproduce --run-dir $(RUN) --pool $(POOL) $(if $(SECOND),--with-pool $(SECOND))

reproduce-2024: $(STAMP)
	$(BIN)/switchcraft reproduce --run-dir runs/bfcl_v1 --pool configs/pool.yaml

data: $(STAMP)
	$(BIN)/switchcraft ingest --all --out $(RUN)/examples.parquet

outputs: $(STAMP)
	$(BIN)/switchcraft import-outputs --out $(RUN)/outputs.parquet

labels: $(STAMP)
	$(BIN)/switchcraft label --pool configs/pool.yaml --run-dir $(RUN)

train: $(STAMP)
	$(BIN)/switchcraft train --config configs/train.yaml run_dir=$(RUN)

bench: $(STAMP)
	$(BIN)/switchcraft bench verify
	$(BIN)/switchcraft bench pool
	$(BIN)/switchcraft bench train
	$(MAKE) bench-tools

# The tool retriever configs/tools.yaml serves (runs/tools_retriever/): fine-tune the encoder on training-only
# pairs (every training row: 48 min on a clean clone of the 2-core machine, 34 of them fine-tuning), then fit the BM25/dense
# fusion on training queries. bench-tools, tools eval
# and a gateway with tool routing need it; without it they say so and how to make it.
tools-train: $(STAMP)
	$(BIN)/switchcraft tools train
	$(BIN)/switchcraft tools fit-fusion

# Tool routing over 5,000 tools: the default (multi-intent), the fastest multi-intent setting whose held-out recall
# holds (mean of asks, docs/tool_routing.md) and the latency profile (one ask, 32 word pieces).
bench-tools: $(STAMP)
	$(BIN)/switchcraft bench tools --out bench.json
	$(BIN)/switchcraft bench tools --set retrieval.whole_vector=mean_of_asks --out bench_moa.json
	$(BIN)/switchcraft bench tools --set retrieval.max_intents=1 --set retrieval.query_token_budget=32 --out bench_fast.json

test: $(STAMP) $(NODE_STAMP)
	$(BIN)/python -m pytest -q

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow and not integration"

lint: $(STAMP)
	$(BIN)/ruff check data training serving evaluation switchcraft tests

clean:
	rm -rf $(VENV) runs .pytest_cache .hypothesis
