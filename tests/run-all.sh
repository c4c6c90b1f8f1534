#!/usr/bin/env bash
# tests/run-all.sh — every test tlsfront has, as CI runs them; the test
# command of README.md. Installs what the tests need (tests/packages.txt),
# then: format and lint, unit and end-to-end tests on this kernel, and the
# same end-to-end suite inside a QEMU guest whose kernel has kTLS, beside
# the nginx reference. TLSFRONT_SKIP_GUEST=1 skips the guest stage.
# Every stage runs even if an earlier one failed; the run ends with a table
# of the stages (ok / FAILED), the "N passed, M failed" total, and a
# non-zero exit if any stage failed.
set -uo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==== %s ====\n' "$*"; }

# Every stage's output also goes to a log, so the closing line can total
# the "test result:" and "N passed, M failed" lines of all stages.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
summary() {
  python3 - "$log" <<'PY'
import re, sys
text = open(sys.argv[1], errors="replace").read()
p = f = 0
for m in re.finditer(r"test result: \w+\. (\d+) passed; (\d+) failed", text):
    p += int(m.group(1)); f += int(m.group(2))
for m in re.finditer(r"^(\d+) passed, (\d+) failed$", text, re.M):
    p += int(m.group(1)); f += int(m.group(2))
print(f"{p} passed, {f} failed")
PY
}

# Every stage runs, whatever the earlier ones gave (one flaky stage must
# not hide the others' results); each one's exit status is kept for the
# table at the end, and the run fails if any stage did.
stage_names=() stage_results=()
# stage TITLE FUNCTION: run FUNCTION under a heading, note how it ended.
stage() {
  local title=$1 rc=0
  step "$title"
  "$2" || rc=$?
  stage_names+=("$title")
  if ((rc == 0)); then stage_results+=(ok); else stage_results+=("FAILED (exit $rc)"); fi
}
finish() {
  printf '\n==== stages ====\n'
  local i failed=0
  for i in "${!stage_names[@]}"; do
    printf '%-20s %s\n' "${stage_results[i]}" "${stage_names[i]}"
    [[ ${stage_results[i]} == ok || ${stage_results[i]} == skipped* ]] || failed=$((failed + 1))
  done
  summary
  if ((failed)); then
    echo "$failed stage(s) failed" >&2
    exit 1
  fi
  exit 0
}

# Without the packages no stage can run: this one alone stops the run.
step "packages the tests use (tests/packages.txt)"
tests/install-packages.sh || { echo "tests/install-packages.sh failed: nothing was run" >&2; exit 1; }

lint() {
  local rc=0
  cargo fmt --all -- --check || rc=1
  (cd fuzz && cargo fmt --all -- --check) || rc=1
  # Tests run programs only through tool() (tests/common), which checks them
  # against tests/packages.txt.
  if grep -rnE 'Command::new\("' tests/; then
    echo "tests/: run programs with tool(\"NAME\") so that tests/packages.txt lists them" >&2
    rc=1
  fi
  cargo clippy --workspace --all-targets --locked -- -D warnings || rc=1
  return $rc
}
stage "format and lint" lint

# The whole workspace: the server and the load client (crates/bench). Cargo
# builds the client's binary (for its own tests) before running any test, so
# the server's tests find target/debug/tlsfront-bench (tests/common:
# bench_client()). --no-fail-fast: every test binary runs, and reports.
host_tests() { cargo test --workspace --locked --no-fail-fast 2>&1 | tee -a "$log"; }
stage "unit and end-to-end tests on this kernel ($(uname -r))" host_tests

negative() { python3 tests/tls/negative.py --bin target/debug/tlsfront 2>&1 | tee -a "$log"; }
stage "TLS negative suite (a tlslite-ng peer) on this kernel" negative

testssl() { tests/testssl.sh 2>&1 | tee -a "$log"; }
stage "testssl.sh against tlsfront serve (no finding at LOW or above but the listed ones)" testssl

package() { tests/package.sh 2>&1 | tee -a "$log"; }
stage "the Debian package: cargo deb, dpkg -i, the systemd unit, started as the unit starts it" package

cpu_accounting() { python3 -m bench.compare_lib.test_cpu 2>&1 | tee -a "$log"; }
stage "bench/compare's CPU accounting, against processes of known CPU time" cpu_accounting

fuzzing() { fuzz/run.sh "${TLSFRONT_FUZZ_SECS:-15}" 2>&1 | tee -a "$log"; }
stage "fuzzing every parser for ${TLSFRONT_FUZZ_SECS:-15} s each (fuzz/run.sh)" fuzzing

if [[ ${TLSFRONT_SKIP_GUEST:-0} == 1 ]]; then
  echo "TLSFRONT_SKIP_GUEST=1: kTLS guest stage skipped"
  stage_names+=("end-to-end tests inside a kTLS guest") stage_results+=("skipped")
  finish
fi

# The server's end-to-end suites; tests/sites.rs also runs the load client,
# target/debug/tlsfront-bench from the stage above, which the guest sees on
# the read-only share of this tree.
bins=$(cargo test --locked --test serve --test proxy --test http_conformance --test sites --test static_sites --test fleet --test fleet_tickets --test h2 --test h2_records --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["executable"])')
# Two kernels: Debian 12's 6.1 (no TLS 1.3 rekey in kTLS: a KeyUpdate ends
# the connection cleanly) and trixie-backports' 7.x (rekey both ways).
# Every suite runs on 6.1. On 7.x only what the kernel's version changes:
# the data path (serve: sendfile and records; proxy: splice; h2 and
# h2_records: DATA frames on kTLS; fleet: resumption across nodes) and
# rekey. sites, static_sites and http_conformance exercise the same kTLS
# calls as serve through configuration and HTTP semantics, which do not
# depend on the kernel; they are left to 6.1 (and to this kernel's run),
# as is fleet_tickets (nodes of an etcd fleet resuming each other's
# sessions on kTLS: the fleet is control plane, run once).
bins_rekey=$(for b in $bins; do
  case $(basename "$b") in sites-* | static_sites-* | http_conformance-* | fleet_tickets-*) ;; *) echo "$b" ;; esac
done)
guest() {
  local run=$bins
  [[ $kernel == bookworm ]] || run=$bins_rekey
  [[ -n $run ]] || { echo "could not find the end-to-end test binaries" >&2; return 1; }
  # shellcheck disable=SC2086  # one path per word
  TLSFRONT_GUEST_KERNEL=$kernel tests/guest/run.sh --timeout 3000 -- tests/guest/suite.sh $run 2>&1 |
    tee -a "$log"
}
for kernel in bookworm trixie-backports; do
  stage "end-to-end tests inside a kTLS guest: Debian's $kernel kernel under QEMU" guest
done
finish
