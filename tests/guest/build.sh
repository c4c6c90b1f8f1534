#!/usr/bin/env bash
# tests/guest/build.sh — builds (and caches) the QEMU test guest used to run
# tlsfront against real kernel TLS (the host kernel has no CONFIG_TLS).
#
# Owns everything under ${TLSFRONT_GUEST_DIR:-<repo>/target/ktls-guest}:
#   <kver>/*.deb                      Debian's kernel packages (apt-get download)
#   <kver>/vmlinux                    uncompressed ELF kernel (booted via PVH)
#   <kver>/initramfs.cpio             busybox + kTLS/9p/overlay modules + /init
#   <kver>/initramfs.stamp            hash of the inputs of initramfs.cpio
#   current-<kernel>.env              KVER/VMLINUX/INITRAMFS for run.sh
#   kernel-pkg-<kernel>.cache         resolved kernel package (per apt lists)
#   apt-<suite>/                      private apt lists for a suite this host
#                                     does not use (trixie-backports)
# It also installs the host packages the harness needs (QEMU, busybox-static,
# cpio, kmod, xz-utils, and the peers the guest uses from the host root)
# from tests/packages.txt, through tests/install-packages.sh.
#
# Idempotent: a second run only re-checks and finishes in well under a second.
# Environment:
#   TLSFRONT_GUEST_DIR         cache directory (default <repo>/target/ktls-guest)
#   TLSFRONT_GUEST_KERNEL      which kernel: bookworm (default: Debian 12's
#                              6.1, no kTLS rekey) or trixie-backports
#                              (Linux 7.x: TLS 1.3 rekey both ways), fetched
#                              through a private sources list
#   TLSFRONT_GUEST_KERNEL_PKG  kernel package to use instead of the one
#                              linux-image-amd64 depends on
# Usage: tests/guest/build.sh [--quiet]
set -euo pipefail

exec 1>&2  # nothing of ours belongs on stdout (run.sh streams the guest there)

script_dir=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd -- "$script_dir/../.." && pwd)
guest_dir=${TLSFRONT_GUEST_DIR:-$repo_root/target/ktls-guest}
kernel=${TLSFRONT_GUEST_KERNEL:-bookworm}
case $kernel in
  bookworm|trixie-backports) ;;
  *) echo "build.sh: TLSFRONT_GUEST_KERNEL must be bookworm or trixie-backports, not '$kernel'" >&2; exit 2 ;;
esac

quiet=0
case "${1:-}" in
  --quiet|-q) quiet=1 ;;
  "") ;;
  *) echo "usage: $0 [--quiet]" >&2; exit 2 ;;
esac

