#!/bin/bash
# The MPI-IO tests: every program in this directory under every MPI in $MPIS (default: MPICH
# and Open MPI), 4 processes each (oversubscribed), against a real 4-server Tessera cluster
# that this script starts and stops. The shim is loaded with LD_PRELOAD, after the POSIX
# library (libtessera_posix.so, the POSIX calls on Tessera names); the programs are
# plain MPI programs that know Tessera only by the file names they are given. Each program
# checks the data it reads back and aborts the job on the first wrong byte.
#
# Environment: TARGET_DIR (cargo's target dir, default ../../target), OUT (where the shims, the
# POSIX library and the benchmark programs are, default $TARGET_DIR/mpiio), TESSERA (the tessera binary), MPIS,
# KEEP=1 keeps the work directory and logs.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TARGET_DIR=${TARGET_DIR:-$ROOT/target}
OUT=${OUT:-$TARGET_DIR/mpiio}
TESSERA=${TESSERA:-$TARGET_DIR/release/tessera}
MPIS=${MPIS:-mpich openmpi}
TESTS_DIR=$ROOT/mpiio/tests
WORK=$(mktemp -d /tmp/tessera-mpi-test.XXXXXX)
CLUSTER=$WORK/cluster

MNT=$WORK/mnt
cleanup() {
    [ -n "${MOUNTED:-}" ] && "$TESSERA" umount "$MNT" >/dev/null 2>&1
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
# The cluster mounted on $MNT (`tessera mount`, docs/MOUNT.md), for mounted.c and the HDF5 and
# PnetCDF programs run with their files under it: needs root and /dev/fuse.
MOUNTED=""
MOUNT_WHY=""
if [ "$(id -u)" != 0 ] || [ ! -e /dev/fuse ]; then
    MOUNT_WHY="mounting needs root and /dev/fuse"
elif mkdir -p "$MNT" && "$TESSERA" mount "$MNT" --log "$WORK/mount.log" >"$WORK/mount-cmd.log" 2>&1; then
    MOUNTED=1
else
    MOUNT_WHY="tessera mount failed: $(cat "$WORK/mount-cmd.log")"
fi
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

# launcher N CLUSTER_FILE: sets `launch` to start N processes of the current $mpi with
# $preload (the POSIX library and the shim, unless a test says otherwise) preloaded and the
# test's environment.
launcher() {
    case $mpi in
    mpich)
        launch=(mpiexec.mpich -n "$1" -genv LD_PRELOAD "$preload" -genv TSR_TEST_PREFIX "$prefix"
            -genv TSR_ORACLE_DIR "$oracle" -genv TESSERA_CLUSTER "$2")
        ;;
    openmpi)
        launch=(mpirun.openmpi --allow-run-as-root --oversubscribe -n "$1" -x LD_PRELOAD="$preload"
            -x TSR_TEST_PREFIX="$prefix" -x TSR_ORACLE_DIR="$oracle" -x TESSERA_CLUSTER="$2")
        ;;
    esac
}

# env_args NAME VALUE: sets `env_args` to pass NAME=VALUE through the current $mpi's launcher.
env_args() {
    case $mpi in
    mpich) env_args=(-genv "$1" "$2") ;;
    openmpi) env_args=(-x "$1=$2") ;;
    esac
}

# compile LABEL COMMAND...: builds a test program; a failure counts as the test's.
# not_run LABEL WHY: a test that cannot run on this machine. Under CI=true (where every test
# must run) it counts as failed; elsewhere it is reported as SKIP, never as passed.
not_run() {
    if [ "${CI:-}" = true ]; then
        failed=$((failed + 1))
        failures="$failures $1"
        echo "FAIL $1: $2 (CI=true)"
    else
        echo "SKIP $1: $2"
    fi
}

compile() {
    local label=$1
    shift
    if "$@" >"$WORK/cc-${label//\//-}.log" 2>&1; then return 0; fi
    failed=$((failed + 1))
    failures="$failures $label"
    echo "FAIL $label: does not compile"
    cat "$WORK/cc-${label//\//-}.log"
    return 1
}

