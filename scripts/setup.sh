#!/usr/bin/env bash
# setup.sh -- install what libdedup needs to build and test on Debian 12.
#
# Runs as root, non-interactively (no stdin needed), from any directory.
# Asks apt only for packages that are missing: on a machine that already
# has everything it installs nothing and does not touch the network.
set -euo pipefail

# Build: compiler, cmake, pkg-config and the libraries of DESIGN.md
# "Dependencies"; libfuse3-dev for `dedup mount`; libxxhash-dev, whose
# header alone a scan's fast block keys use (libdedup/hash/fastkey.h).  Tests: cmocka, zstd and
# python3 (data generators), clang (libFuzzer harnesses, sanitizers), fuse3
# (fusermount3) and e2fsprogs (mkfs.ext4 -d) for the mount test; time
# (/usr/bin/time) for the CPU time test_stream_bounds bounds.
# RADOS stores (issue #15): librados-dev to build them (-DDD_RADOS), and
# ceph-mon, ceph-osd, ceph-common for the one-node test cluster that
# tests/ceph/cluster.sh starts (ceph-common brings the `ceph` command,
# monmaptool and ceph-authtool).
PACKAGES=(
	build-essential cmake pkg-config
	libssl-dev libzstd-dev liblmdb-dev libcmocka-dev libfuse3-dev
	libxxhash-dev
	zstd python3 clang fuse3 e2fsprogs time
	librados-dev ceph-mon ceph-osd ceph-common
)

missing=()
for pkg in "${PACKAGES[@]}"; do
	status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
	if [ "$status" != "install ok installed" ]; then
		missing+=("$pkg")
	fi
done

if [ ${#missing[@]} -eq 0 ]; then
	echo "setup: all packages present" >&2
	exit 0
fi

echo "setup: installing ${missing[*]}" >&2

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
	if command -v sudo >/dev/null 2>&1; then
		SUDO=(sudo -n)
	else
		echo "setup: missing packages (${missing[*]}) and not root; run as root" >&2
		exit 1
	fi
fi

# Wait for a concurrent apt/dpkg (e.g. unattended-upgrades) instead of failing.
APT_OPTS=(-o DPkg::Lock::Timeout=600)
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
	apt-get "${APT_OPTS[@]}" update </dev/null
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
	apt-get "${APT_OPTS[@]}" install -y --no-install-recommends \
	"${missing[@]}" </dev/null
echo "setup: done" >&2
