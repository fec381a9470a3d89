# Tessera: `make demo` and `make test` work on a fresh Debian machine as root.
SHELL := /bin/bash
CARGO ?= cargo
DEMO_DIR ?= /tmp/tessera-demo
TESSERA := target/release/tessera
# Debian packages the build and tests need (C toolchain for cc-based crates and the fuzzer;
# libfabric and libclang for the `ofi` backend, whose -sys crate runs bindgen at build time).
APT_PACKAGES := build-essential pkg-config libfabric-dev libfabric-bin libclang-dev
# The text of the benches' figures (plotters loads DejaVu Sans at run time).
APT_PACKAGES += fonts-dejavu-core
# The MPI-IO shim and its tests: both MPIs, their parallel HDF5 builds, PnetCDF (built by
# Debian against Open MPI) and its tools; gfortran for the Fortran MPI-IO test (mpif90.mpich,
# mpif90.openmpi; the MPIs' Fortran bindings and modules come with libmpich-dev and
# libopenmpi-dev); cbindgen for the C API's header.
# `tessera mount` (the fuser crate over libfuse3) and its tests: coreutils, NumPy and h5py in
# Debian's /usr/bin/python3 on the mount.
APT_PACKAGES += libfuse3-dev fuse3 python3-numpy python3-h5py
APT_PACKAGES += mpich libmpich-dev openmpi-bin libopenmpi-dev libhdf5-mpich-dev \
	libhdf5-openmpi-dev libpnetcdf-dev pnetcdf-bin gfortran cbindgen
# The Python package (crates/tessera-py): Debian's Python 3 with its headers and libpython
# (PyO3 links the crate's tests against it), NumPy, pytest, mpi4py (Open MPI), and venv for
# the maturin build environment.
APT_PACKAGES += python3-dev python3-numpy python3-pytest python3-mpi4py python3-venv

.PHONY: all deps build demo test check fmt clippy tidy unit ofi fuzz-smoke fuzz bench clean mpiio mpi-test \
	capi-header capi-header-check install uninstall install-check python python-test

all: build

# The oldest Rust that builds the workspace: Cargo.toml's rust-version, which every crate
# inherits and clippy's incompatible_msrv checks.
RUST_MIN := $(shell sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)

# Installs what is missing, and nothing when all is present.
deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi
	@command -v $(CARGO) >/dev/null || { echo "cargo not found: install Rust (stable >= $(RUST_MIN), the workspace's rust-version)"; exit 1; }
	@have=$$(rustc --version | cut -d' ' -f2); \
	if [ "$$(printf '%s\n%s\n' "$(RUST_MIN)" "$$have" | sort -V | head -n1)" != "$(RUST_MIN)" ]; then \
	  echo "rustc $$have is older than $(RUST_MIN), the workspace's rust-version"; exit 1; \
	fi

# Two cargo runs: tessera-bench turns on tessera-iod's `bench` feature (the capability switch of
# its in-process iods), and cargo would unify it into the `tessera` binary built in the same run.
build: deps
	$(CARGO) build --release --workspace --bins --exclude tessera-bench
	$(CARGO) build --release -p tessera-bench

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

# The workspace's shape (docs/ARCHITECTURE.md §6): crate order against §1's table, no module
# or C-file circle, no #[path] out of a crate, function and file budgets with the allow-list
# tools/tidy/allow.toml. Its own tests first: each rule is shown to catch a breach.
TIDY_MANIFEST := tools/tidy/Cargo.toml
tidy:
	$(CARGO) fmt --manifest-path $(TIDY_MANIFEST) -- --check
	$(CARGO) clippy --manifest-path $(TIDY_MANIFEST) --release --all-targets -- -D warnings
	$(CARGO) test --manifest-path $(TIDY_MANIFEST) --release
	$(CARGO) run --manifest-path $(TIDY_MANIFEST) --release --quiet -- .

# tessera-reg's tests punch holes in mappings and check them: another test thread's mmap
# (a large allocation) can land in a hole, so that crate's tests run one at a time.
# tessera-bench runs on its own, so that the iod and the `tessera` binary the other tests use
# are built without its `bench` feature, as the product is (tessera-iod's tests/public_api.rs);
# its binary is built first, as `tessera demo` and `tessera bench` in tessera-cli's tests run it.
unit:
	$(CARGO) build -p tessera-bench
	$(CARGO) test --workspace --exclude tessera-reg --exclude tessera-bench
	$(CARGO) test -p tessera-bench
	$(CARGO) test -p tessera-reg -- --test-threads=1