# size_bytes PATH: the exact size of PATH in bytes (`tessera stat --json`; the plain output
# prints sizes for people, 256 KiB).
size_bytes() {
    "$TESSERA" stat --json --cluster "$TESSERA_CLUSTER" "$1" 2>/dev/null |
        sed -n 's/^ *"size_bytes": *\([0-9]*\).*/\1/p'
}

# in_tessera LABEL PATH BYTES: the file PATH is in the cluster (`tessera ls` lists it) and
# holds BYTES bytes (`tessera stat`), so the program's MPI-IO reached Tessera.
in_tessera() {
    local label=$1 path=$2 bytes=$3
    local stat
    stat=$("$TESSERA" stat --cluster "$TESSERA_CLUSTER" "$path" 2>&1)
    if "$TESSERA" ls --cluster "$TESSERA_CLUSTER" "$(dirname "$path")" 2>&1 |
        grep -qx "$(basename "$path")" && [ "$(size_bytes "$path")" = "$bytes" ]; then
        passed=$((passed + 1))
        echo "PASS $label ($path: $bytes bytes in Tessera)"
    else
        failed=$((failed + 1))
        failures="$failures $label"
        echo "FAIL $label: $path is not in Tessera with $bytes bytes:"
        sed 's/^/    /' <<<"$stat"
    fi
}

# The site-wide hints file of hints.c, with two bad lines that must be skipped.
cat >"$WORK/romio-hints" <<'HINTS'
# site defaults for every program
striping_unit 131072
cb_buffer_size   8192
romio_cb_write enable
	romio_ds_read disable
tessera_coll two_phase
site_only_key site_value
a_key_without_value
too many words here
cb_nodes 3
HINTS

# Permissions: permissions.c runs as an unprivileged user (uid and gid 2001, no supplementary
# groups, no /etc/passwd entry: setpriv around the launcher) against files root makes here.
# That user can enter the work and cluster directories (0755; the key and the servers' data
# stay private, so its processes get their credentials from the agent) and has a scratch
# directory of its own (HOME, TMPDIR: Open MPI's session directory, MPICH's hydra), where
# the shims are copied so that it can read them wherever the repository lies.
UNPRIVILEGED_ID=2001
USER_DIR=$WORK/unprivileged
ROOT_ONLY_BYTES="root's secret, mode 0600"
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
    chmod 0755 "$WORK" "$CLUSTER"
    mkdir -m 1777 "$USER_DIR" "$USER_DIR/home" "$USER_DIR/tmp"
    printf '%s\n' "$ROOT_ONLY_BYTES" >"$WORK/root-only"
    seq 1 5000 >"$USER_DIR/root-readable"
    chmod 0644 "$USER_DIR/root-readable"
    { "$TESSERA" mkdir --mode 1777 /shared &&
        "$TESSERA" put --mode 600 "$WORK/root-only" /shared/root-only &&
        "$TESSERA" put --mode 644 "$USER_DIR/root-readable" /root-readable &&
        "$TESSERA" create --mode 622 /root-writable; } >"$WORK/root-files.log" 2>&1 ||
        cat "$WORK/root-files.log"
fi
as_user=(setpriv --reuid="$UNPRIVILEGED_ID" --regid="$UNPRIVILEGED_ID" --clear-groups
    env HOME="$USER_DIR/home" TMPDIR="$USER_DIR/tmp")

# attribute PATH FIELD: the FIELD line of `tessera stat PATH` (as root), value only.
attribute() { "$TESSERA" stat "$1" 2>&1 | sed -n "s/^$2: *//p"; }

