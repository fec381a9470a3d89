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
cd "$WORK" # compiler wrappers (h5pcc) leave object files where they run

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

# launcher N CLUSTER_FILE: sets `launch` to start N processes of the current $mpi with the shim
# preloaded and the test's environment.
launcher() {
    case $mpi in
    mpich)
        launch=(mpiexec.mpich -n "$1" -genv LD_PRELOAD "$lib" -genv TSR_TEST_PREFIX "$prefix"
            -genv TSR_ORACLE_DIR "$oracle" -genv TESSERA_CLUSTER "$2")
        ;;
    openmpi)
        launch=(mpirun.openmpi --allow-run-as-root --oversubscribe -n "$1" -x LD_PRELOAD="$lib"
            -x TSR_TEST_PREFIX="$prefix" -x TSR_ORACLE_DIR="$oracle" -x TESSERA_CLUSTER="$2")
        ;;
    esac
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
    mpich | openmpi) ;;
    *)
        echo "FAIL $mpi: unknown MPI"
        failed=$((failed + 1))
        continue
        ;;
    esac
    for program in access collective pointers errors misc atomic views nocluster; do
        if ! mpicc.$mpi -O1 -Wall -o "$bin/$program" "$TESTS_DIR/$program.c" >"$WORK/cc-$mpi-$program.log" 2>&1; then
            failed=$((failed + 1))
            failures="$failures $mpi/$program"
            echo "FAIL $mpi/$program: does not compile"
            cat "$WORK/cc-$mpi-$program.log"
            continue
        fi
        if [ "$program" = nocluster ]; then
            launcher 4 "$WORK/none.toml" # the cluster file points nowhere
        else
            launcher 4 "$TESSERA_CLUSTER"
        fi
        run "$mpi/$program" "$WORK/$mpi-$program.log" "${launch[@]}" "$bin/$program"
    done
    # Unmodified HDF5 and PnetCDF programs: the files lie under $TESSERA_MPIIO_PATHS.
    launcher 4 "$TESSERA_CLUSTER"
    mount=/tessera-$mpi
    case $mpi in
    mpich) paths=(-genv TESSERA_MPIIO_PATHS "$mount") ;;
    openmpi) paths=(-x TESSERA_MPIIO_PATHS="$mount") ;;
    esac
    if command -v "h5pcc.$mpi" >/dev/null; then
        if "h5pcc.$mpi" -o "$bin/hdf5" "$TESTS_DIR/hdf5_hyperslab.c" >"$WORK/cc-$mpi-hdf5.log" 2>&1; then
            run "$mpi/hdf5" "$WORK/$mpi-hdf5.log" "${launch[@]}" "${paths[@]}" "$bin/hdf5" "$mount/grid.h5"
        else
            failed=$((failed + 1))
            failures="$failures $mpi/hdf5"
            echo "FAIL $mpi/hdf5: does not compile"
            cat "$WORK/cc-$mpi-hdf5.log"
        fi
    else
        echo "SKIP $mpi/hdf5: h5pcc.$mpi is not installed (libhdf5-$mpi-dev)"
    fi
    # Debian builds PnetCDF against one MPI only: run it under that one.
    pnetcdf=$(ldconfig -p | awk '/libpnetcdf\.so /{print $NF; exit}')
    pnetcdf_mpi=""
    if [ -n "$pnetcdf" ]; then
        if ldd "$pnetcdf" | grep -q 'libmpich'; then pnetcdf_mpi=mpich; else pnetcdf_mpi=openmpi; fi
    fi
    if [ "$pnetcdf_mpi" = "$mpi" ]; then
        if mpicc.$mpi -o "$bin/pnetcdf" "$TESTS_DIR/pnetcdf_vara.c" -lpnetcdf >"$WORK/cc-$mpi-pnetcdf.log" 2>&1; then
            run "$mpi/pnetcdf" "$WORK/$mpi-pnetcdf.log" "${launch[@]}" "${paths[@]}" "$bin/pnetcdf" "$mount/vara.nc"
            # Debian's own ncmpidump, unmodified, reads the variable back from Tessera.
            launcher 1 "$TESSERA_CLUSTER"
            if timeout 300 "${launch[@]}" "${paths[@]}" ncmpidump -v samples "$mount/vara.nc" >"$WORK/ncmpidump.log" 2>&1 &&
                grep -q 'samples = 0.5, 1.5, 2.5' "$WORK/ncmpidump.log"; then
                passed=$((passed + 1))
                echo "PASS $mpi/ncmpidump"
            else
                failed=$((failed + 1))
                failures="$failures $mpi/ncmpidump"
                echo "FAIL $mpi/ncmpidump:"
                tail -n 20 "$WORK/ncmpidump.log" | sed 's/^/    /'
            fi
        else
            failed=$((failed + 1))
            failures="$failures $mpi/pnetcdf"
            echo "FAIL $mpi/pnetcdf: does not compile"
            cat "$WORK/cc-$mpi-pnetcdf.log"
        fi
    elif [ -z "$pnetcdf_mpi" ]; then
        echo "SKIP $mpi/pnetcdf: libpnetcdf is not installed (libpnetcdf-dev)"
    else
        echo "SKIP $mpi/pnetcdf: Debian's libpnetcdf is built against $pnetcdf_mpi"
    fi
    # The BT-IO benchmark program (mpiio/bench/btio.c, `tessera bench btio-mpi`), as a smoke
    # run: 2 steps of a 32^3 grid with every method; it reads the whole file back and exits
    # non-zero on a wrong byte.
    if mpicc.$mpi -O2 -Wall -o "$bin/btio" "$ROOT/mpiio/bench/btio.c" >"$WORK/cc-$mpi-btio.log" 2>&1; then
        launcher 4 "$TESSERA_CLUSTER"
        for method in multiple sieve list datatype view two_phase server_directed; do
            run "$mpi/btio-$method" "$WORK/$mpi-btio-$method.log" "${launch[@]}" "$bin/btio" \
                "tessera:/$mpi-btio-$method" 2 32 "$method"
            grep '^{' "$WORK/$mpi-btio-$method.log" | sed "s|^|  [$mpi/btio-$method] |"
        done
    else
        failed=$((failed + 1))
        failures="$failures $mpi/btio"
        echo "FAIL $mpi/btio: does not compile"
        cat "$WORK/cc-$mpi-btio.log"
    fi
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
