#!/usr/bin/env bash
# Fuzzing of every cargo-fuzz target in fuzz/ (the wire and datatype decoders), two ways:
#
#   scripts/fuzz-smoke.sh                 # the smoke run of `make test`: deterministic
#   FUZZ_RUNS=200000 scripts/fuzz-smoke.sh
#   scripts/fuzz-smoke.sh --explore       # `make fuzz`: a random search, FUZZ_SECONDS per target
#   FUZZ_SECONDS=600 scripts/fuzz-smoke.sh --explore
#
# The smoke run first replays every saved crash input (fuzz/regressions/<target>/*, each a
# regression that must pass), then runs FUZZ_RUNS inputs per target from a fixed seed over the
# committed seeds (fuzz/seeds/<target>) with a scratch corpus thrown away afterwards: the same
# tree gives the same inputs on every machine and every run, so a change that is not about the
# decoders cannot turn it red by chance. The exploratory run searches at random for
# FUZZ_SECONDS per target and keeps its corpus in fuzz/corpus/<target> (gitignored) so coverage
# accumulates; a crash it finds goes into fuzz/regressions/<target>/ with its fix.
# Crash inputs land in fuzz/artifacts/<target>/. Exits non-zero if any target crashes, leaks,
# times out or runs out of memory. Needs a nightly toolchain: without one the smoke run fails
# under CI=true (a test that cannot run must not pass) and skips elsewhere.
set -euo pipefail

MODE=smoke
if [[ "${1:-}" == "--explore" ]]; then
    MODE=explore
