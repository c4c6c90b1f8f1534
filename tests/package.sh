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
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
end = time.monotonic() + 600
while time.monotonic() < end:
    s.settimeout(end - time.monotonic())
    try:
        msg = s.recv(256).decode().strip()
    except socket.timeout:
        break
    print(msg, flush=True)
    if msg == "STOPPING=1":
        break
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
  $exec_start --listen 127.0.0.1:0 --http-listen 127.0.0.1:0 >"$dir/log" 2>&1 &
pid=$!
port=$(tlsfront_port "$dir/log")
check "the installed tlsfront starts with the packaged config" test -n "$port"
for _ in $(seq 600); do grep -q READY=1 "$dir/notified" && break; sleep 0.1; done
check "systemd hears READY=1" grep -qx READY=1 "$dir/notified"
# Wait (up to 60 s) until a command succeeds.
await() { local _; for _ in $(seq 600); do "$@" && return 0; sleep 0.1; done; return 1; }
await grep -q "^parent process " "$dir/log" || true
server=$(sed -n 's/^parent process .* server process \([0-9]*\) as user .*/\1/p' "$dir/log" | tail -n1)
check "the parent stays root" test "$(ps -o user= -p "$pid")" = root
check "its server process runs as www-data" test "$(ps -o user= -p "${server:-0}")" = www-data
check "it says the server process runs as www-data" grep -q "running as user www-data" "$dir/log"
ca=$dir/state/tlsfront/cert.pem
get() { curl -sS --max-time 30 --cacert "$ca" "https://127.0.0.1:$port/tlsfront-package-test.txt" 2>&1 || true; }
check "it serves /var/www/html over HTTPS (curl picks h2)" test "$(get)" = "packaged hello"
http_port=$(sed -n 's|^plain HTTP on http://127.0.0.1:\([0-9]*\)/.*|\1|p' "$dir/log" | head -n1)
redirect() { curl -sS --max-time 30 -o /dev/null -w '%{http_code} %{redirect_url}' "http://localhost:${http_port:-0}/a?b" 2>&1 || true; }
check "its plain-HTTP listener (bound by the root parent) redirects to HTTPS" \
  test "$(redirect)" = "308 https://localhost:$port/a?b"
# The packaged config logs to /var/log/tlsfront/access.log, which the parent
# opens as root: the file is root's, never www-data's.
await grep -q '"GET /tlsfront-package-test.txt HTTP/2.0" 200 15' /var/log/tlsfront/access.log || true
check "the request is in /var/log/tlsfront/access.log" grep -q '"GET /tlsfront-package-test.txt HTTP/2.0" 200 15' /var/log/tlsfront/access.log
check "the access log belongs to root" test "$(stat -c %U /var/log/tlsfront/access.log)" = root
check "the logrotate snippet is installed" test -f /etc/logrotate.d/tlsfront
# Real logrotate with the packaged snippet: it renames the file and creates
# the new one (root adm 0640). Its postrotate reaches the parent through
# systemctl, absent here, so the same signal is sent as systemd would send
# it (--kill-whom=main: the parent).
quiet logrotate -f --state "$dir/logrotate.state" /etc/logrotate.d/tlsfront
check "logrotate rotated the access log" test -s /var/log/tlsfront/access.log.1 -a -e /var/log/tlsfront/access.log
check "logrotate's new file is root adm 0640" test "$(stat -c '%U %G %a' /var/log/tlsfront/access.log)" = "root adm 640"
check "the postrotate signal goes to the main process only" grep -q -- "--kill-whom=main" /etc/logrotate.d/tlsfront
kill -USR1 "$pid"
await grep -q "SIGUSR1: reopened" "$dir/log" || true
check "SIGUSR1 reopens the access log through the parent" grep -q "SIGUSR1: reopened 1 access log file(s), 0 failed" "$dir/log"
get >/dev/null
check "the next request goes to the new file" await grep -q tlsfront-package-test /var/log/tlsfront/access.log
check "tlsfront config check accepts the packaged config" \
  quiet tlsfront config check /etc/tlsfront/tlsfront.toml

