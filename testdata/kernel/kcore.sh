#!/bin/sh
# Boot Debian's arm64 cloud kernel under qemu-system-aarch64 and hold a live unwind of every
# task against the kernel's own /proc/PID/stack (issue 28):
#
#   sh testdata/kernel/kcore.sh 6.1     # linux-image-6.1.0-57-cloud-arm64
#   sh testdata/kernel/kcore.sh 6.12    # linux-image-6.12.117+deb12-cloud-arm64-unsigned
#   sh testdata/kernel/kcore.sh scs-6.12-percpu
#                                       # the SCS kernel of build-scs.sh (SCS_SUFFIX=-kcore, with
#                                       # scs-6.12-kcore.config) from $SCSKCAP/scs/ (default
#                                       # /work/kcap): no package, no modules, no network
#   UNWINDDUMP=1 OUT=/tmp/x ROUNDS=1 PER=5 sh testdata/kernel/kcore.sh 6.12
#                                       # also runs `unwinddump -tasks /proc/kcore` in the guest at
#                                       # the end (unwinddump.txt.gz), outputs into OUT
#
# The initramfs holds busybox-static:arm64, the tun module of the kernel package and
# kcoreguest (testdata/kernel/kcoreguest, built static for arm64). /init loads tun, starts
# `taskset 1 dd if=/dev/zero of=/dev/null bs=1M` (CPU0 busy in the kernel) and runs kcoreguest on
# CPU1: hundreds of blocked threads, then rounds of walks of every task from /proc/kcore, each
# followed by its /proc/PID/stack, the last round over frozen memory whose pages it writes out.
# The results, the snapshot and the symbols come back over the console (gzip, base64).
#
# Outputs:
#   $KCAP/kcore-NAME/                 console.raw, initrd.gz -- never in git
#   testdata/kernel/kcore-NAME/       results.json.gz, snapshot.kcore.gz, ksyms.txt.gz,
#                                     console.log (blobs replaced by their size), manifest.txt
# CI never runs this (it needs minutes of TCG and a network); the outputs are committed and
# checked by TestKcoreResults (unwind/kernel).
set -eu
ver=${1:?usage: kcore.sh 6.1|6.12|scs-6.12-percpu}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
KCAP=${KCAP:-/work/kcap/kcore}
MEM=${MEM:-1024}
ROUNDS=${ROUNDS:-4}
PER=${PER:-20}
t0=$(date +%s)
pkg= guestflags=
case $ver in
6.1) pkg=linux-image-6.1.0-57-cloud-arm64 kver=6.1.0-57-cloud-arm64 ;;
6.12) pkg=linux-image-6.12.117+deb12-cloud-arm64-unsigned kver=6.12.117+deb12-cloud-arm64 ;;
# No shipped capture has this build's BTF: the snapshot round reads it again into the snapshot.
scs-6.12-percpu) image=${SCSKCAP:-/work/kcap}/scs/scs-6.12-percpu-kcore/Image guestflags=-snapshot-btf ;;
*) echo "unknown kernel $ver" >&2; exit 2 ;;
esac
name=kcore-${ver%-percpu}
cap=$KCAP/$name
out=${OUT:-$here/$name}
mkdir -p "$KCAP/debs" "$cap" "$out"

# --- packages (as capture.sh) ----------------------------------------------------------------
debof() {
	for f in "$KCAP"/debs/*_arm64.deb; do
		case ${f##*/} in "$1"_*) echo "$f"; return 0 ;; esac
	done
	return 1
}
fetch() { debof "$1" >/dev/null || (cd "$KCAP/debs" && apt-get download "$1:arm64"); }
fetch busybox-static
bb=$KCAP/bb
[ -x "$bb/bin/busybox" ] || dpkg-deb -x "$(debof busybox-static)" "$bb"
tun=
if [ -n "$pkg" ]; then
	fetch "$pkg"
	kdir=$KCAP/kernels/$ver
	[ -d "$kdir/boot" ] || { mkdir -p "$kdir"; dpkg-deb -x "$(debof "$pkg")" "$kdir"; }
	image=$kdir/boot/vmlinuz-$kver
	tun=$(find "$kdir/lib/modules/$kver" -name 'tun.ko*' | head -1)
fi