# The libfabric backend, built only with its `ofi` feature (the workspace builds without
# libfabric): lints, then list round trips over the tcp;ofi_rxm and shm providers, first
# between two endpoints, then as File::write_list/read_list against a real cluster.
ofi:
	$(CARGO) clippy -p tessera-ofi-sys -p tessera-ofi --features tessera-ofi/ofi --all-targets -- -D warnings
	$(CARGO) test -p tessera-ofi --features tessera-ofi/ofi
	$(CARGO) clippy -p tessera-net -p tessera-iod -p tessera-client -p tessera-cli --features tessera-cli/ofi --all-targets -- -D warnings
	$(CARGO) test -p tessera-cli --features ofi --test ofi

# The MPI-IO shim: target/mpiio/<mpi>/libtessera_mpiio.so for MPICH and Open MPI, each over
# the C API's static library, and target/mpiio/libtessera_posix.so, the POSIX calls on
# Tessera names (mpiio/Makefile).
mpiio: deps
	$(CARGO) build --release -p tessera-capi
	$(MAKE) -C mpiio

# MPI-IO tests, 4 processes under MPICH and under Open MPI, against a real 4-server cluster
# that the script starts and stops; then unmodified HDF5 and PnetCDF programs.
mpi-test: build mpiio
	bash mpiio/tests/run.sh

# The C API's header is generated by cbindgen and checked in; the check fails on drift.
# header.sed turns the Rust doc syntax cbindgen copies (intra-doc links, "# Safety"
# headings, code fences) into plain C documentation.
CBINDGEN := set -o pipefail; cd crates/tessera-capi && cbindgen --quiet --config cbindgen.toml \
	--crate tessera-capi | sed -E -f header.sed
capi-header:
	@tmp=$$(mktemp); \
	if ($(CBINDGEN)) >$$tmp; then cat $$tmp >crates/tessera-capi/include/tessera.h; rm -f $$tmp; \
	else rm -f $$tmp; exit 1; fi

capi-header-check:
	@tmp=$$(mktemp); \
	if ($(CBINDGEN)) >$$tmp && diff -u crates/tessera-capi/include/tessera.h $$tmp; then \
	  rm -f $$tmp; echo "tessera.h is up to date"; \
	else rm -f $$tmp; echo "crates/tessera-capi/include/tessera.h is stale: run make capi-header"; exit 1; fi

