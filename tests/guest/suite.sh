#!/usr/bin/env bash
# tests/guest/suite.sh — runs INSIDE the kTLS guest (tests/guest/run.sh):
# the nginx + OpenSSL reference first (proves this kernel does kTLS for a
# known-good peer), then tlsfront's end-to-end suite with kTLS required:
# every connection must be offloaded (TX and RX), bodies must match, and
# /proc/net/tls_stat must show no decrypt errors. Then the TLS negative
# suite (tests/tls/negative.py, needs tlslite-ng installed on the host),
# whose broken records must reach the kernel's decrypt path.
# Usage: tests/guest/suite.sh TEST_BINARY...   (the serve and proxy suites)
set -euo pipefail
(($#)) || { echo "usage: suite.sh TEST_BINARY..." >&2; exit 2; }
cd "$(dirname "$0")/../.."

echo "== guest kernel $(uname -r)"
cat /proc/net/tls_stat
target/debug/tlsfront check || true

echo "== reference: nginx + OpenSSL with Options KTLS"
tests/guest/nginx-reference.sh

# Every suite runs, whatever an earlier one did (one failure must not hide
# the others' results); the guest's exit status says whether any failed.
failed=()
for bin in "$@"; do
  echo "== tlsfront end-to-end suite $(basename "$bin") with kTLS required"
  TLSFRONT_EXPECT_KTLS=1 "$bin" --test-threads=1 || failed+=("$(basename "$bin")")
done
echo "== /proc/net/tls_stat after the suite"
cat /proc/net/tls_stat

# Last: its corrupted records count as decrypt errors, on purpose.
echo "== TLS negative suite with kTLS required"
TLSFRONT_EXPECT_KTLS=1 python3 tests/tls/negative.py --bin target/debug/tlsfront || failed+=(negative.py)
if ((${#failed[@]})); then
  echo "== failed in the guest: ${failed[*]}"
  exit 1
fi
