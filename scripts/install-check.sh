#!/bin/bash
# `make install` into a temporary DESTDIR, then the installed files used as a C programmer
# would use them, with nothing from the source tree: the pkg-config file (version, flags),
# a tiny program calling tessera_version() linked once against libtessera.so and once
# against libtessera.a, the C API's namespace test (readdir, rename, chmod, chown, ...)
# against a real cluster started by the installed tessera, and each MPI-IO library's
# exports. Part of `make test`; after `make mpi-test` the install's build steps are no-ops.
# (No `grep -q` after a pipe: it can end the pipe early, and pipefail would count that.)
#
# Environment: PREFIX (default /usr/local), KEEP=1 keeps the staging directory.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PREFIX=${PREFIX:-/usr/local}
STAGE=$(mktemp -d /tmp/tessera-install-check.XXXXXX)
INSTALLED=$STAGE$PREFIX
CLUSTER=$STAGE/cluster
TESTS=$ROOT/crates/tessera-capi/tests/c

cleanup() {
    if [ -x "$INSTALLED/bin/tessera" ] && [ -d "$CLUSTER" ]; then
        "$INSTALLED/bin/tessera" down --dir "$CLUSTER" >/dev/null 2>&1 || true
    fi
    if [ "${KEEP:-0}" = 1 ]; then echo "staging directory kept: $STAGE"; else rm -rf "$STAGE"; fi
}
trap cleanup EXIT

fail() {
    echo "FAIL install-check: $*" >&2
    exit 1
}

make -C "$ROOT" --no-print-directory install DESTDIR="$STAGE" PREFIX="$PREFIX" >"$STAGE/install.log" 2>&1 ||
    { tail -n 30 "$STAGE/install.log"; fail "make install DESTDIR=$STAGE PREFIX=$PREFIX"; }

for file in bin/tessera bin/tessera-bench lib/libtessera.so lib/libtessera.a include/tessera.h lib/pkgconfig/tessera.pc; do
    [ -f "$INSTALLED/$file" ] || fail "$PREFIX/$file is not installed"
done
mpiio_built=$(cd "$ROOT" && ls target/mpiio/*/libtessera_mpiio.so 2>/dev/null || true)
for lib in $mpiio_built; do
    mpi=$(basename "$(dirname "$lib")")
    installed=$INSTALLED/lib/tessera/$mpi/libtessera_mpiio.so
    [ -f "$installed" ] || fail "$PREFIX/lib/tessera/$mpi/libtessera_mpiio.so is not installed"
    nm -D --defined-only "$installed" | grep -w MPI_File_open >/dev/null ||
        fail "$PREFIX/lib/tessera/$mpi/libtessera_mpiio.so does not export MPI_File_open"
    nm -D --defined-only "$installed" | grep -w stat >/dev/null &&
        fail "$PREFIX/lib/tessera/$mpi/libtessera_mpiio.so exports stat (the POSIX calls are libtessera_posix.so's)"
    echo "ok installed lib/tessera/$mpi/libtessera_mpiio.so"
done
if [ -f "$ROOT/target/mpiio/libtessera_posix.so" ]; then
    installed=$INSTALLED/lib/tessera/libtessera_posix.so
    [ -f "$installed" ] || fail "$PREFIX/lib/tessera/libtessera_posix.so is not installed"
    nm -D --defined-only "$installed" | grep -w stat >/dev/null ||
        fail "$PREFIX/lib/tessera/libtessera_posix.so does not export stat"
    nm -D --defined-only "$installed" | grep -w MPI_File_open >/dev/null &&
        fail "$PREFIX/lib/tessera/libtessera_posix.so exports MPI_File_open"
    echo "ok installed lib/tessera/libtessera_posix.so"
fi
"$INSTALLED/bin/tessera" bench --help 2>&1 | grep -q listio ||
    fail "the installed tessera bench does not reach the installed tessera-bench"
echo "ok installed bin/tessera, bin/tessera-bench (tessera bench reaches it), lib/libtessera.{so,a}, include/tessera.h, lib/pkgconfig/tessera.pc"

# pkg-config from the staged prefix only: the sysroot puts $STAGE before its paths.
export PKG_CONFIG_PATH=""
export PKG_CONFIG_LIBDIR=$INSTALLED/lib/pkgconfig
export PKG_CONFIG_SYSROOT_DIR=$STAGE
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' "$ROOT/Cargo.toml")
[ "$(pkg-config --modversion tessera)" = "$version" ] ||
    fail "tessera.pc says version $(pkg-config --modversion tessera), Cargo.toml $version"
cflags=$(pkg-config --cflags tessera)
libs=$(pkg-config --libs tessera)
echo "ok pkg-config: tessera $version: $cflags $libs"

cd "$STAGE"
# Shared: found through the staged lib directory at run time.
# shellcheck disable=SC2086 # the flags are words
cc -std=c99 -Wall -Wextra -Werror -o version-shared "$TESTS/version.c" $cflags $libs ||
    fail "version.c does not build against libtessera.so"
LD_LIBRARY_PATH=$INSTALLED/lib ldd ./version-shared | grep "$INSTALLED/lib/libtessera.so" >/dev/null ||
    fail "version-shared does not load the installed libtessera.so"
LD_LIBRARY_PATH=$INSTALLED/lib ./version-shared || fail "version-shared"
# Static: the archive and what pkg-config says it needs (Libs.private), no libtessera.so.
# shellcheck disable=SC2086
cc -std=c99 -Wall -Wextra -Werror -o version-static "$TESTS/version.c" $cflags \
    "$INSTALLED/lib/libtessera.a" $(pkg-config --static --libs-only-l tessera | sed 's/-ltessera\b//') ||
    fail "version.c does not build against libtessera.a"
if ldd ./version-static | grep libtessera >/dev/null; then fail "version-static loads libtessera.so"; fi
./version-static || fail "version-static"

# The namespace test against a real cluster of the installed tessera.
# shellcheck disable=SC2086
cc -std=c99 -Wall -Wextra -Werror -o namespace "$TESTS/namespace.c" $cflags $libs ||
    fail "namespace.c does not build"
"$INSTALLED/bin/tessera" up --servers 2 --dir "$CLUSTER" >"$STAGE/up.log" 2>&1 ||
    { cat "$STAGE/up.log"; fail "the installed tessera cannot start a cluster"; }
LD_LIBRARY_PATH=$INSTALLED/lib ./namespace "$CLUSTER/cluster.toml" || fail "namespace.c against the cluster"
echo "PASS install-check"
