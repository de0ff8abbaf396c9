#!/bin/sh
# kcore.sh makes real Linux core files of the GCS test program: Debian
# sid's 7.2 arm64 kernel boots under the sid tree's qemu-system-aarch64
# (-cpu max has FEAT_GCS), runs src/ built with -DGCS_CRASH (every
# scenario faults at its capture point instead of stopping for gdb) with
# GCS enabled, and sends each core back over the serial console (gzip +
# base64). The cores are trimmed by testdata/cores/gen -gcs into cores/SCENARIO.core.gz
# with cores/manifest.txt; cores/gcs-core.sym.gz is the executable's
# symbol table (code and debug information dropped). It runs outside CI:
# it needs the sid tree (see capture.sh), Go on the host, a network the
# first time (the kernel packages) and a few minutes of TCG:
#
#   sh testdata/arm64/gcs/kcore.sh /path/to/sid [WORKDIR]
#
# WORKDIR (default /work/kcap/gcscore) keeps the downloads, the raw
# console and the untrimmed cores; none of it goes into git. The kernel
# packages are downloaded from inside the tree into WORKDIR/debs, so
# WORKDIR must be visible at the same path there (here /work is
# bind-mounted into the tree).
set -eu

sid=${1:?usage: kcore.sh SID_TREE [WORKDIR]}
sid=$(cd "$sid" && pwd)
kc=${2:-/work/kcap/gcscore}
mkdir -p "$kc"
kc=$(cd "$kc" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
BUSYBOX=${BUSYBOX:-/work/kcap/bb/bin/busybox} # a static arm64 busybox (busybox-static:arm64)
pkg=linux-binary-unsigned-7.2.13+deb14-cloud-arm64
kver=7.2.13+deb14-cloud-arm64
for t in "$sid/usr/bin/qemu-system-aarch64" "$sid/usr/bin/aarch64-linux-gnu-gcc" "$sid/usr/bin/gdb-multiarch" "$BUSYBOX"; do
	[ -x "$t" ] || { echo "kcore.sh: $t not found" >&2; exit 1; }
done
command -v go >/dev/null || { echo "kcore.sh: go not found" >&2; exit 1; }
t0=$(date +%s)

# --- the kernel: sid's cloud image and its config, through an apt state of
# its own (the tree's dpkg architectures and lists are left alone) --------
sa=$kc/apt
kdir=$kc/k
if [ ! -f "$kdir/usr/lib/modules/$kver/vmlinuz.unsigned" ]; then
	mkdir -p "$sa/state/lists/partial" "$sa/cache/archives/partial" "$kc/debs" "$kdir"
	touch "$sa/state/status"
	echo 'deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian sid main' >"$sa/sources.list"
	# one line: it is also pasted into the sh -c command below
	O="-o Dir::State=$sa/state -o Dir::State::status=$sa/state/status -o Dir::Cache=$sa/cache"
	O="$O -o Dir::Etc::SourceList=$sa/sources.list -o Dir::Etc::SourceParts=/dev/null"
	O="$O -o APT::Architecture=arm64 -o APT::Architectures::=arm64"
	# shellcheck disable=SC2086
	flock /tmp/apt.lock chroot "$sid" apt-get $O update
	# shellcheck disable=SC2086
	chroot "$sid" sh -c "cd '$kc/debs' && apt-get $O download $pkg linux-base-$kver"
	for d in "$kc"/debs/*.deb; do dpkg-deb -x "$d" "$kdir"; done
fi
image=$kdir/usr/lib/modules/$kver/vmlinuz.unsigned
grep -q '^CONFIG_ARM64_GCS=y' "$kdir/usr/lib/modules/$kver/config" || { echo "kcore.sh: kernel without CONFIG_ARM64_GCS" >&2; exit 1; }

# --- the program: capture.sh's build, with -DGCS_CRASH ---------------------
work=$sid/gcs-kcore # the chroot sees it as /gcs-kcore
rm -rf "$work"
mkdir -p "$work/root/bin" "$work/root/proc" "$work/root/dev" "$work/root/tmp"
cp "$here"/src/* "$work/"
CFLAGS="-O2 -g -ffixed-x18 -fno-omit-frame-pointer -fno-optimize-sibling-calls -mbranch-protection=gcs -Wall -Werror -DGCS_CRASH"
chroot "$sid" sh -euc "cd /gcs-kcore
C='$CFLAGS -fdebug-prefix-map=/gcs-kcore=testdata/arm64/gcs/src'
aarch64-linux-gnu-gcc \$C -c gcsrt.c -o gcsrt.o
aarch64-linux-gnu-gcc \$C -fsanitize=shadow-call-stack -c gcs.c -o gcs.o
aarch64-linux-gnu-gcc \$C -fsanitize=shadow-call-stack -momit-leaf-frame-pointer -c gcs-leaf.c -o gcs-leaf.o
aarch64-linux-gnu-gcc -c noframe.S -o noframe.o
aarch64-linux-gnu-gcc -static -Wl,--build-id=none -o gcs-core.elf gcsrt.o gcs.o gcs-leaf.o noframe.o
aarch64-linux-gnu-readelf -n gcs-core.elf | grep -q 'AArch64 feature: GCS'
# the symbol table alone: what the unwinder names frames with
aarch64-linux-gnu-objcopy --only-keep-debug gcs-core.elf gcs-core.dbg
aarch64-linux-gnu-objcopy --strip-debug gcs-core.dbg gcs-core.sym"
gcc_ver="aarch64-linux-gnu-gcc $(chroot "$sid" aarch64-linux-gnu-gcc -dumpfullversion) (glibc $(chroot "$sid" dpkg-query -W -f '${Version}' libc6-dev-arm64-cross), static) $CFLAGS"
qemu_ver=$(chroot "$sid" qemu-system-aarch64 --version | head -1)
gdb_ver=$(chroot "$sid" gdb-multiarch --version | head -1)

# --- the guest ---------------------------------------------------------------
SCENARIOS="chain leaf noframe recurse signal longjmp thread deep"
cp "$BUSYBOX" "$work/root/bin/busybox"
cp "$work/gcs-core.elf" "$work/root/gcs"
mknod "$work/root/dev/console" c 5 1
cat >"$work/root/init" <<EOF
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t devtmpfs dev /dev
echo "@@UNAME \$(uname -a)"
echo "@@HWCAP \$(grep -m1 Features /proc/cpuinfo)"
echo 0 > /proc/sys/kernel/randomize_va_space
echo '/tmp/core.%p' > /proc/sys/kernel/core_pattern
ulimit -c unlimited
cd /tmp
for sc in $SCENARIOS; do
	s=8192
	[ \$sc = deep ] && s=64 # a 32 KiB GCS (RLIMIT_STACK / 2) for the overflow
	(ulimit -s \$s; exec env -i GLIBC_TUNABLES=glibc.cpu.aarch64_gcs=1 /gcs \$sc)
	echo "@@EXIT \$sc \$?"
	for c in /tmp/core.*; do [ -e "\$c" ] && mv "\$c" /tmp/\$sc.core; done
	[ -e /tmp/\$sc.core ] || { echo "@@NOCORE \$sc"; continue; }
	echo "@@BEGIN \$sc \$(wc -c < /tmp/\$sc.core)"; gzip -9 -c /tmp/\$sc.core | base64; echo "@@END \$sc"
	rm -f /tmp/\$sc.core
done
echo "@@END-OF-CAPTURE"
poweroff -f
EOF
chmod +x "$work/root/init"
(cd "$work/root" && find . | cpio -o -H newc --quiet | gzip -9 >"$work/initrd.gz")
cp "$image" "$work/Image"

raw=$kc/raw
rm -rf "$raw"
mkdir -p "$raw"
append="console=ttyAMA0 rdinit=/init panic=-1"
qemu="qemu-system-aarch64 -M virt -cpu max -smp 1 -m 512 -display none -no-reboot -monitor none -serial stdio -kernel /gcs-kcore/Image -initrd /gcs-kcore/initrd.gz"
echo "kcore.sh: booting $image"
# shellcheck disable=SC2086
timeout 1800 nice -n 10 chroot "$sid" $qemu -append "$append" </dev/null >"$raw/console.raw"
t_boot=$(date +%s)
tr -d '\r' <"$raw/console.raw" >"$raw/console.txt"
grep -q '^@@END-OF-CAPTURE' "$raw/console.txt" || { tail -30 "$raw/console.txt" >&2; exit 1; }
for sc in $SCENARIOS; do
	sed -n "/^@@BEGIN $sc /,/^@@END $sc\$/p" "$raw/console.txt" | sed '1d;$d' | base64 -d >"$raw/$sc.core.gz"
	gzip -dc "$raw/$sc.core.gz" >"$raw/$sc.core"
	n=$(sed -n "s/^@@BEGIN $sc //p" "$raw/console.txt")
	[ "$(wc -c <"$raw/$sc.core")" = "$n" ] || { echo "kcore.sh: $sc: core of $(wc -c <"$raw/$sc.core") bytes, the guest said $n" >&2; exit 1; }
done

# --- what the sid tree's tools see: readelf's notes, gdb on the cores -------
cp "$work/gcs-core.elf" "$raw/"
for sc in $SCENARIOS; do
	cp "$raw/$sc.core" "$work/$sc.core"
	chroot "$sid" aarch64-linux-gnu-readelf -n -l "/gcs-kcore/$sc.core" >"$raw/$sc.readelf.txt"
	chroot "$sid" timeout 120 gdb-multiarch -nx -batch -ex "set pagination off" -ex "set backtrace past-main on" \
		-ex "file /gcs-kcore/gcs-core.elf" -ex "core-file /gcs-kcore/$sc.core" \
		-ex 'info registers pc sp x30 gcspr' -ex 'p/x $gcspr' -ex 'info threads' -ex 'bt' >"$raw/$sc.gdb.txt" 2>&1 || true
done

# --- the shipped files ----------------------------------------------------------
out=$here/cores
mkdir -p "$out"
rm -f "$out"/*.core.gz "$out"/*.gdb.txt
gzip -9 -n -c "$work/gcs-core.sym" >"$out/gcs-core.sym.gz"
for sc in $SCENARIOS; do
	(cd "$root" && go run ./testdata/cores/gen -gcs "$raw/$sc.core" "$out/$sc.core.gz")
	sed -e 's|/gcs-kcore/|testdata/arm64/gcs/|' "$raw/$sc.gdb.txt" >"$out/$sc.gdb.txt"
done
{
	echo "kcore.sh: real Linux cores of the GCS test program (src/, -DGCS_CRASH)"
	echo "date: $(date -u +%FT%TZ)"
	echo "kernel-package: $pkg $(dpkg-deb -f "$kc"/debs/linux-binary-unsigned-*.deb Version)"
	echo "image: usr/lib/modules/$kver/vmlinuz.unsigned (sha256 $(sha256sum "$image" | cut -c1-64)), $(grep '^CONFIG_ARM64_GCS=' "$kdir/usr/lib/modules/$kver/config")"
	echo "uname: $(sed -n 's/^@@UNAME //p' "$raw/console.txt")"
	echo "cpuinfo: $(sed -n 's/^@@HWCAP //p' "$raw/console.txt")"
	echo "qemu: $qemu_ver: $qemu -append '$append' (TCG, nice -n 10)"
	echo "compiler: $gcc_ver"
	echo "gdb: $gdb_ver"
	echo "busybox: $(sha256sum "$BUSYBOX" | cut -c1-64) (static arm64)"
	echo "run: ulimit -c unlimited; core_pattern /tmp/core.%p; randomize_va_space 0;" \
		"(ulimit -s 8192 (deep: 64); env -i GLIBC_TUNABLES=glibc.cpu.aarch64_gcs=1 /gcs SCENARIO)"
	for sc in $SCENARIOS; do
		echo "core $sc: $(sed -n "s/^@@EXIT $sc //p" "$raw/console.txt" | head -1) exit status," \
			"$(wc -c <"$raw/$sc.core") bytes (sha256 $(sha256sum "$raw/$sc.core" | cut -c1-64)), trimmed $(gzip -dc "$out/$sc.core.gz" | wc -c) bytes," \
			"$(grep -c 'type: (0x00000410)' "$raw/$sc.readelf.txt") NT_ARM_GCS notes (readelf: Unknown note type 0x410)"
	done
	echo "time-boot-and-run-s: $((t_boot - t0))"
	echo "time-total-s: $(($(date +%s) - t0))"
} >"$out/manifest.txt"
rm -rf "$work"
cat "$out/manifest.txt"