# permissions: the permissions test for the current $mpi (see its call below).
permissions() {
    local label=$mpi/permissions
    if [ "$(id -u)" != 0 ] || ! command -v setpriv >/dev/null; then
        local why="run.sh is not running as root (uid $(id -u)): it cannot switch to an unprivileged user"
        command -v setpriv >/dev/null || why="setpriv is not installed (util-linux)"
        not_run "$label" "$why"
        return
    fi
    compile "$label" "mpicc.$mpi" -O1 -Wall -o "$bin/permissions" "$TESTS_DIR/permissions.c" || return
    local own=/shared/$mpi-own
    mkdir -p -m 0755 "$USER_DIR/lib-$mpi"
    install -m 0755 "$lib" "$USER_DIR/lib-$mpi/libtessera_mpiio.so"
    install -m 0755 "$posix" "$USER_DIR/lib-$mpi/libtessera_posix.so"
    if ! "${as_user[@]}" test -r "$USER_DIR/lib-$mpi/libtessera_mpiio.so" \
        -a -r "$USER_DIR/lib-$mpi/libtessera_posix.so" -a -x "$bin/permissions" \
        -a -r "$TESSERA_CLUSTER" -a -w "$USER_DIR/tmp"; then
        failed=$((failed + 1))
        failures="$failures $label"
        echo "FAIL $label: uid $UNPRIVILEGED_ID cannot reach the shim, $bin/permissions or $TESSERA_CLUSTER"
        return
    fi
    preload=$USER_DIR/lib-$mpi/libtessera_posix.so:$USER_DIR/lib-$mpi/libtessera_mpiio.so
    launcher 4 "$TESSERA_CLUSTER"
    preload=$posix:$lib
    run "$label" "$WORK/$mpi-permissions.log" "${as_user[@]}" "${launch[@]}" "$bin/permissions" \
        tessera:/shared/root-only tessera:/root-readable "$USER_DIR/root-readable" \
        tessera:/root-writable "tessera:$own" "tessera:/$mpi-forbidden"
    # Root's files are unchanged (bytes, mode, owner); the user's file is the user's.
    local problems=""
    "$TESSERA" get /shared/root-only "$WORK/root-only.back" >/dev/null 2>&1 &&
        cmp -s "$WORK/root-only" "$WORK/root-only.back" || problems="$problems; /shared/root-only's bytes changed"
    "$TESSERA" get /root-readable "$WORK/root-readable.back" >/dev/null 2>&1 &&
        cmp -s "$USER_DIR/root-readable" "$WORK/root-readable.back" || problems="$problems; /root-readable's bytes changed"
    [ "$(attribute /shared/root-only mode)" = 0600 ] || problems="$problems; /shared/root-only is mode $(attribute /shared/root-only mode)"
    [ "$(attribute /shared/root-only owner)" = 0:0 ] || problems="$problems; /shared/root-only is owned by $(attribute /shared/root-only owner)"
    [ "$(attribute /root-readable mode)" = 0644 ] || problems="$problems; /root-readable is mode $(attribute /root-readable mode)"
    # Int j of /root-writable is (j % 4) * 100 + j / 4: 16 strided ints from each process.
    "$TESSERA" get /root-writable "$WORK/root-writable.back" >/dev/null 2>&1 &&
        [ "$(od -An -v -t d4 "$WORK/root-writable.back" | xargs)" = "$(for j in $(seq 0 63); do echo $((j % 4 * 100 + j / 4)); done | xargs)" ] ||
        problems="$problems; /root-writable does not hold the user's strided ints"
    [ "$(attribute /root-writable owner)" = 0:0 ] || problems="$problems; /root-writable is owned by $(attribute /root-writable owner)"
    [ "$(attribute "$own" owner)" = "$UNPRIVILEGED_ID:$UNPRIVILEGED_ID" ] ||
        problems="$problems; $own is owned by '$(attribute "$own" owner)', not $UNPRIVILEGED_ID:$UNPRIVILEGED_ID"
    [ "$(size_bytes "$own")" = $((4 * (65536 + 16))) ] || problems="$problems; $own holds $(size_bytes "$own") bytes"
    "$TESSERA" stat "/$mpi-forbidden" >/dev/null 2>&1 && problems="$problems; /$mpi-forbidden was made"
    if [ -z "$problems" ]; then
        passed=$((passed + 1))
        echo "PASS $label-after (as root: /shared/root-only and /root-readable unchanged in bytes, mode and owner; /root-writable holds the user's ints; $own owned by $UNPRIVILEGED_ID:$UNPRIVILEGED_ID, $((4 * (65536 + 16))) bytes)"
    else
        failed=$((failed + 1))
        failures="$failures $label-after"
        echo "FAIL $label-after:${problems#;}"
    fi
}