# --- initramfs -----------------------------------------------------------------------------------
(cd "$repo" && GOOS=linux GOARCH=arm64 CGO_ENABLED=0 go build -trimpath -o "$cap/kcoreguest" ./testdata/kernel/kcoreguest)
[ -z "${UNWINDDUMP:-}" ] || (cd "$repo" && GOOS=linux GOARCH=arm64 CGO_ENABLED=0 go build -trimpath -o "$cap/unwinddump" ./examples/unwinddump)
root=$cap/root
rm -rf "$root"
mkdir -p "$root/bin" "$root/proc" "$root/sys" "$root/dev" "$root/tmp"
cp "$bb/bin/busybox" "$root/bin/busybox"
cp "$cap/kcoreguest" "$root/kcoreguest"
[ -z "${UNWINDDUMP:-}" ] || cp "$cap/unwinddump" "$root/unwinddump"
case $tun in
*.xz) xz -dc "$tun" >"$root/tun.ko" ;;
?*) cp "$tun" "$root/tun.ko" ;;
esac
cat >"$root/init" <<EOF
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
[ -e /tun.ko ] && insmod /tun.ko
echo 0 > /proc/sys/kernel/kptr_restrict
echo 1 > /proc/sys/kernel/printk
echo "@@UNAME \$(uname -a)"
echo "@@CMDLINE \$(cat /proc/cmdline)"
echo "@@MODULES \$(cat /proc/modules 2>/dev/null | cut -d' ' -f1 | tr '\n' ' ')"
taskset 1 dd if=/dev/zero of=/dev/null bs=1M &
ulimit -s 1024
taskset 2 /kcoreguest -name $name -rounds $ROUNDS -per-chain $PER $guestflags; echo "@@EXIT \$?"
echo "@@END-OF-RUN"
poweroff -f
EOF
chmod +x "$root/init"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -6 >"$cap/initrd.gz")

# --- boot ----------------------------------------------------------------------------------------
append="console=ttyAMA0 rdinit=/init nokaslr panic=-1"
qemu="qemu-system-aarch64 -M virt,dtb-kaslr-seed=off -cpu max -smp 2 -m $MEM -display none \
-no-reboot -monitor none -serial file:$cap/console.raw -kernel $image -initrd $cap/initrd.gz"
echo "kcore $name: booting ($image)"
rm -f "$cap/console.raw"
t_boot=$(date +%s)
timeout 3000 nice -n 10 $qemu -append "$append" || true
t_done=$(date +%s)
grep -q '@@END-OF-RUN' "$cap/console.raw" || { tail -30 "$cap/console.raw" >&2; echo "no @@END-OF-RUN" >&2; exit 1; }

# --- extract -------------------------------------------------------------------------------------
tr -d '\r' <"$cap/console.raw" >"$cap/console.txt"
for f in results.json.gz snapshot.kcore.gz ksyms.txt.gz ${UNWINDDUMP:+unwinddump.txt.gz}; do
	sed -n "/^@@BEGIN $f /,/^@@END $f\$/p" "$cap/console.txt" | sed '1d;$d' | base64 -d >"$out/$f"
done
awk '/^@@BEGIN /{print; skip=1; next} /^@@END /{skip=0} !skip' "$cap/console.txt" >"$out/console.log"
{
	echo "kcore: $name"
	echo "date: $(date -u +%FT%TZ)"
	if [ -n "$pkg" ]; then
		echo "package: $pkg $(dpkg-deb -f "$(debof "$pkg")" Version)"
	else
		echo "package: none (build-scs.sh; $(cat "${image%/Image}/build-time" 2>/dev/null))"
	fi
	echo "image: $image (sha256 $(sha256sum "$image" | cut -c1-64))"
	echo "uname: $(sed -n 's/^@@UNAME //p' "$cap/console.txt")"
	echo "modules: $(sed -n 's/^@@MODULES //p' "$cap/console.txt")"
	echo "cmdline: $append"
	echo "qemu: $qemu -append '$append'"
	echo "qemu-version: $(qemu-system-aarch64 --version | head -1)"
	echo "guest: taskset 1 dd if=/dev/zero of=/dev/null bs=1M; taskset 2 /kcoreguest -name $name -rounds $ROUNDS -per-chain $PER $guestflags"
	echo "time-boot-and-run-s: $((t_done - t_boot)) (2 cores shared with other jobs, qemu under nice -n 10, TCG)"
	echo "time-total-s: $(($(date +%s) - t0))"
} >"$out/manifest.txt"
grep '^kcoreguest: round' "$out/console.log" || true
ls -la "$out"
