# rogerwilco gatekeeper: the developer and CI entry points. Every target sets up what it needs on a fresh
# machine: the venv (reinstalled when pyproject.toml changes) and the local Kafka + Redis (deploy/local/stack.sh).
#
#   make run        start the services, then the demo: the real gatekeeper, agents, verdicts, a replay
#   make test       ruff check, ruff format --check, cargo fmt --check, cargo clippy, mypy, the operator kit's
#                   tools, the browser, cargo test (native/), then pytest against the real services (the chart,
#                   image, rules and dashboard checks, the documentation site and the console in a headless
#                   browser included)
#   make tools      build helm, promtool, prometheus and the manifest validator from pinned Go modules, once per
#                   version (deploy/tools/install.sh: a progress line per build, no Go cache left behind)
#   make browser    Debian's chromium and chromium-driver, for the console's browser tests (deploy/local/browser.sh)
#   make test-faults  the fault suite (bench/faults.py) on a stack of its own; FAULTS_ARGS=--smoke: about 5 min
#   make test-redis-cluster  the integration suite against a three-master Redis Cluster
#   make venv       create .venv and install the project with its dev extra
#   make services   start Kafka and Redis (their addresses in .local/stack/stack.env)
#   make status     what runs; when the services are not running it says so and how to start them, and exits 0
#                   (a script that needs the answer as a status: deploy/local/stack.sh status, exit 3 then)
#   make stop       stop the services and delete their data
#   make lint       ruff, cargo fmt and clippy (native/);        make typecheck   mypy
#   make docs       the documentation site (mkdocs.yml, docs/) into site/, strictly: a broken link fails
#
# Variables: PYTHON (the interpreter that creates the venv), PYTEST_ARGS (e.g. PYTEST_ARGS='-k smoke -x'),
# GK_STATE_DIR / GK_CACHE_DIR (see deploy/local/stack.sh and deploy/tools/install.sh).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
STACK := deploy/local/stack.sh
STATE_DIR := $(or $(GK_STATE_DIR),$(CURDIR)/.local/stack)
# Exports the running stack's env (GK_KAFKA__BOOTSTRAP_SERVERS / GK_REDIS__URL, and the tests' GK_KAFKA_BOOTSTRAP /
# GK_REDIS_URL) to the command that follows.
WITH_STACK_ENV := set -a; . "$(STATE_DIR)/stack.env"; set +a;
PYTEST_ARGS ?=

.PHONY: help venv services status stop lint typecheck docs tools browser test test-faults test-redis-cluster run

help:
	@sed -n '4,/^$$/s/^# \{0,1\}//p' Makefile

$(BIN)/python:
	@if ! $(PYTHON) -m venv $(VENV); then \
	    rm -rf $(VENV); \
	    if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	        echo "make: installing python3-venv with apt-get" >&2; \
	        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >&2; \
	        $(PYTHON) -m venv $(VENV); \
	    else \
	        echo "make: '$(PYTHON) -m venv' failed; install python3-venv" >&2; exit 1; \
	    fi; \
	fi

# The native extension (native/, Rust) is built by pip through maturin: its sources are the stamp's too.
NATIVE_SOURCES := $(shell find native -name target -prune -o \( -name '*.rs' -o -name 'Cargo.*' \) -print 2>/dev/null)
CARGO := cargo --quiet
CARGO_NATIVE := --manifest-path native/Cargo.toml

$(STAMP): pyproject.toml $(NATIVE_SOURCES) | $(BIN)/python
	@command -v cargo >/dev/null || { echo "make: cargo is missing: the native extension (native/) is Rust 1.85+;" \
	    "install it (rustup, or Debian: apt-get install cargo when its version is 1.85 or later)" >&2; exit 1; }
	$(BIN)/python -m pip install -q -e '.[dev]'
	@touch $@

venv: $(STAMP)

services:
	@$(STACK) start

# stack.sh status exits 3 when a service is not running: said plainly here, not as make's "Error 3".
status:
	@rc=0; $(STACK) status || rc=$$?; \
	if [ "$$rc" = 3 ]; then \
	    echo "the local stack is not running: 'make services' starts it, then its addresses:" \
	        "set -a; . $(STATE_DIR)/stack.env; set +a"; \
	elif [ "$$rc" != 0 ]; then \
	    exit "$$rc"; \
	fi

stop:
	@$(STACK) stop

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(CARGO) fmt $(CARGO_NATIVE) --all --check
	$(CARGO) clippy $(CARGO_NATIVE) --workspace --all-targets -- -D warnings

typecheck: venv
	$(BIN)/mypy rwcore gatekeeper

# The reference pages are completed from the code as the site builds (tools/docs_hooks.py).
docs: venv
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

tools:
	@deploy/tools/install.sh

# Debian's chromium and chromium-driver for the console's browser tests (installed with apt-get when root).
browser:
	@deploy/local/browser.sh >/dev/null

# pytest exits 5 when it collects no test: that fails the target too, on purpose.
test: venv lint typecheck tools browser services
	$(CARGO) test $(CARGO_NATIVE) --workspace
	@$(WITH_STACK_ENV) $(BIN)/pytest $(PYTEST_ARGS)

# The newcomer's path: `gatekeeper demo` (gatekeeper/demo.py, config/samples/) on the local services.
run: venv services
	@$(WITH_STACK_ENV) $(BIN)/gatekeeper demo

# The fault suite (bench/faults.py: SIGKILLs in both delivery modes, Redis paused and restarted, a rebalance) on a
# stack of its own (FAULTS_STATE_DIR), stopped afterwards whatever the result. FAULTS_ARGS: e.g. --smoke (every
# scenario at small sizes) or '--kills 5 --lines 20000'; docs/fault-suite.md says how long each takes.
FAULTS_STATE_DIR ?= $(CURDIR)/.local/faults
FAULTS_ARGS ?=

# The integration suite against a local Redis Cluster (deploy/local/redis_cluster.sh, three masters), Kafka from
# the stack; the cluster is stopped afterwards.
REDIS_CLUSTER_TESTS := tests/integration
test-redis-cluster: venv services
	@eval "$$(deploy/local/redis_cluster.sh start)"; export GK_TEST_REDIS_CLUSTER_URL; \
	$(WITH_STACK_ENV) rc=0; $(BIN)/pytest -q $(REDIS_CLUSTER_TESTS) || rc=$$?; \
	deploy/local/redis_cluster.sh stop; exit $$rc

test-faults: venv
	@export GK_STATE_DIR="$(FAULTS_STATE_DIR)"; $(STACK) start >/dev/null; \
	set -a; . "$(FAULTS_STATE_DIR)/stack.env"; set +a; \
	rc=0; $(BIN)/python bench/faults.py $(FAULTS_ARGS) || rc=$$?; \
	$(STACK) stop; exit $$rc