# shfp_leftovers: the leftovers test for the current $mpi (see its call below).
shfp_leftovers() {
    local file=/$mpi-shfp live=$WORK/shfp-$mpi-live killed=$WORK/shfp-$mpi-killed
    local log=$WORK/$mpi-shfp-leftovers.log
    mkdir -p "$live" "$killed"
    launcher 2 "$TESSERA_CLUSTER"
    timeout 600 "${launch[@]}" "$bin/shfp_hold" "tessera:$file" "$live" live >"$live/log" 2>&1 &
    local live_job=$!
    timeout 600 "${launch[@]}" "$bin/shfp_hold" "tessera:$file" "$killed" live >"$killed/log" 2>&1 &
    local killed_job=$!
    local waited=0
    while { [ ! -f "$live/ready" ] || [ ! -f "$killed/ready" ]; } && [ $waited -lt 1200 ]; do
        sleep 0.1
        waited=$((waited + 1))
    done
    local handle prefix before after_kill after_open after_close live_status=1
    handle=$("$TESSERA" stat "$file" 2>>"$log" | awk '/^handle:/{print $2}')
    prefix=$(printf '%016x-' "$((handle))" 2>/dev/null)
    count() { "$TESSERA" ls /.tessera-shfp 2>>"$log" | grep -c "^$prefix"; }
    before=$(count)
    kill -9 $(cat "$killed"/pid.* 2>/dev/null) 2>>"$log"
    wait "$killed_job" 2>/dev/null
    after_kill=$(count)
    sleep 11
    launcher 2 "$TESSERA_CLUSTER"
    timeout 300 "${launch[@]}" "$bin/shfp_hold" "tessera:$file" "$WORK" open >>"$log" 2>&1
    after_open=$(count)
    touch "$live/stop"
    wait "$live_job" && live_status=0
    after_close=$(count)
    cat "$live/log" >>"$log"
    echo "side files of $file ($prefix): $before with both jobs, $after_kill after the kill," \
        "$after_open after the next open, $after_close after the live job's close;" \
        "live job exit $live_status" >>"$log"
    if [ "$before" = 2 ] && [ "$after_kill" = 2 ] && [ "$after_open" = 1 ] &&
        [ "$after_close" = 0 ] && [ "$live_status" = 0 ]; then
        passed=$((passed + 1))
        echo "  [$mpi/shfp-leftovers] ok side files: 2 live, 2 after SIGKILL, 1 after the next open, 0 after close"
        grep '^ok ' "$live/log" | sed "s|^|  [$mpi/shfp-leftovers] |"
        echo "PASS $mpi/shfp-leftovers"
    else
        failed=$((failed + 1))
        failures="$failures $mpi/shfp-leftovers"
        echo "FAIL $mpi/shfp-leftovers; last lines of $log:"
        tail -n 30 "$log" | sed 's/^/    /'
    fi
}

