# Tessera: `make demo` and `make test` work on a fresh Debian machine as root.
SHELL := /bin/bash
CARGO ?= cargo
DEMO_DIR ?= /tmp/tessera-demo
TESSERA := target/release/tessera
# Debian packages the build and tests need (C toolchain for cc-based crates and the fuzzer;
# libfabric and libclang for the `ofi` backend, whose -sys crate runs bindgen at build time).
APT_PACKAGES := build-essential pkg-config libfabric-dev libfabric-bin libclang-dev

.PHONY: all deps build demo test check fmt clippy unit ofi fuzz-smoke bench clean

all: build

# Installs what is missing, and nothing when all is present.
deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi
	@command -v $(CARGO) >/dev/null || { echo "cargo not found: install Rust (rustup, stable >= 1.85)"; exit 1; }

build: deps
	$(CARGO) build --release --workspace --bins

# Start a 4-server cluster, run the main job, stop the cluster (also on failure).
demo: build
	@rm -rf $(DEMO_DIR); \
	$(TESSERA) up --servers 4 --dir $(DEMO_DIR) || exit 1; \
	trap '$(TESSERA) down --dir $(DEMO_DIR)' EXIT; \
	$(TESSERA) demo --cluster $(DEMO_DIR)/cluster.toml

fmt:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

unit:
	$(CARGO) test --workspace

# The libfabric backend, built only with its `ofi` feature (the workspace builds without
# libfabric): lints, then list round trips over the tcp;ofi_rxm and shm providers.
ofi:
	$(CARGO) clippy -p tessera-ofi-sys -p tessera-ofi --features tessera-ofi/ofi --all-targets -- -D warnings
	$(CARGO) test -p tessera-ofi --features tessera-ofi/ofi

fuzz-smoke:
	FUZZ_SECONDS=$${FUZZ_SECONDS:-15} bash scripts/fuzz-smoke.sh

# What CI runs: formatting, lints, every test tier, and a short fuzz run of every decoder.
test: deps fmt clippy unit ofi fuzz-smoke

check: test

bench: build
	$(TESSERA) bench listio --quick

clean:
	$(CARGO) clean
