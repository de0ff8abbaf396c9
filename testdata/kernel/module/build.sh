#!/bin/sh
# Build ukit.ko for Debian's linux-image-6.1.0-57-cloud-arm64 with that kernel's compiler
# (gcc-12, aarch64-linux-gnu-gcc-12) against Debian's headers: linux-headers-6.1.0-57-cloud-arm64
# (arm64) and -common, with the host's kbuild scripts from linux-kbuild-6.1 (amd64), all
# extracted (dpkg-deb -x) under $KCAP/hdr, never installed.
#   KCAP=/work/kcap/drgn sh testdata/kernel/module/build.sh     -> $KCAP/module/ukit.ko
set -eu
here=$(cd "$(dirname "$0")" && pwd)
KCAP=${KCAP:-/work/kcap}
hdr=$KCAP/hdr
mkdir -p "$KCAP/debs" "$hdr"
cd "$KCAP/debs"
for p in linux-headers-6.1.0-57-cloud-arm64:arm64 linux-headers-6.1.0-57-common linux-kbuild-6.1:amd64; do
	ls "${p%%:*}"_*.deb >/dev/null 2>&1 || apt-get download "$p"
	[ -d "$hdr/usr/src/linux-headers-6.1.0-57-common" ] && [ -d "$hdr/usr/lib/linux-kbuild-6.1" ] &&
		[ -d "$hdr/usr/src/linux-headers-6.1.0-57-cloud-arm64" ] || dpkg-deb -x "$(ls "${p%%:*}"_*.deb)" "$hdr"
done
kb=$hdr/usr/src/linux-headers-6.1.0-57-cloud-arm64
# The arch package's Makefile includes the common one by its installed path.
sed -i "s#^include /usr/src/#include $hdr/usr/src/#" "$kb/Makefile"
out=$KCAP/module
rm -rf "$out"
mkdir -p "$out"
cp "$here/ukit.c" "$here/Kbuild" "$out/"
make -C "$kb" M="$out" ARCH=arm64 CROSS_COMPILE=aarch64-linux-gnu- modules
aarch64-linux-gnu-readelf -p .modinfo "$out/ukit.ko" | grep vermagic
