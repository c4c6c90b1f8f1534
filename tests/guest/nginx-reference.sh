#!/usr/bin/env bash
# tests/guest/nginx-reference.sh — reference check, run INSIDE the kTLS guest:
#   tests/guest/run.sh -- tests/guest/nginx-reference.sh
# Owns the proof that the guest set-up really does kernel TLS with a known-good
# server: Debian's nginx + OpenSSL 3.0 (`sendfile on`, `Options KTLS`) serve
# random files to curl over TLS 1.3 (AES-128/256-GCM) and TLS 1.2 (ECDHE-ECDSA
# AES128-GCM and CHACHA20-POLY1305). Each body's sha256 must match the file,
# TlsTxSw (/proc/net/tls_stat) must grow by exactly one per connection and
# TlsDecryptError must stay 0. Installs nothing: nginx, curl and openssl come
# from the host root (tests/guest/build.sh installs them on the host).
# Prints PASS/FAIL per case, then "N passed, M failed"; exits 1 on any failure.
# TLSFRONT_NGINX_PORT overrides the port (default 18443).
set -euo pipefail

port=${TLSFRONT_NGINX_PORT:-18443}
passed=0 failed=0
pass() { echo "PASS $*"; passed=$((passed + 1)); }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
summary() { echo "$passed passed, $failed failed"; }
fatal() { fail "$*"; summary; exit 1; }

# ---- preconditions
if [[ ! -r /proc/net/tls_stat ]]; then
  fatal "setup: /proc/net/tls_stat missing: this kernel has no kernel TLS loaded;" \
        "run me in the guest: tests/guest/run.sh -- tests/guest/nginx-reference.sh"
fi
PATH=$PATH:/usr/sbin:/sbin
for tool in nginx curl openssl sha256sum awk; do
  command -v "$tool" >/dev/null 2>&1 ||
    fatal "setup: '$tool' not found on the host root (run tests/guest/build.sh on the host to install it)"
done
[[ $port =~ ^[0-9]+$ ]] || fatal "setup: bad TLSFRONT_NGINX_PORT '$port'"

