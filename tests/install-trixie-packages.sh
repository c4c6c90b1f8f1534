#!/usr/bin/env bash
# tests/install-trixie-packages.sh — fetches Debian trixie packages this
# (bookworm) machine does not have in a version the tests need, and unpacks
# them under the cache directory without installing them: nothing of the
# host's apt configuration or dpkg database is touched. The way
# tests/guest/build.sh fetches the trixie kernel: a private sources list and
# lists directory, `apt-get download`, `dpkg-deb -x`.
#
# tests/install-packages.sh calls it with the `trixie` lines of
# tests/packages.txt (PACKAGE PROGRAM...). Each PROGRAM is a path relative
# to the repository (under target/trixie-packages/root/), the way the tests
# name it; a package whose programs are all there is not fetched again.
# Today that is pebble 2.6 for tests/acme.rs: bookworm's pebble 2.4 has no
# ACME Renewal Information (RFC 9773), trixie's has; and HAProxy 3.0 with
# the libraries it needs, for tests/client_certs.rs: bookworm's 2.6 cannot
# read a received PROXY v2 TLV (`fc_pp_tlv` came in 2.9).
#
# Cache (TLSFRONT_TRIXIE_DIR, default <repo>/target/trixie-packages):
#   apt/       private sources list, lists (refreshed at most once a day),
#              downloaded .debs
#   root/      the packages' files, unpacked
# Usage: tests/install-trixie-packages.sh PACKAGE PROGRAM... [-- PACKAGE PROGRAM...]...
set -euo pipefail

repo_root=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
cache=${TLSFRONT_TRIXIE_DIR:-$repo_root/target/trixie-packages}
apt_dir=$cache/apt
root=$cache/root

die() { echo "install-trixie-packages.sh: $*" >&2; exit 1; }

# The packages to fetch: those with a program missing.
missing=()
while (($#)); do
  package=$1; shift
  have=1
  while (($#)) && [[ $1 != -- ]]; do
    [[ -x $repo_root/$1 ]] || have=0
    shift
  done
  (($#)) && shift  # the --
  ((have)) || missing+=("$package")
done
((${#missing[@]})) || exit 0

echo "fetching from Debian trixie (unpacked into $root, not installed): ${missing[*]}"
apt_opts=(-o "Dir::Etc::sourcelist=$apt_dir/sources.list" -o Dir::Etc::sourceparts=-
          -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
          -o Dir::State::status=/dev/null)
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/debs" "$root"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" \
  >"$apt_dir/sources.list"
if [[ -z $(find "$apt_dir/lists" -maxdepth 1 -name '*Packages*' -mtime -1 2>/dev/null) ]]; then
  apt-get "${apt_opts[@]}" update -qq || die "apt-get update for trixie failed"
fi
# A line's PACKAGE may be several, comma-separated: a program and the
# trixie libraries it needs beside bookworm's (run through trixie's own
# ld.so, see tests/common/peers.rs).
for line in "${missing[@]}"; do
  IFS=, read -ra parts <<<"$line"
  for package in "${parts[@]}"; do
    rm -f "$apt_dir/debs/${package}"_*.deb
    (cd "$apt_dir/debs" && apt-get "${apt_opts[@]}" download -qq "$package") ||
      die "apt-get download $package (trixie) failed"
    deb=$(ls "$apt_dir/debs/${package}"_*.deb 2>/dev/null | head -n1)
    [[ -n $deb ]] || die "apt-get download $package left no .deb in $apt_dir/debs"
    dpkg-deb -x "$deb" "$root" || die "dpkg-deb -x $deb failed"
    echo "  $(basename "$deb") unpacked"
  done
done
