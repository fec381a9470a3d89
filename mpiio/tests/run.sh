#!/bin/bash
# The MPI-IO tests: every program in this directory under every MPI in $MPIS (default: MPICH
# and Open MPI), 4 processes each (oversubscribed), against a real 4-server Tessera cluster
# that this script starts and stops. The shim is loaded with LD_PRELOAD; the programs are
# plain MPI programs that know Tessera only by the file names they are given. Each program
# checks the data it reads back and aborts the job on the first wrong byte.
#
# Environment: TARGET_DIR (cargo's target dir, default ../../target), OUT (where the shims
# are, default $TARGET_DIR/mpiio), TESSERA (the tessera binary), MPIS, KEEP=1 keeps the work
# directory and logs.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TARGET_DIR=${TARGET_DIR:-$ROOT/target}
OUT=${OUT:-$TARGET_DIR/mpiio}
TESSERA=${TESSERA:-$TARGET_DIR/release/tessera}
MPIS=${MPIS:-mpich openmpi}
TESTS_DIR=$ROOT/mpiio/tests
WORK=$(mktemp -d /tmp/tessera-mpi-test.XXXXXX)
CLUSTER=$WORK/cluster

cleanup() {
    "$TESSERA" down --dir "$CLUSTER" >/dev/null 2>&1
    if [ "${KEEP:-0}" = 1 ]; then echo "work directory kept: $WORK"; else rm -rf "$WORK"; fi
}
if ! "$TESSERA" up --servers 4 --dir "$CLUSTER" >"$WORK/up.log" 2>&1; then
    cat "$WORK/up.log"
    "$TESSERA" down --dir "$CLUSTER" >/dev/null 2>&1
    exit 1
fi
trap cleanup EXIT
export TESSERA_CLUSTER=$CLUSTER/cluster.toml

passed=0
failed=0
failures=""

# run LABEL LOG COMMAND...: one test; its output goes to LOG, and to the terminal on failure.
run() {
    local label=$1 log=$2
    shift 2
    local status=0
    timeout 900 "$@" >"$log" 2>&1 || status=$?
    if [ "$status" -eq 0 ]; then
        passed=$((passed + 1))
        grep '^ok ' "$log" | sed "s|^|  [$label] |"
        echo "PASS $label"
    else
        failed=$((failed + 1))
        failures="$failures $label"
        echo "FAIL $label (exit $status); last lines of $log:"
        tail -n 30 "$log" | sed 's/^/    /'
    fi
}

for mpi in $MPIS; do
    lib=$OUT/$mpi/libtessera_mpiio.so
    if [ ! -f "$lib" ]; then
        echo "FAIL $mpi: $lib is missing (make mpiio)"
        failed=$((failed + 1))
        continue
    fi
    bin=$WORK/bin-$mpi
    oracle=$WORK/oracle-$mpi
    mkdir -p "$bin" "$oracle"
    prefix=tessera:/$mpi
    case $mpi in
    mpich)
        launch=(mpiexec.mpich -n 4 -genv LD_PRELOAD "$lib" -genv TSR_TEST_PREFIX "$prefix"
            -genv TSR_ORACLE_DIR "$oracle" -genv TESSERA_CLUSTER "$TESSERA_CLUSTER")
        ;;
    openmpi)
        launch=(mpirun.openmpi --allow-run-as-root --oversubscribe -n 4 -x LD_PRELOAD="$lib"
            -x TSR_TEST_PREFIX="$prefix" -x TSR_ORACLE_DIR="$oracle" -x TESSERA_CLUSTER)
        ;;
    *)
        echo "FAIL $mpi: unknown MPI"
        failed=$((failed + 1))
        continue
        ;;
    esac
    for program in access pointers errors misc; do
        if ! mpicc.$mpi -O1 -Wall -o "$bin/$program" "$TESTS_DIR/$program.c" >"$WORK/cc-$mpi-$program.log" 2>&1; then
            failed=$((failed + 1))
            echo "FAIL $mpi/$program: does not compile"
            cat "$WORK/cc-$mpi-$program.log"
            continue
        fi
        run "$mpi/$program" "$WORK/$mpi-$program.log" "${launch[@]}" "$bin/$program"
    done
    # The files are in Tessera, not somewhere local: the tessera command sees them.
    if "$TESSERA" stat --cluster "$TESSERA_CLUSTER" "/$mpi-misc" >"$WORK/stat-$mpi.log" 2>&1 &&
        [ ! -e "tessera:" ]; then
        passed=$((passed + 1))
        echo "PASS $mpi/in-tessera"
    else
        failed=$((failed + 1))
        failures="$failures $mpi/in-tessera"
        echo "FAIL $mpi/in-tessera: /$mpi-misc is not in the cluster"
        cat "$WORK/stat-$mpi.log"
    fi
done

echo "MPI-IO tests:${failures:+ failed:$failures}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