cleanup_paths=()
cleanup() { ((${#cleanup_paths[@]} == 0)) || rm -rf -- "${cleanup_paths[@]}"; }
trap cleanup EXIT

log() { ((quiet)) || echo "build.sh: $*" >&2; }
die() { echo "build.sh: ERROR: $*" >&2; exit 1; }

# Modules the guest needs: the shares/root first, then kernel TLS + crypto.
required_modules=(virtio_pci 9pnet_virtio 9p overlay tls)
# (6.1 and 7.x name the ChaCha20/Poly1305 pieces differently: each kernel
# has some of these, and a missing optional one is only a warning.)
# sch_netem: the delay bench/ktls's page loads put on lo.
optional_modules=(aesni_intel ghash_clmulni_intel gcm ccm ctr ghash_generic
  chacha20poly1305 chacha_x86_64 chacha_generic poly1305_x86_64
  poly1305_generic chacha libchacha libpoly1305 libchacha20poly1305 sch_netem)

# ---------------------------------------------------------------- host tools
# QEMU, busybox-static, cpio, kmod, xz-utils, and the peers the guest runs
# from the host root: all from the test command's one list.
ensure_host_packages() {
  "$repo_root/tests/install-packages.sh" >&2
}

# ---------------------------------------------------------------- kernel
# apt-get/apt-cache for the chosen suite: the host's own set-up for
# bookworm; for trixie-backports a private sources list and lists directory
# under the cache, so the host's apt configuration is never touched.
apt_opts=()
if [[ $kernel == trixie-backports ]]; then
  apt_dir=$guest_dir/apt-$kernel
  apt_opts=(-o "Dir::Etc::sourcelist=$apt_dir/sources.list" -o Dir::Etc::sourceparts=-
            -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
            -o Dir::State::status=/dev/null)
fi

# The private lists are fetched once a day at most.
refresh_private_lists() {
  [[ $kernel != bookworm ]] || return 0
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $kernel main" \
    >"$apt_dir/sources.list"
  if [[ -z $(find "$apt_dir/lists" -maxdepth 1 -name '*Packages*' -mtime -1 2>/dev/null) ]]; then
    log "apt-get update ($kernel lists, private to $apt_dir)"
    apt-get "${apt_opts[@]}" update -qq || die "apt-get update for $kernel failed"
  fi
}

resolve_kernel_pkg() {
  if [[ -n ${TLSFRONT_GUEST_KERNEL_PKG:-} ]]; then
    echo "$TLSFRONT_GUEST_KERNEL_PKG"; return
  fi
  # apt-cache takes ~1 s here (no pkgcache.bin): remember its answer until
  # the package lists change.
  local pkg lists_key cache=$guest_dir/kernel-pkg-$kernel.cache lists=/var/lib/apt/lists
  [[ $kernel == bookworm ]] || lists=$apt_dir/lists
  lists_key=$(stat -c %Y "$lists" 2>/dev/null || echo none)
  if [[ -f $cache ]]; then
    local key val
    read -r key val <"$cache" || true
    if [[ $key == "$lists_key" && -n ${val:-} ]]; then
      echo "$val"; return
    fi
  fi
  pkg=$(apt-cache "${apt_opts[@]}" depends linux-image-amd64 2>/dev/null |
        sed -n 's/^ *Depends: *\(linux-image-[0-9][^ ]*-amd64\) *$/\1/p' | head -n1)
  if [[ -z $pkg ]]; then
    pkg=$(apt-cache "${apt_opts[@]}" show linux-image-amd64 2>/dev/null |
          sed -n 's/^Depends:.*\(linux-image-[0-9][^ ,]*-amd64\).*/\1/p' | head -n1)
  fi
  [[ -z $pkg ]] || echo "$lists_key $pkg" >"$cache"
  echo "$pkg"
}

# The packages that hold a kernel and its modules: one for 6.1; since 6.16
# Debian splits them (linux-image-<kver> is an empty meta package).
kernel_debs() {
  local kver=$1
  case $kernel in
    bookworm) echo "linux-image-$kver" ;;
    *) echo "linux-binary-$kver linux-modules-$kver linux-base-$kver" ;;
  esac
}

# Extracts the ELF vmlinux from a bzImage whose payload is XZ- (6.1) or
# zstd-compressed (7.x).
extract_vmlinux() {
  local bzimage=$1 out=$2 off magic
  for magic in xz zstd; do
    local -a offsets=() decompress=()
    case $magic in
      xz) mapfile -t offsets < <(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$bzimage" | cut -d: -f1)
          decompress=(xz -dc --single-stream) ;;
      zstd) mapfile -t offsets < <(LC_ALL=C grep -obUaP '\x28\xb5\x2f\xfd' "$bzimage" | cut -d: -f1)
            decompress=(zstd -dcq) ;;
    esac
    for off in "${offsets[@]}"; do
      tail -c "+$((off + 1))" "$bzimage" | "${decompress[@]}" >"$out.part" 2>/dev/null || true
      if [[ -s $out.part && $(head -c4 "$out.part" | od -An -tx1 | tr -d ' \n') == 7f454c46 ]]; then
        mv -f "$out.part" "$out"
        return 0
      fi
    done
  done
  rm -f "$out.part"
  die "could not extract an ELF vmlinux from $bzimage"
}

# ---------------------------------------------------------------- initramfs
# /init of the guest. It reads run.sh's request from the writable share.
init_script() {
  cat <<'INIT'
#!/bin/sh
# /init of the tlsfront kTLS test guest (generated by tests/guest/build.sh).
# Mounts the host root (9p, read-only) under an overlay with a tmpfs upper,
# loads kTLS modules, marks /share/started, chroots and runs /share/cmd.sh
# (written by run.sh), writes its exit code to /share/rc and powers off.
PATH=/bin:/sbin:/usr/bin:/usr/sbin
export PATH
mount -t devtmpfs devtmpfs /dev 2>/dev/null
exec </dev/console >/dev/console 2>&1
stty -onlcr 2>/dev/null
mount -t proc proc /proc
mount -t sysfs sysfs /sys
verbose=0

say() { echo "guest: $*"; }
halt_guest() {
  sync
  poweroff -f
  reboot -f
  exit 1
}
die() {
  say "FATAL: $*"
  [ -d /share/. ] && echo 125 >/share/rc 2>/dev/null
  halt_guest
}

for m in virtio_pci 9pnet_virtio 9p overlay; do
  modprobe "$m" || die "modprobe $m failed"
done
o9p=trans=virtio,version=9p2000.L,msize=262144
mount -t 9p -o "$o9p,cache=none" guestshare /share || die "cannot mount the result share"
[ -f /share/guest.conf ] && . /share/guest.conf
mount -t 9p -o "$o9p,cache=loose,ro" hostroot /lower || die "cannot mount the host root"
mount -t tmpfs -o mode=0755 tmpfs /rw || die "tmpfs"
mkdir -p /rw/upper /rw/work
mount -t overlay overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work /newroot ||
  die "cannot mount the overlay root"
R=/newroot
mount -t proc proc "$R/proc" || die "proc"
mount -t sysfs sysfs "$R/sys" || die "sysfs"
mount -t devtmpfs devtmpfs "$R/dev" || die "devtmpfs"
mkdir -p "$R/dev/pts" "$R/dev/shm"
# What udev would make: /dev/fd and /dev/std{in,out,err} (curl -o /dev/stderr).
ln -sf /proc/self/fd "$R/dev/fd"
ln -sf /proc/self/fd/0 "$R/dev/stdin"
ln -sf /proc/self/fd/1 "$R/dev/stdout"
ln -sf /proc/self/fd/2 "$R/dev/stderr"
mount -t devpts -o gid=5,mode=0620,ptmxmode=0666 devpts "$R/dev/pts" || die "devpts"
mount -t tmpfs -o mode=1777 tmpfs "$R/dev/shm" || die "/dev/shm"
mount -t tmpfs -o mode=0755 tmpfs "$R/run" || die "/run"
mkdir -p "$R/run/tlsfront-guest"
mount -o bind /share "$R/run/tlsfront-guest" || die "bind share"

ip link set lo up || say "WARNING: ip link set lo up failed"
hostname tlsfront-guest 2>/dev/null
missing=
# The kTLS and cipher modules this kernel has (build.sh lists them).
for m in $(cat /etc/ktls-modules); do
  modprobe "$m" 2>/dev/null || missing="$missing $m"
done
[ -z "$missing" ] || say "WARNING: could not load module(s):$missing"
if [ "$verbose" = 1 ]; then
  read -r up _ </proc/uptime
  say "kernel $(uname -r), ready after ${up}s uptime; running the command"
fi

cd /
# From here on a failure belongs to CMD: run.sh boots again only when the
# guest died before this mark (a kernel that crashed while booting).
: >/share/started
chroot "$R" /bin/bash /run/tlsfront-guest/cmd.sh </dev/null
rc=$?
echo "$rc" >/share/rc
if [ "$verbose" = 1 ]; then
  read -r up _ </proc/uptime
  say "command exited $rc at ${up}s uptime"
fi
halt_guest
INIT
}

build_initramfs() {
  local kver=$1 moddir=$2 out=$3 stamp_value=$4
  [[ -d $moddir/kernel ]] || die "no modules in $moddir"

  local -A ko_path=() builtin=() seen=()
  local f base name rel
  while IFS= read -r -d '' f; do
    rel=${f#"$moddir/"} base=${f##*/}
    name=${base%%.ko*}
    ko_path[${name//-/_}]=$rel
  done < <(find "$moddir/kernel" -name '*.ko*' -print0)
  if [[ -f $moddir/modules.builtin ]]; then
    while IFS= read -r f; do
      base=${f##*/} name=${base%%.ko*}
      builtin[${name//-/_}]=1
    done <"$moddir/modules.builtin"
  fi

  local -a selected=()
  resolve_module() {  # $1=name $2=required(1/0)
    local n=${1//-/_} req=$2 deps d
    [[ -z ${seen[$n]:-} ]] || return 0
    seen[$n]=1
    [[ -z ${builtin[$n]:-} ]] || return 0
    if [[ -z ${ko_path[$n]:-} ]]; then
      ((req)) && die "module $n not found in $kver"
      log "WARNING: optional module $n not found in $kver"
      return 0
    fi
    deps=$(modinfo -F depends "$moddir/${ko_path[$n]}")
    local -a dl=()
    IFS=, read -r -a dl <<<"$deps"
    for d in "${dl[@]}"; do
      [[ -z $d ]] || resolve_module "$d" 1
    done
    selected+=("${ko_path[$n]}")
  }
  local m
  local -a ktls_modules=()
  for m in "${required_modules[@]}"; do resolve_module "$m" 1; done
  for m in "${optional_modules[@]}"; do
    resolve_module "$m" 0
    [[ -z ${ko_path[${m//-/_}]:-} ]] || ktls_modules+=("$m")
  done

  local stage
  stage=$(mktemp -d "$guest_dir/.initramfs.XXXXXX")
  cleanup_paths+=("$stage")
  mkdir -p "$stage"/{bin,sbin,usr/bin,usr/sbin,dev,proc,sys,tmp,run,lower,share,rw,newroot,etc}
  mkdir -p "$stage/lib/modules/$kver"
  cp /bin/busybox "$stage/bin/busybox"
  local applet
  while IFS= read -r applet; do
    [[ -n $applet && ! -e $stage/$applet ]] || continue
    mkdir -p "$stage/$(dirname -- "$applet")"
    ln -s /bin/busybox "$stage/$applet"
  done < <("$stage/bin/busybox" --list-full)
  [[ -L $stage/sbin/modprobe ]] || die "busybox has no modprobe applet"

  for rel in "${selected[@]}"; do
    mkdir -p "$stage/lib/modules/$kver/$(dirname -- "$rel")"
    case $rel in
      *.ko) cp "$moddir/$rel" "$stage/lib/modules/$kver/$rel" ;;
      *.ko.xz) xz -dc "$moddir/$rel" >"$stage/lib/modules/$kver/${rel%.xz}" ;;
      *.ko.zst) zstd -dcq "$moddir/$rel" >"$stage/lib/modules/$kver/${rel%.zst}" ;;
      *.ko.gz) gzip -dc "$moddir/$rel" >"$stage/lib/modules/$kver/${rel%.gz}" ;;
      *) die "unknown module format: $rel" ;;
    esac
  done
  for f in modules.builtin modules.builtin.modinfo modules.order; do
    [[ ! -f $moddir/$f ]] || cp "$moddir/$f" "$stage/lib/modules/$kver/"
  done
  depmod -b "$stage" "$kver"

  printf '%s\n' tls "${ktls_modules[@]}" >"$stage/etc/ktls-modules"
  init_script >"$stage/init"
  chmod 0755 "$stage/init"
  if [[ $(id -u) -eq 0 ]]; then
    mknod -m 0600 "$stage/dev/console" c 5 1
    mknod -m 0666 "$stage/dev/null" c 1 3
  fi

  (cd "$stage" && find . -print0 | LC_ALL=C sort -z |
     cpio --null --quiet -o -H newc -R 0:0 --reproducible) >"$out.part"
  mv -f "$out.part" "$out"
  echo "$stamp_value" >"$out.stamp.part"
  mv -f "$out.stamp.part" "${out%.cpio}.stamp"
  log "initramfs: ${#selected[@]} modules, $(du -k "$out" | cut -f1) KiB"
  rm -rf -- "$stage"
}

# ---------------------------------------------------------------- main
main() {
  ensure_host_packages
  mkdir -p "$guest_dir"
  exec 9>"$guest_dir/.lock"
  flock -w 1800 9 || die "timed out waiting for the lock on $guest_dir"
  local envpath=$guest_dir/current-$kernel.env
  refresh_private_lists

  local pkg kver kdir
  pkg=$(resolve_kernel_pkg)
  if [[ -z $pkg ]]; then
    if [[ -f $envpath ]]; then
      log "WARNING: cannot resolve the $kernel kernel package; using the cached one"
      return 0
    fi
    die "cannot resolve the kernel package linux-image-amd64 depends on in $kernel (apt-get update?)"
  fi
  kver=${pkg#linux-image-}
  kdir=$guest_dir/$kver
  mkdir -p "$kdir"

  local stamp_value
  stamp_value=$( { init_script; declare -p required_modules optional_modules
                   busybox 2>&1 | head -n1; echo "$kver"; } | sha256sum | cut -d' ' -f1)

  local need_kernel=0 need_initramfs=0
  [[ -s $kdir/vmlinux ]] || need_kernel=1
  if [[ ! -s $kdir/initramfs.cpio || ! -f $kdir/initramfs.stamp ||
        $(<"$kdir/initramfs.stamp") != "$stamp_value" ]]; then
    need_initramfs=1
  fi

  if ((need_kernel || need_initramfs)); then
    local tree deb p
    tree=$(mktemp -d "$guest_dir/.extract.XXXXXX")
    cleanup_paths+=("$tree")
    for p in $(kernel_debs "$kver"); do
      deb=$(find "$kdir" -maxdepth 1 -name "${p}_*.deb" | head -n1)
      if [[ -z $deb ]]; then
        log "downloading $p"
        (cd "$kdir" && apt-get "${apt_opts[@]}" download -o APT::Sandbox::User=root "$p") ||
          die "apt-get download $p failed"
        deb=$(find "$kdir" -maxdepth 1 -name "${p}_*.deb" | head -n1)
        [[ -n $deb ]] || die "apt-get download produced no ${p}_*.deb"
      fi
      log "extracting $(basename -- "$deb")"
      dpkg-deb -x "$deb" "$tree"
    done
    # Modules under /lib (6.1) or /usr/lib (merged /usr, 7.x); the kernel
    # in /boot or beside them.
    local moddir vmlinuz
    for moddir in "$tree/lib/modules/$kver" "$tree/usr/lib/modules/$kver" ""; do
      [[ -z $moddir || ! -d $moddir/kernel ]] || break
    done
    [[ -n $moddir ]] || die "the $kver packages have no modules directory"
    for vmlinuz in "$tree/boot/vmlinuz-$kver" "$moddir/vmlinuz" ""; do
      [[ -z $vmlinuz || ! -f $vmlinuz ]] || break
    done
    [[ -n $vmlinuz ]] || die "the $kver packages have no vmlinuz"
    if ((need_kernel)); then
      log "extracting vmlinux from $(basename -- "$vmlinuz")"
      extract_vmlinux "$vmlinuz" "$kdir/vmlinux"
    fi
    if ((need_initramfs)); then
      log "building initramfs"
      build_initramfs "$kver" "$moddir" "$kdir/initramfs.cpio" "$stamp_value"
    fi
    rm -rf -- "$tree"
  fi

  local envfile
  envfile=$(printf 'KVER=%q\nVMLINUX=%q\nINITRAMFS=%q\n' \
            "$kver" "$kdir/vmlinux" "$kdir/initramfs.cpio")
  if [[ ! -f $envpath || $(<"$envpath") != "$envfile" ]]; then
    echo "$envfile" >"$envpath.part"
    mv -f "$envpath.part" "$envpath"
  fi
  log "ready: kernel $kver in $kdir"
}

main "$@"