posix=$OUT/libtessera_posix.so
for mpi in $MPIS; do
    lib=$OUT/$mpi/libtessera_mpiio.so
    preload=$posix:$lib
    if [ ! -f "$lib" ] || [ ! -f "$posix" ]; then
        echo "FAIL $mpi: $lib or $posix is missing (make mpiio)"
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
    for program in access collective pointers errors misc atomic posix views client_cache write_back nocluster; do
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
    # An unprivileged user's program on root's files (after pointers.c, whose root-run shared
    # pointers made /.tessera-shfp: the user's shared pointer must still work in it).
    permissions
    # Programs that reach MPI-IO through PMPI_File_*. A Fortran program: Open MPI's Fortran
    # bindings call PMPI_File_* (MPICH's call MPI_File_*).
    launcher 4 "$TESSERA_CLUSTER"
    if compile "$mpi/fortran" "mpif90.$mpi" -O1 -Wall -o "$bin/fortran" "$TESTS_DIR/fortran_io.f90"; then
        run "$mpi/fortran" "$WORK/$mpi-fortran.log" "${launch[@]}" "$bin/fortran" "$prefix-fortran"
        in_tessera "$mpi/fortran-in-tessera" "/$mpi-fortran" $((2 * 4 * 1024 * 4))
    fi
    # A profiling layer of our own in front of the shim, preloaded before it, then linked
    # before it (no LD_PRELOAD); the same program then calls PMPI_File_* itself.
    if compile "$mpi/profiler" "mpicc.$mpi" -O1 -Wall -shared -fPIC -o "$bin/libtsrprof.so" \
        "$TESTS_DIR/profiler_layer.c" &&
        compile "$mpi/profiled" "mpicc.$mpi" -O1 -Wall -o "$bin/profiled" "$TESTS_DIR/profiled.c" &&
        compile "$mpi/profiled-linked" "mpicc.$mpi" -O1 -Wall -o "$bin/profiled-linked" \
            "$TESTS_DIR/profiled.c" -Wl,--no-as-needed -L"$bin" -ltsrprof -L"$OUT/$mpi" \
            -ltessera_mpiio -Wl,-rpath,"$bin:$OUT/$mpi"; then
        preload="$bin/libtsrprof.so:$lib"
        launcher 4 "$TESSERA_CLUSTER"
        run "$mpi/profiled-preload" "$WORK/$mpi-profiled-preload.log" "${launch[@]}" "$bin/profiled" preload
        in_tessera "$mpi/profiled-preload-in-tessera" "/$mpi-profiled-preload" $((2 * 4 * 4096 * 4))
        in_tessera "$mpi/profiled-preload-pmpi-in-tessera" "/$mpi-profiled-preload-pmpi" $((4 * 4096 * 4))
        preload=""
        launcher 4 "$TESSERA_CLUSTER"
        run "$mpi/profiled-linked" "$WORK/$mpi-profiled-linked.log" "${launch[@]}" "$bin/profiled-linked" linked
        in_tessera "$mpi/profiled-linked-in-tessera" "/$mpi-profiled-linked" $((2 * 4 * 4096 * 4))
        in_tessera "$mpi/profiled-linked-pmpi-in-tessera" "/$mpi-profiled-linked-pmpi" $((4 * 4096 * 4))
        preload=$posix:$lib
    fi
    # Site-wide hints from $ROMIO_HINTS, through the launcher's environment; the layouts that
    # get_info reports must be the ones `tessera stat` shows.
    "$TESSERA" create --cluster "$TESSERA_CLUSTER" --layout stripe:32768:3 "/$mpi-hints-existing" >/dev/null
    launcher 4 "$TESSERA_CLUSTER"
    env_args ROMIO_HINTS "$WORK/romio-hints"
    if compile "$mpi/hints" "mpicc.$mpi" -O1 -Wall -o "$bin/hints" "$TESTS_DIR/hints.c"; then
        run "$mpi/hints" "$WORK/$mpi-hints.log" "${launch[@]}" "${env_args[@]}" "$bin/hints"
        layouts=0
        while read -r _ name unit factor; do
            shown=$("$TESSERA" stat --cluster "$TESSERA_CLUSTER" "${name#tessera:}" | grep '^layout:')
            servers=$(sed -n 's/.*servers \[\(.*\)\]/\1/p' <<<"$shown" | tr ',' '\n' | grep -c .)
            if grep -q "stripe $unit B over" <<<"$shown" && [ "$servers" = "$factor" ]; then
                layouts=$((layouts + 1))
            else
                layouts=-100
                echo "    get_info of $name says striping_unit=$unit striping_factor=$factor; tessera stat: $shown"
            fi
        done < <(grep '^layout ' "$WORK/$mpi-hints.log")
        if [ "$layouts" -eq 2 ]; then
            passed=$((passed + 1))
            echo "PASS $mpi/hints-layout (striping_unit, striping_factor as tessera stat shows)"
        else
            failed=$((failed + 1))
            failures="$failures $mpi/hints-layout"
            echo "FAIL $mpi/hints-layout: get_info's striping is not the file's layout"
        fi
    fi

    # Leftovers: two jobs of 2 processes use the shared pointer of one file; one is killed
    # with SIGKILL. After the holders' lease (10 s, SHARED_POINTER_HOLD_LEASE) the next open
    # of the file removes the killed job's side file and leaves the live job's, which the
    # live job then still uses; its close removes its own.
    if mpicc.$mpi -O1 -Wall -o "$bin/shfp_hold" "$TESTS_DIR/shfp_hold.c" >"$WORK/cc-$mpi-shfp_hold.log" 2>&1; then
        shfp_leftovers
    else
        failed=$((failed + 1))
        failures="$failures $mpi/shfp-leftovers"
        echo "FAIL $mpi/shfp-leftovers: does not compile"
        cat "$WORK/cc-$mpi-shfp_hold.log"
    fi
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
        not_run "$mpi/hdf5" "h5pcc.$mpi is not installed (libhdf5-$mpi-dev)"
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
        not_run "$mpi/pnetcdf" "libpnetcdf is not installed (libpnetcdf-dev)"
    else
        # Static, not a missing piece: the other MPI runs it.
        echo "SKIP $mpi/pnetcdf: Debian's libpnetcdf is built against $pnetcdf_mpi"
    fi
    # The same with the cluster mounted on the $TESSERA_MPIIO_PATHS directory: POSIX calls on
    # names under it go to the kernel and through the mount (fopen included), MPI-IO through
    # the shim to Tessera. mounted.c checks each way with its own bytes; then plain h5py reads
    # through the mount the HDF5 file written with MPI-IO, and ncmpidump (whose format probe
    # is open/read) reads the PnetCDF file.
    if [ -n "$MOUNTED" ]; then
        launcher 4 "$TESSERA_CLUSTER"
        env_args TESSERA_MPIIO_PATHS "$MNT"
        mkdir -p "$MNT/$mpi"
        if compile "$mpi/mounted" "mpicc.$mpi" -O1 -Wall -o "$bin/mounted" "$TESTS_DIR/mounted.c"; then
            run "$mpi/mounted" "$WORK/$mpi-mounted.log" "${launch[@]}" "${env_args[@]}" "$bin/mounted" "$MNT/$mpi"
            in_tessera "$mpi/mounted-in-tessera" "/$mpi/stdio-written" $((4 * 40000 * 4))
        fi
        if [ -x "$bin/hdf5" ]; then
            run "$mpi/hdf5-mounted" "$WORK/$mpi-hdf5-mounted.log" "${launch[@]}" "${env_args[@]}" \
                "$bin/hdf5" "$MNT/$mpi/grid.h5"
            check="import h5py, numpy as np
