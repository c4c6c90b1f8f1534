#!/usr/bin/env bash
# fuzz/run.sh [SECONDS_PER_TARGET] — build every fuzz target and run each
# for a bounded time (default 20 s) from its seed corpus. Exits non-zero if
# any target crashes (a panic is a failed invariant); the crashing input is
# left in fuzz/artifacts/<target>/. Ends with "N passed, M failed".
#
# cargo-fuzz instruments with AddressSanitizer, whose rustc flag is still
# nightly-only: RUSTC_BOOTSTRAP=1 lets the stable compiler accept it, for
# the fuzz build only (nothing else sees it; the main crate builds as
# before). FUZZ_SANITIZER=none builds without ASan, on plain stable.
set -uo pipefail
cd "$(dirname "$0")"
secs=${1:-20}
san=${FUZZ_SANITIZER:-address}

# cargo-fuzz comes from the test command's one package list.
command -v cargo-fuzz >/dev/null || ../tests/install-packages.sh || exit 1
fuzz() {
  if [[ $san == none ]]; then cargo fuzz "$@"; else RUSTC_BOOTSTRAP=1 cargo fuzz "$@"; fi
}
# Debug assertions on: arithmetic overflow panics instead of wrapping.
flags=(--sanitizer "$san" --debug-assertions)

mapfile -t targets < <(cargo fuzz list)
# Built from fuzz/Cargo.lock as it is, as the main crate is (`--locked`):
# cargo fuzz has no --locked of its own and would quietly re-resolve a
# stale lock and rewrite it, so ask cargo first, with --locked.
if ! cargo metadata --locked --format-version 1 >/dev/null; then
  echo "fuzz/Cargo.lock is out of date with the crates the fuzz targets use: refresh it" \
    "from the main lock (cp Cargo.lock fuzz/ && (cd fuzz && cargo metadata >/dev/null))" \
    "and commit it"
  echo "0 passed, ${#targets[@]} failed"
  exit 1
fi
if ! fuzz build "${flags[@]}"; then
  echo "fuzz build failed"
  echo "0 passed, ${#targets[@]} failed"
  exit 1
fi

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
passed=0 failed=0
for t in "${targets[@]}"; do
  # New inputs go to a scratch corpus; the committed seeds are only read.
  mkdir -p "$scratch/$t" "artifacts/$t"
  log="$scratch/$t.log"
  timeout --kill-after=10 $((secs + 60)) \
    bash -c "$(declare -f fuzz); san=$san; fuzz run ${flags[*]} $t $scratch/$t corpus/$t -- \
      -max_total_time=$secs -timeout=10 -rss_limit_mb=2048 -print_final_stats=1" >"$log" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  if ((rc == 0)); then
    passed=$((passed + 1))
    echo "$t: ok, ${runs:-?} runs in ${secs} s ($(( ${runs:-0} / (secs > 0 ? secs : 1) )) exec/s)"
  else
    failed=$((failed + 1))
    echo "$t: FAILED (exit $rc)"
    grep -E "panicked at|assertion|ERROR: |SUMMARY|Test unit written|^Failing input|Reproduce with" "$log" | head -20 | sed 's/^/    /'
  fi
done
echo "$passed passed, $failed failed"
((failed == 0))