# Reload as systemctl reload does: each ExecReload= in turn, stopping at the
# first that fails.
reload() {
  local line
  while IFS= read -r line; do
    # shellcheck disable=SC2086  # ExecReload's words
    ${line//\$MAINPID/$pid} >>"$dir/reload.log" 2>&1 || return 1
  done < <(sed -n 's/^ExecReload=//p' /usr/lib/systemd/system/tlsfront.service)
}
# A certificate and key, and a ticket key, that only root may read (as
# certbot writes them): the server process cannot, the parent reads them.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=localhost \
  -addext subjectAltName=DNS:localhost,IP:127.0.0.1 \
  -keyout /etc/tlsfront/package-test.key -out /etc/tlsfront/package-test.pem 2>/dev/null
head -c 80 /dev/urandom >/etc/tlsfront/package-test.ticket
chmod 600 /etc/tlsfront/package-test.key /etc/tlsfront/package-test.ticket
cp /etc/tlsfront/tlsfront.toml "$dir/packaged.toml"
{
  printf 'cert = "/etc/tlsfront/package-test.pem"\nkey = "/etc/tlsfront/package-test.key"\n'
  printf 'ticket_keys = ["/etc/tlsfront/package-test.ticket"]\n'
  cat "$dir/packaged.toml"
} >/etc/tlsfront/tlsfront.toml
reloads=$(grep -c "^reloaded " "$dir/log" || true)
check "systemctl reload with root-only keys succeeds" reload
await test "$(grep -c "^reloaded " "$dir/log")" -gt "$reloads" || true
check "the reload loads the root-only key and ticket key" test "$(grep -c "^reloaded " "$dir/log")" -gt "$reloads"
check "systemd hears RELOADING=1, then READY=1 again" \
  await test "$(grep -c '^RELOADING=1' "$dir/notified")" -eq 1 -a "$(grep -c '^READY=1' "$dir/notified")" -eq 2
served=$(openssl s_client -connect "127.0.0.1:$port" -servername localhost </dev/null 2>/dev/null |
  openssl x509 -noout -fingerprint -sha256 2>/dev/null)
check "it serves the new certificate" test "$served" = "$(openssl x509 -noout -fingerprint -sha256 -in /etc/tlsfront/package-test.pem)"
ca=/etc/tlsfront/package-test.pem
# A config that would be refused: systemctl reload fails and says why, and
# nothing changes.
cp /etc/tlsfront/tlsfront.toml "$dir/good.toml"
echo 'worker = 3' >>/etc/tlsfront/tlsfront.toml
reloads=$(grep -c "^reloaded " "$dir/log" || true)
check "systemctl reload fails on a broken config" test -n "$(reload || echo failed)"
check "and names the setting" grep -q "worker" "$dir/reload.log"
check "the refused config was not sent to the server" test "$(grep -c "^reloaded " "$dir/log")" -eq "$reloads"
cp "$dir/good.toml" /etc/tlsfront/tlsfront.toml
check "it still serves after the refused reload" test "$(get)" = "packaged hello"

# Upgrade (systemctl kill -s USR2 --kill-whom=main): a new parent starts on
# the same sockets, with its own server process as www-data, and takes the
# service (MAINPID=); the old one drains and exits 0.
kill -USR2 "$pid"
await grep -q "^upgraded: new process " "$dir/log" || true
new=$(sed -n 's/^upgraded: new process \([0-9]*\) .*/\1/p' "$dir/log" | tail -n1)
check "SIGUSR2 upgrades with the packaged config (user = www-data)" test -n "$new"
check "systemd hears MAINPID= of the new process" await grep -qx "MAINPID=${new:-x}" "$dir/notified"
st=0; wait "$pid" || st=$?
check "the old process exits 0" test "$st" -eq 0
pid=$new
check "the new parent is root" test "$(ps -o user= -p "${pid:-0}")" = root
check "the new process serves" test "$(get)" = "packaged hello"
# The new parent is no child of this shell: wait for it by its pid.
kill -TERM "$pid"
check "SIGTERM: it exits" await test ! -e "/proc/$pid"
pid=
wait "$listener" || true
check "systemd hears STOPPING=1" grep -qx STOPPING=1 "$dir/notified"
rm -f /var/www/html/tlsfront-package-test.txt /etc/tlsfront/package-test.*
# What operators expect around the binary: licences, man pages (gzipped by
# cargo-deb, rendered by man-db) and shell completions at Debian's paths.
check "the licences are installed" \
  test -s /usr/share/doc/tlsfront/LICENSE-APACHE -a -s /usr/share/doc/tlsfront/LICENSE-MIT
man_text=$(MANWIDTH=100 MANPAGER=cat man -l /usr/share/man/man1/tlsfront.1.gz 2>/dev/null || true)
check "man -l renders tlsfront(1), which names its subcommands" \
  grep -q "tlsfront-run(1)" <<<"$man_text"
check "each subcommand has its page" \
  test -s /usr/share/man/man1/tlsfront-run.1.gz -a -s /usr/share/man/man1/tlsfront-config-check.1.gz
check "bash, zsh and fish completions are installed" \
  test -s /usr/share/bash-completion/completions/tlsfront -a -s /usr/share/zsh/vendor-completions/_tlsfront \
  -a -s /usr/share/fish/vendor_completions.d/tlsfront.fish
check "bash -n accepts the installed bash completion" bash -n /usr/share/bash-completion/completions/tlsfront
check "tlsfront --version names the package version" \
  grep -q "^tlsfront $(dpkg-query -W -f='${Version}' tlsfront | sed 's/-.*//') (" <<<"$(tlsfront --version)"
check "dpkg --purge removes it" quiet dpkg --purge tlsfront
check "nothing of it is left" test ! -e /usr/bin/tlsfront -a ! -e /etc/tlsfront/tlsfront.toml
[[ -z ${made_logs:-} ]] || rm -rf /var/log/tlsfront
[[ $failed -eq 0 ]] || cat "$dir/log"
finish