elif [[ $# -gt 0 ]]; then
    echo "usage: scripts/fuzz-smoke.sh [--explore]" >&2
    exit 2
fi
FUZZ_SECONDS="${FUZZ_SECONDS:-60}"
FUZZ_RUNS="${FUZZ_RUNS:-50000}"
FUZZ_SEED=1
MAX_LEN=65536

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
fuzz_dir="$root/fuzz"
cd "$root"

if ! [[ "$FUZZ_SECONDS" =~ ^[1-9][0-9]*$ ]]; then
    echo "fuzz smoke: FUZZ_SECONDS must be a positive whole number of seconds, got '$FUZZ_SECONDS'" >&2
    exit 2
fi
if ! [[ "$FUZZ_RUNS" =~ ^[1-9][0-9]*$ ]]; then
    echo "fuzz smoke: FUZZ_RUNS must be a positive whole number of inputs, got '$FUZZ_RUNS'" >&2
    exit 2
fi

if ! cargo +nightly --version >/dev/null 2>&1; then
    if [[ "${CI:-}" == "true" ]]; then
        echo "fuzz smoke: no nightly toolchain (cargo-fuzz needs one: rustup toolchain install nightly)" >&2
        exit 1
    fi
    echo "fuzz smoke ignored at run time: no nightly toolchain (cargo-fuzz needs one: rustup toolchain install nightly)"
    exit 0
fi

if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "fuzz smoke: installing cargo-fuzz"
    if ! cargo install cargo-fuzz --locked --quiet; then
        echo "fuzz smoke: could not install cargo-fuzz (offline?); install it with 'cargo install cargo-fuzz --locked'" >&2
        exit 1
    fi
fi

echo "fuzz smoke: building targets"
build_start=$SECONDS
build_log="$(mktemp)"
if ! cargo +nightly fuzz build --fuzz-dir "$fuzz_dir" >"$build_log" 2>&1; then
    cat "$build_log" >&2
    rm -f "$build_log"
    echo "fuzz smoke: build of the fuzz targets failed" >&2
    exit 1
fi
rm -f "$build_log"
echo "fuzz smoke: built in $((SECONDS - build_start)) s"

mapfile -t targets < <(cargo +nightly fuzz list --fuzz-dir "$fuzz_dir")
if [[ ${#targets[@]} -eq 0 ]]; then
    echo "fuzz smoke: no fuzz targets found in $fuzz_dir" >&2
    exit 1
fi

log_dir="$(mktemp -d)"
trap 'rm -rf "$log_dir"' EXIT

failed=()
for target in "${targets[@]}"; do
    seeds="$fuzz_dir/seeds/$target"
    regressions="$fuzz_dir/regressions/$target"
    log="$log_dir/$target.log"

    if [[ "$MODE" == smoke && -d "$regressions" ]] && compgen -G "$regressions/*" >/dev/null; then
        # Each saved crash input, run once: all must pass.
        replay_status=0
        cargo +nightly fuzz run --fuzz-dir "$fuzz_dir" "$target" "$regressions"/* -- \
            -runs=1 -timeout=10 -malloc_limit_mb=64 >"$log_dir/$target.replay.log" 2>&1 ||
            replay_status=$?
        replayed=$(find "$regressions" -type f | wc -l | tr -d ' ')
        if [[ $replay_status -ne 0 ]]; then
            failed+=("$target")
            echo "fuzz smoke: $target FAILED replaying its $replayed saved crash inputs:"
            grep -B 2 -A 4 -E "panicked at|ERROR: |Running: " "$log_dir/$target.replay.log" | tail -n 30 || true
            continue
        fi
        echo "fuzz smoke: $target replayed $replayed saved crash inputs"
    fi

    if [[ "$MODE" == smoke ]]; then
        # New inputs go to a scratch corpus, thrown away; the seeds are only read.
        corpus="$log_dir/corpus-$target"
        budget=(-seed="$FUZZ_SEED" -runs="$FUZZ_RUNS")
        described="$FUZZ_RUNS inputs from seed $FUZZ_SEED"
    else
        corpus="$fuzz_dir/corpus/$target"
        budget=(-max_total_time="$FUZZ_SECONDS")
        described="${FUZZ_SECONDS} s"
    fi
    mkdir -p "$corpus"
    corpora=("$corpus")
    [[ -d "$seeds" ]] && corpora+=("$seeds")

    status=0
    cargo +nightly fuzz run --fuzz-dir "$fuzz_dir" "$target" "${corpora[@]}" -- \
        "${budget[@]}" -max_len="$MAX_LEN" \
        -timeout=10 -malloc_limit_mb=64 -print_final_stats=1 \
        >"$log" 2>&1 || status=$?

    runs="$(grep -oE 'Done [0-9]+ runs' "$log" | tail -n 1 | grep -oE '[0-9]+' || true)"
    if [[ -z "$runs" ]]; then
        runs="$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' | tail -n 1 || true)"
    fi
    rate="$(grep -oE 'stat::average_exec_per_sec: *[0-9]+' "$log" | grep -oE '[0-9]+$' | tail -n 1 || true)"
    inputs="$(find "$corpus" -type f | wc -l | tr -d ' ')"

    if [[ $status -eq 0 ]]; then
        echo "fuzz smoke: $target ok: ${runs:-?} runs ($described, ${rate:-?} exec/s), corpus $inputs inputs"
    else
        failed+=("$target")
        echo "fuzz smoke: $target FAILED (exit $status) after ${runs:-?} runs"
        echo "---- $target failure ----"
        # The panic message (if any) comes before a long stack trace; show both ends.
        grep -A 4 -E "panicked at|ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)" "$log" | head -n 30 || true
        echo "..."
        tail -n 20 "$log"
        echo "-------------------------"
        artifacts="$(grep -oE "Test unit written to [^ ]+" "$log" | sed 's/Test unit written to //' || true)"
        for artifact in $artifacts; do
            echo "fuzz smoke: $target input saved as $artifact"
            echo "  reproduce: cargo +nightly fuzz run --fuzz-dir fuzz $target $artifact"
            echo "  once fixed, keep it: cp $artifact fuzz/regressions/$target/"
        done
    fi
done

if [[ ${#failed[@]} -gt 0 ]]; then
    echo "fuzz smoke: FAILED targets: ${failed[*]}" >&2
    exit 1
fi
echo "fuzz smoke: all ${#targets[@]} targets passed"