r, c = np.meshgrid(np.arange(16), np.arange(32), indexing='ij')
with h5py.File('$MNT/$mpi/grid.h5', 'r') as f:
    for d, name in enumerate(['collective', 'independent']):
        assert (f[name][:] == d * 100000 + r * 1000 + c).all(), name
print('ok h5py read both datasets through the mount')"
            run "$mpi/hdf5-mounted-h5py" "$WORK/$mpi-hdf5-h5py.log" /usr/bin/python3 -c "$check"
        fi
        if [ -x "$bin/pnetcdf" ]; then
            run "$mpi/pnetcdf-mounted" "$WORK/$mpi-pnetcdf-mounted.log" "${launch[@]}" "${env_args[@]}" \
                "$bin/pnetcdf" "$MNT/$mpi/vara.nc"
            if timeout 300 "${launch[@]}" "${env_args[@]}" ncmpidump -v samples "$MNT/$mpi/vara.nc" \
                >"$WORK/ncmpidump-mounted.log" 2>&1 &&
                grep -q 'samples = 0.5, 1.5, 2.5' "$WORK/ncmpidump-mounted.log"; then
                passed=$((passed + 1))
                echo "PASS $mpi/ncmpidump-mounted"
            else
                failed=$((failed + 1))
                failures="$failures $mpi/ncmpidump-mounted"
                echo "FAIL $mpi/ncmpidump-mounted:"
                tail -n 20 "$WORK/ncmpidump-mounted.log" | sed 's/^/    /'
            fi
        fi
    else
        not_run "$mpi/mounted" "$MOUNT_WHY"
    fi
    # The BT-IO benchmark program (mpiio/bench/btio.c, built by mpiio/Makefile beside the
    # shim, `tessera-bench btio-mpi`), as a smoke run: 2 steps of a 32^3 grid with every
    # method; it reads the whole file back and exits non-zero on a wrong byte.
    btio=$OUT/$mpi/btio
    if [ -x "$btio" ]; then
        launcher 4 "$TESSERA_CLUSTER"
        for method in multiple sieve list datatype view two_phase server_directed; do
            run "$mpi/btio-$method" "$WORK/$mpi-btio-$method.log" "${launch[@]}" "$btio" \
                "tessera:/$mpi-btio-$method" 2 32 "$method"
            grep '^{' "$WORK/$mpi-btio-$method.log" | sed "s|^|  [$mpi/btio-$method] |"
        done
    else
        failed=$((failed + 1))
        failures="$failures $mpi/btio"
        echo "FAIL $mpi/btio: $btio is missing (make mpiio)"
    fi
    # The MPI-IO bandwidth program (mpiio/bench/mpiio.c, built by mpiio/Makefile beside the
    # shim as mpiio-bench, `tessera-bench mpiio`), as a smoke run: a small case of each access
    # and pattern, told through command files (the bench uses FIFOs). It checks every word it
    # reads back, the file size and which rank's data lies where, and exits non-zero on a
    # wrong byte; all four cases must answer verified.
    mpiio_bench=$OUT/$mpi/mpiio-bench
    if [ -x "$mpiio_bench" ]; then
        control=$WORK/mpiio-control-$mpi
        mkdir -p "$control"
        for rank in 0 1 2 3; do
            printf '%s\n' "run independent contiguous 65536 4 65536 1 1" \
                "run independent strided 1048576 2 65536 2 1" \
                "run collective contiguous 1048576 2 1048576 3 1" \
                "run collective strided 262144 2 4096 4 1" quit >"$control/rank-$rank"
        done
        launcher 4 "$TESSERA_CLUSTER"
        run "$mpi/mpiio-bench" "$WORK/$mpi-mpiio.log" "${launch[@]}" "$mpiio_bench" "tessera:/$mpi-mpiio" "$control"
        grep '^{' "$WORK/$mpi-mpiio.log" | sed "s|^|  [$mpi/mpiio-bench] |"
        verified=$(grep -c '"verified": true' "$WORK/$mpi-mpiio.log")
        if [ "$verified" -eq 4 ]; then
            passed=$((passed + 1))
            echo "PASS $mpi/mpiio-bench-cases (4 cases verified)"
        else
            failed=$((failed + 1))
            failures="$failures $mpi/mpiio-bench-cases"
            echo "FAIL $mpi/mpiio-bench-cases: $verified of 4 cases verified"
        fi
    else
        failed=$((failed + 1))
        failures="$failures $mpi/mpiio-bench"
        echo "FAIL $mpi/mpiio-bench: $mpiio_bench is missing (make mpiio)"
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