# `make install PREFIX=/opt/tessera` (default /usr/local; DESTDIR stages it elsewhere, as
# packagers do): bin/tessera and bin/tessera-bench (`tessera bench` runs it), the C API as
# lib/libtessera.so and lib/libtessera.a with include/tessera.h and lib/pkgconfig/tessera.pc,
# the MPI-IO library of each MPI built (make mpiio) as lib/tessera/<mpi>/libtessera_mpiio.so,
# and beside them the POSIX calls on Tessera names as lib/tessera/libtessera_posix.so.
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
RELEASE_DIR := target/release
VERSION := $(shell sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
# What a program linking libtessera.a needs besides it: rustc's native-static-libs for the
# capi crate (`cargo rustc --release -p tessera-capi --crate-type staticlib -- --print
# native-static-libs`).
LIBS_PRIVATE := -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
MPIIO_LIBS = $(wildcard target/mpiio/*/libtessera_mpiio.so)
POSIX_LIB = $(wildcard target/mpiio/libtessera_posix.so)

install: build mpiio
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCLUDEDIR)
	install -m 0755 $(TESSERA) $(DESTDIR)$(BINDIR)/tessera
	install -m 0755 $(RELEASE_DIR)/tessera-bench $(DESTDIR)$(BINDIR)/tessera-bench
	install -m 0755 $(RELEASE_DIR)/libtessera_capi.so $(DESTDIR)$(LIBDIR)/libtessera.so
	install -m 0644 $(RELEASE_DIR)/libtessera_capi.a $(DESTDIR)$(LIBDIR)/libtessera.a
	install -m 0644 crates/tessera-capi/include/tessera.h $(DESTDIR)$(INCLUDEDIR)/tessera.h
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' \
	  -e 's|@VERSION@|$(VERSION)|' -e 's|@LIBS_PRIVATE@|$(LIBS_PRIVATE)|' \
	  crates/tessera-capi/tessera.pc.in >$(DESTDIR)$(LIBDIR)/pkgconfig/tessera.pc
	chmod 0644 $(DESTDIR)$(LIBDIR)/pkgconfig/tessera.pc
	for lib in $(MPIIO_LIBS); do \
	  mpi=$$(basename $$(dirname $$lib)); \
	  install -d $(DESTDIR)$(LIBDIR)/tessera/$$mpi && \
	  install -m 0755 $$lib $(DESTDIR)$(LIBDIR)/tessera/$$mpi/libtessera_mpiio.so || exit 1; \
	done
	for lib in $(POSIX_LIB); do \
	  install -d $(DESTDIR)$(LIBDIR)/tessera && \
	  install -m 0755 $$lib $(DESTDIR)$(LIBDIR)/tessera/libtessera_posix.so || exit 1; \
	done

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/tessera $(DESTDIR)$(BINDIR)/tessera-bench \
	  $(DESTDIR)$(LIBDIR)/libtessera.so $(DESTDIR)$(LIBDIR)/libtessera.a \
	  $(DESTDIR)$(INCLUDEDIR)/tessera.h $(DESTDIR)$(LIBDIR)/pkgconfig/tessera.pc
	rm -rf $(DESTDIR)$(LIBDIR)/tessera

# Installs into a temporary DESTDIR, then builds C programs with that prefix's pkg-config
# file alone (against libtessera.so and libtessera.a) and runs the C API's namespace test
# against a cluster started by the installed tessera.
install-check:
	bash scripts/install-check.sh

# The Python package: Debian's python3 everywhere (the first python3 on PATH may be another
# one, without NumPy). PyO3's build script asks $(PYTHON) for its version and libpython, also
# under `cargo clippy/test --workspace` (tessera-py is a workspace member).
PYTHON ?= /usr/bin/python3
export PYO3_PYTHON ?= $(PYTHON)
PY_VENV := target/py-venv
MATURIN_VERSION := 1.9.6
PY_WHEEL_DIR := target/wheels

# The wheel, into target/wheels/ (`pip install target/wheels/tessera-*.whl`): maturin comes
# from PyPI in a venv over Debian's python3 (made once; quick when present).
python: deps
	@[ -x $(PY_VENV)/bin/python ] || $(PYTHON) -m venv --system-site-packages $(PY_VENV)
	@$(PY_VENV)/bin/maturin --version 2>/dev/null | grep -qx "maturin $(MATURIN_VERSION)" || \
	  $(PY_VENV)/bin/pip install --quiet "maturin==$(MATURIN_VERSION)"
	$(PY_VENV)/bin/maturin build --release --interpreter $(PYTHON) \
	  --manifest-path crates/tessera-py/Cargo.toml --out $(PY_WHEEL_DIR)

# pytest against a 4-server cluster the tests start and stop, with the wheel installed into
# the venv; the mpi4py tests run two processes under Open MPI's mpirun.
python-test: build python
	$(PY_VENV)/bin/pip install --quiet --force-reinstall --no-deps \
	  $$(ls -t $(PY_WHEEL_DIR)/tessera-*.whl | head -n1)
	TESSERA=$(CURDIR)/$(TESSERA) $(PY_VENV)/bin/python -m pytest -q python/tests

# Deterministic: the saved crash inputs replayed, then a fixed number of inputs from a fixed
# seed over the committed seeds (part of make test).
fuzz-smoke:
	bash scripts/fuzz-smoke.sh

# Exploratory: a random search of FUZZ_SECONDS (default 60) per target, its corpus kept in
# fuzz/corpus/ (not part of make test).
fuzz:
	bash scripts/fuzz-smoke.sh --explore

# What CI runs: formatting, lints, every test tier, and a deterministic fuzz smoke run of every
# decoder.
test: deps fmt clippy tidy unit ofi capi-header-check mpi-test install-check fuzz-smoke python-test

check: test

bench: build
	$(TESSERA) bench listio --quick

clean:
	$(CARGO) clean
