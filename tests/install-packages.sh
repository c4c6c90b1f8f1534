#!/usr/bin/env bash
# tests/install-packages.sh — installs what tests/packages.txt lists and this
# machine lacks: Debian packages with apt-get (apt-get update first only if
# the install fails on stale lists), Python packages with pip, cargo
# subcommands with `cargo install --locked`, and Debian trixie packages this
# bookworm machine has too old (unpacked under target/, not installed) with
# tests/install-trixie-packages.sh. Idempotent: with everything present it
# only asks dpkg and exits.
# Usage: tests/install-packages.sh
set -euo pipefail
list=$(dirname "$0")/packages.txt

apt_missing=() pip_missing=() cargo_missing=() trixie=()
while read -r manager package programs; do
  case $manager in
    ''|'#'*) continue ;;
    apt)
      dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" ||
        apt_missing+=("$package") ;;
    pip)
      python3 -m pip show -q "${package%%[=<>]*}" >/dev/null 2>&1 || pip_missing+=("$package") ;;
    cargo)
      command -v "${package%%@*}" >/dev/null 2>&1 || cargo_missing+=("$package") ;;
    trixie)
      # shellcheck disable=SC2206 # the programs are words without blanks
      trixie+=("$package" $programs --) ;;
    *) echo "$list: unknown package manager '$manager' (apt, pip, cargo or trixie)" >&2; exit 2 ;;
  esac
done <"$list"

if ((${#apt_missing[@]})); then
  echo "installing (apt-get): ${apt_missing[*]}"
  [[ $(id -u) -eq 0 ]] || { echo "not root: install them by hand: apt-get install ${apt_missing[*]}" >&2; exit 1; }
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends "${apt_missing[@]}" >/dev/null 2>&1 || {
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${apt_missing[@]}"
  }
  # Debian starts packaged services: the tests run their own instances.
  for svc in nginx haproxy named etcd; do
    systemctl stop "$svc" >/dev/null 2>&1 || true
  done
fi
if ((${#pip_missing[@]})); then
  echo "installing (pip): ${pip_missing[*]}"
  python3 -m pip install -q --disable-pip-version-check "${pip_missing[@]}"
fi
if ((${#cargo_missing[@]})); then
  echo "installing (cargo install): ${cargo_missing[*]}"
  cargo install --locked --quiet "${cargo_missing[@]}"
fi
if ((${#trixie[@]})); then
  "$(dirname "$0")/install-trixie-packages.sh" "${trixie[@]}"
fi