tls_stat() { awk -v k="$1" '$1 == k { print $2; found = 1 } END { if (!found) print -1 }' /proc/net/tls_stat; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/nginx-ktls.XXXXXX")
chmod 755 "$tmp"  # nginx workers run as nobody
nginx_pid=
# shellcheck disable=SC2317  # invoked by the trap
cleanup() {
  if [[ -n $nginx_pid ]] && kill -0 "$nginx_pid" 2>/dev/null; then
    kill -TERM "$nginx_pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$nginx_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$nginx_pid" 2>/dev/null || true
  fi
  rm -rf -- "$tmp"
}
trap cleanup EXIT

echo "nginx-reference: kernel $(uname -r), $(nginx -v 2>&1 | sed 's/^nginx version: //'), $(openssl version), $(curl --version | head -n1 | cut -d' ' -f1-2)"

# ---- certificate, content, configuration
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout "$tmp/key.pem" -out "$tmp/cert.pem" -days 2 -subj /CN=127.0.0.1 \
  -addext subjectAltName=IP:127.0.0.1 2>"$tmp/openssl.log" ||
  { cat "$tmp/openssl.log"; fatal "setup: openssl could not create the certificate"; }
mkdir -m 755 "$tmp/www"
head -c $((4 << 20)) /dev/urandom >"$tmp/www/4m.bin"
head -c $((1 << 20)) /dev/urandom >"$tmp/www/1m.bin"
chmod 644 "$tmp/www/"*.bin

cat >"$tmp/nginx.conf" <<CONF
user nobody nogroup;
worker_processes 1;
daemon off;
pid $tmp/nginx.pid;
error_log $tmp/error.log notice;
events { worker_connections 64; }
http {
    default_type application/octet-stream;
    log_format tls '\$remote_addr "\$request" \$status \$body_bytes_sent \$ssl_protocol \$ssl_cipher';
    access_log $tmp/access.log tls;
    client_body_temp_path $tmp/client_body;
    proxy_temp_path $tmp/proxy;
    fastcgi_temp_path $tmp/fastcgi;
    uwsgi_temp_path $tmp/uwsgi;
    scgi_temp_path $tmp/scgi;
    sendfile on;
    keepalive_timeout 0;
    server {
        listen 127.0.0.1:$port ssl;
        ssl_certificate $tmp/cert.pem;
        ssl_certificate_key $tmp/key.pem;
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_ciphers ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305;
        ssl_conf_command Options KTLS;
        root $tmp/www;
    }
}
CONF

nginx -p "$tmp" -c "$tmp/nginx.conf" -e "$tmp/error.log" &
nginx_pid=$!
ready=0
for _ in $(seq 100); do  # up to ~10 s; a plain TCP connect does no TLS handshake
  if ! kill -0 "$nginx_pid" 2>/dev/null; then break; fi
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then ready=1; break; fi
  sleep 0.1
done
if ((!ready)); then
  cat "$tmp/error.log" 2>/dev/null || true
  fatal "setup: nginx did not start listening on 127.0.0.1:$port"
fi

# ---- cases: "label|curl TLS options|expected 'SSL connection using' text"
cases=(
  "TLSv1.3 AES-128-GCM|--tlsv1.3 --tls-max 1.3 --tls13-ciphers TLS_AES_128_GCM_SHA256|TLSv1.3 / TLS_AES_128_GCM_SHA256"
  "TLSv1.3 AES-256-GCM|--tlsv1.3 --tls-max 1.3 --tls13-ciphers TLS_AES_256_GCM_SHA384|TLSv1.3 / TLS_AES_256_GCM_SHA384"
  "TLSv1.2 ECDHE-ECDSA-AES128-GCM-SHA256|--tlsv1.2 --tls-max 1.2 --ciphers ECDHE-ECDSA-AES128-GCM-SHA256|TLSv1.2 / ECDHE-ECDSA-AES128-GCM-SHA256"
  "TLSv1.2 ECDHE-ECDSA-CHACHA20-POLY1305|--tlsv1.2 --tls-max 1.2 --ciphers ECDHE-ECDSA-CHACHA20-POLY1305|TLSv1.2 / ECDHE-ECDSA-CHACHA20-POLY1305"
)
files=(4m.bin 1m.bin)

tx0=$(tls_stat TlsTxSw) rx0=$(tls_stat TlsRxSw) derr0=$(tls_stat TlsDecryptError)
echo "tls_stat before: TlsTxSw=$tx0 TlsRxSw=$rx0 TlsDecryptError=$derr0"
connections=0
for c in "${cases[@]}"; do
  IFS='|' read -r label opts expect <<<"$c"
  read -r -a curl_opts <<<"$opts"
  for f in "${files[@]}"; do
    name="$label $f"
    want=$(sha256sum "$tmp/www/$f" | cut -d' ' -f1)
    tx_a=$(tls_stat TlsTxSw) rx_a=$(tls_stat TlsRxSw)
    connections=$((connections + 1))
    rm -f "$tmp/body"
    if ! secs=$(curl -sS -v --fail --max-time 300 --cacert "$tmp/cert.pem" "${curl_opts[@]}" \
                  -o "$tmp/body" -w '%{time_total}' "https://127.0.0.1:$port/$f" 2>"$tmp/curl.log"); then
      fail "$name: curl failed: $(grep -v '^[*<>{}]' "$tmp/curl.log" | tail -n 3 | tr '\n' ' ')"
      continue
    fi
    tx_b=$(tls_stat TlsTxSw) rx_b=$(tls_stat TlsRxSw)
    got=$(sha256sum "$tmp/body" | cut -d' ' -f1)
    detail="TlsTxSw +$((tx_b - tx_a)), TlsRxSw +$((rx_b - rx_a)), ${secs}s"
    if ! grep -qF "SSL connection using $expect" "$tmp/curl.log"; then
      fail "$name: negotiated $(grep -o 'SSL connection using .*' "$tmp/curl.log" || echo '?'), expected $expect"
    elif [[ $got != "$want" ]]; then
      fail "$name: sha256 mismatch ($got != $want), $detail"
    elif ((tx_b - tx_a != 1)); then
      fail "$name: sha256 ok but TlsTxSw grew by $((tx_b - tx_a)), expected 1 (no kTLS TX?), $detail"
    else
      pass "$name: sha256 ok, $detail"
    fi
  done
done

tx1=$(tls_stat TlsTxSw) rx1=$(tls_stat TlsRxSw) derr1=$(tls_stat TlsDecryptError)
echo "tls_stat after:  TlsTxSw=$tx1 TlsRxSw=$rx1 TlsDecryptError=$derr1"
if ((tx1 - tx0 == connections)); then
  pass "TlsTxSw delta: +$((tx1 - tx0)) for $connections connections (TlsRxSw +$((rx1 - rx0)))"
else
  fail "TlsTxSw delta: +$((tx1 - tx0)), expected +$connections (one per connection)"
fi
if ((derr0 == 0 && derr1 == 0)); then
  pass "TlsDecryptError stayed 0"
else
  fail "TlsDecryptError: $derr0 -> $derr1, expected 0"
fi
if ((failed)); then
  echo "--- nginx error log:"
  tail -n 20 "$tmp/error.log" 2>/dev/null || true
  echo "--- nginx access log:"
  cat "$tmp/access.log" 2>/dev/null || true
fi
summary
((failed == 0))
