#!/usr/bin/env bash
# Short fuzzing run of every cargo-fuzz target in fuzz/ (the wire and datatype decoders).
#
#   scripts/fuzz-smoke.sh            # FUZZ_SECONDS=15 per target
#   FUZZ_SECONDS=300 scripts/fuzz-smoke.sh
#
# Each target starts from its committed seeds (fuzz/seeds/<target>, read-only) plus a scratch
# corpus in fuzz/corpus/<target> (gitignored, kept between runs so coverage accumulates).
# Crash inputs land in fuzz/artifacts/<target>/. Exits non-zero if any target crashes, leaks,
# times out or runs out of memory. Needs a nightly toolchain; without one it skips (exit 0).
set -euo pipefail

FUZZ_SECONDS="${FUZZ_SECONDS:-15}"
MAX_LEN=65536

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
fuzz_dir="$root/fuzz"
cd "$root"

if ! [[ "$FUZZ_SECONDS" =~ ^[1-9][0-9]*$ ]]; then
    echo "fuzz smoke: FUZZ_SECONDS must be a positive whole number of seconds, got '$FUZZ_SECONDS'" >&2
    exit 2
fi

if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "fuzz smoke skipped: no nightly toolchain (cargo-fuzz needs one: rustup toolchain install nightly)"
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
    corpus="$fuzz_dir/corpus/$target"
    seeds="$fuzz_dir/seeds/$target"
    mkdir -p "$corpus"
    corpora=("$corpus")
    [[ -d "$seeds" ]] && corpora+=("$seeds")
    log="$log_dir/$target.log"

    status=0
    # The first corpus dir receives new inputs; the seeds dir is only read.
    cargo +nightly fuzz run --fuzz-dir "$fuzz_dir" "$target" "${corpora[@]}" -- \
        -max_total_time="$FUZZ_SECONDS" -max_len="$MAX_LEN" \
        -timeout=10 -malloc_limit_mb=64 -print_final_stats=1 \
        >"$log" 2>&1 || status=$?

    runs="$(grep -oE 'Done [0-9]+ runs' "$log" | tail -n 1 | grep -oE '[0-9]+' || true)"
    if [[ -z "$runs" ]]; then
        runs="$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' | tail -n 1 || true)"
    fi
    rate="$(grep -oE 'stat::average_exec_per_sec: *[0-9]+' "$log" | grep -oE '[0-9]+$' | tail -n 1 || true)"
    inputs="$(find "$corpus" -type f | wc -l | tr -d ' ')"

    if [[ $status -eq 0 ]]; then
        echo "fuzz smoke: $target ok: ${runs:-?} runs in ${FUZZ_SECONDS} s (${rate:-?} exec/s), corpus $inputs inputs"
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
        done
    fi
done

if [[ ${#failed[@]} -gt 0 ]]; then
    echo "fuzz smoke: FAILED targets: ${failed[*]}" >&2
    exit 1
fi
echo "fuzz smoke: all ${#targets[@]} targets passed"
