#!/usr/bin/env bash
# tests/package.sh — the Debian package as an operator meets it: built with
# `cargo deb`, installed with `dpkg -i`, its systemd unit checked with
# `systemd-analyze verify` (and its exposure with `systemd-analyze
# security`), then the installed binary started the way the unit starts it
# (its ExecStart and environment, with a NOTIFY_SOCKET that must hear
# READY=1 and STOPPING=1), serving /var/www/html on 127.0.0.1 as www-data,
# then stopped with SIGTERM and the package purged. Needs root. Closes with
# "N passed, M failed".
# Usage: tests/package.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=tests/lib.sh
. tests/lib.sh
passed=0 failed=0
check() { # description, then a command that must succeed
  local what=$1; shift
  if "$@"; then passed=$((passed + 1)); echo "ok   $what"
  else failed=$((failed + 1)); echo "FAIL $what"; fi
}
quiet() { "$@" >/dev/null 2>&1; }
finish() { echo "$passed passed, $failed failed"; ((failed == 0)); }

[[ $(id -u) -eq 0 ]] || { echo "tests/package.sh needs root (dpkg -i)"; echo "0 passed, 1 failed"; exit 1; }
# The server's package only: the workspace's load client (crates/bench)
# is not part of it.
cargo deb -p tlsfront --locked --quiet >/dev/null
deb=$(ls -t target/debian/tlsfront_*.deb | head -n1)
dir=$(mktemp -d)
pid=
cleanup() {
  [[ -z $pid ]] || kill "$pid" 2>/dev/null || true
  dpkg --purge tlsfront >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT

check "dpkg -i $(basename "$deb")" quiet dpkg -i "$deb"
check "the binary, unit and config are where the package puts them" \
  test -x /usr/bin/tlsfront -a -f /usr/lib/systemd/system/tlsfront.service -a -f /etc/tlsfront/tlsfront.toml
check "the default config is a conffile" grep -qx /etc/tlsfront/tlsfront.toml /var/lib/dpkg/info/tlsfront.conffiles
check "systemd-analyze verify tlsfront.service" systemd-analyze verify /usr/lib/systemd/system/tlsfront.service
exposure=$(systemd-analyze security --offline=true --no-pager /usr/lib/systemd/system/tlsfront.service 2>/dev/null |
  sed -n 's/.*Overall exposure level for tlsfront.service: \([0-9.]*\).*/\1/p')
check "systemd-analyze security: exposure ${exposure:-?} below 5 (OK or better)" \
  python3 -c 'import sys; sys.exit(not (sys.argv[1] and float(sys.argv[1]) < 5))' "${exposure:-}"

# Start it as the unit does: its ExecStart, its environment, on loopback.
exec_start=$(sed -n 's/^ExecStart=//p' /usr/lib/systemd/system/tlsfront.service)
env_line=$(sed -n 's/^Environment=//p' /usr/lib/systemd/system/tlsfront.service)
# /var/log/tlsfront is the unit's LogsDirectory= (systemd makes it).
[[ -d /var/log/tlsfront ]] || made_logs=1
mkdir -p /var/www/html "$dir/state" /var/log/tlsfront
echo "packaged hello" > /var/www/html/tlsfront-package-test.txt
python3 - "$dir/notify" >"$dir/notified" <<'PY' &
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1]); s.settimeout(60)
for _ in range(4):
    print(s.recv(256).decode().strip(), flush=True)
PY
listener=$!
# Each wait below polls for its event; 600 x 0.1 s is only a safety net
# for a loaded machine (the check after it fails if the event never came).
for _ in $(seq 600); do [[ -S $dir/notify ]] && break; sleep 0.1; done
# As systemd's own notify socket: reachable after the switch to www-data.
chmod 755 "$dir"
chmod 666 "$dir/notify"
# shellcheck disable=SC2086  # ExecStart's words
env "$env_line" XDG_DATA_HOME="$dir/state" NOTIFY_SOCKET="$dir/notify" \
  $exec_start --listen 127.0.0.1:0 >"$dir/log" 2>&1 &
pid=$!
port=$(tlsfront_port "$dir/log")
check "the installed tlsfront starts with the packaged config" test -n "$port"
for _ in $(seq 600); do grep -q READY=1 "$dir/notified" && break; sleep 0.1; done
check "systemd hears READY=1" grep -qx READY=1 "$dir/notified"
check "it runs as www-data" grep -q "running as user www-data" "$dir/log"
body=$(curl -sS --cacert "$dir/state/tlsfront/cert.pem" "https://127.0.0.1:$port/tlsfront-package-test.txt" 2>&1 || true)
check "it serves /var/www/html over HTTPS" test "$body" = "packaged hello"
# The packaged config logs to /var/log/tlsfront/access.log; logrotate's
# postrotate signal (SIGUSR1) reopens it as www-data.
for _ in $(seq 600); do grep -q tlsfront-package-test /var/log/tlsfront/access.log 2>/dev/null && break; sleep 0.1; done
check "the request is in /var/log/tlsfront/access.log" grep -q '"GET /tlsfront-package-test.txt HTTP/1.1" 200 15' /var/log/tlsfront/access.log
check "the logrotate snippet is installed" test -f /etc/logrotate.d/tlsfront
kill -USR1 "$pid"
for _ in $(seq 600); do grep -q "SIGUSR1: reopened" "$dir/log" && break; sleep 0.1; done
check "SIGUSR1 as www-data reopens the access log" grep -q "SIGUSR1: reopened 1 access log file(s), 0 failed" "$dir/log"
check "tlsfront config check accepts the packaged config" \
  quiet tlsfront config check /etc/tlsfront/tlsfront.toml
# Reload as the unit does (ExecReload), after the switch to www-data: the
# root-only key read at start is still usable (unchanged).
exec_reload=$(sed -n 's/^ExecReload=//p' /usr/lib/systemd/system/tlsfront.service)
# shellcheck disable=SC2086  # ExecReload's words
${exec_reload//\$MAINPID/$pid}
for _ in $(seq 600); do [[ $(grep -c READY=1 "$dir/notified") -ge 2 ]] && break; sleep 0.1; done
check "systemctl reload: systemd hears RELOADING=1, then READY=1 again" \
  test "$(grep -c '^RELOADING=1' "$dir/notified")" -eq 1 -a "$(grep -c '^READY=1' "$dir/notified")" -eq 2
check "the reload as www-data loads the config and the root-only key" grep -q "^reloaded " "$dir/log"
body=$(curl -sS --cacert "$dir/state/tlsfront/cert.pem" "https://127.0.0.1:$port/tlsfront-package-test.txt" 2>&1 || true)
check "it still serves after the reload" test "$body" = "packaged hello"
kill -TERM "$pid"
st=0; wait "$pid" || st=$?
pid=
check "SIGTERM: exit 0" test "$st" -eq 0
wait "$listener" || true
check "systemd hears STOPPING=1" grep -qx STOPPING=1 "$dir/notified"
rm -f /var/www/html/tlsfront-package-test.txt
check "dpkg --purge removes it" quiet dpkg --purge tlsfront
check "nothing of it is left" test ! -e /usr/bin/tlsfront -a ! -e /etc/tlsfront/tlsfront.toml
[[ -z ${made_logs:-} ]] || rm -rf /var/log/tlsfront
[[ $failed -eq 0 ]] || cat "$dir/log"
finish
