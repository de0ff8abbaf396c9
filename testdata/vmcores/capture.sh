#!/bin/sh
# capture.sh boots Debian's 6.12 cloud arm64 kernel under
# qemu-system-aarch64 (TCG) with a busybox initramfs, takes a vmcore with
# QEMU's dump-guest-memory once the guest has printed a sample of its
# /proc/kallsyms, and keeps, per boot, the vmcore trimmed by gen/ to the
# pages that reading it needs (page tables, kallsyms tables, a page at each
# CPU's sp) and the kallsyms sample. Two boots: 52-bit VAs with LPA2 (the
# kernel's default on QEMU's "max" CPU) and 48-bit (arm64.nolva).
#
# Needs: dpkg --add-architecture arm64 && apt-get update; apt-get install
# qemu-system-arm cpio python3; the Go toolchain. Downloads
# linux-image-$KVER-cloud-arm64-unsigned:arm64 and busybox-static:arm64
# with apt-get download. CI does not run it: it checks the shipped files.
# About 2 minutes per boot on a loaded 2-core machine.
#
# Other kernels: KPKG names the image package, KNAME the files' prefix,
# BOOTS the boots as NAME:CMDLINE-WORD pairs, for example
#   KPKG=linux-image-6.1.0-57-cloud-arm64-unsigned KNAME=debian-6.1.0-57 BOOTS=va48: sh capture.sh
# made the shipped 6.1 files (about 1 minute); the default makes the 6.12 ones.
set -eu
KVER=${KVER:-6.12.111+deb12}
KPKG=${KPKG:-linux-image-$KVER-cloud-arm64-unsigned}
KNAME=${KNAME:-debian-$KVER}
BOOTS=${BOOTS:-va52: va48:arm64.nolva}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=$(mktemp -d)
trap 'kill $(cat "$work/qemu.pid" 2>/dev/null) 2>/dev/null || true; rm -rf "$work"' EXIT
cd "$work"
apt-get download "$KPKG:arm64" busybox-static:arm64 >/dev/null 2>&1
dpkg-deb -x linux-image-*.deb k
dpkg-deb -x busybox-static_*.deb bb
mkdir -p ir/bin ir/proc ir/sys ir/dev
cp bb/bin/busybox ir/bin/
ko=$(find k -name 'qemu_fw_cfg.ko*' | head -1)
case $ko in
*.xz) xz -dc "$ko" >ir/qemu_fw_cfg.ko ;;
*) cp "$ko" ir/qemu_fw_cfg.ko ;;
esac
cat >ir/init <<'INIT'
#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sys /sys
/bin/busybox insmod /qemu_fw_cfg.ko
echo 0 > /proc/sys/kernel/kptr_restrict
echo "KSTART"
/bin/busybox awk 'NR % 400 == 1 || $3 == "__start_BTF" || $3 == "__stop_BTF" || $3 == "__per_cpu_offset" || $3 == "_text" || $3 == "irq_stack_ptr" || $3 == "swapper_pg_dir" {print "KS", $0}' /proc/kallsyms
echo "KEND $(/bin/busybox wc -l < /proc/kallsyms)"
/bin/busybox sleep 600
INIT
chmod +x ir/init
(cd ir && find . | cpio -H newc -o 2>/dev/null | gzip -1 >../initrd.gz)
(cd "$root" && go build -o "$work/gen" ./testdata/vmcores/gen)

boot() { # NAME EXTRA-CMDLINE
	rm -f mon.sock console.log
	qemu-system-aarch64 -M virt,dtb-kaslr-seed=off -cpu max -smp 2 -m 256 -nographic -no-reboot \
		-device vmcoreinfo -monitor unix:mon.sock,server,nowait -serial file:console.log \
		-kernel k/boot/vmlinuz-* -initrd initrd.gz \
		-append "console=ttyAMA0 rdinit=/init nokaslr panic=-1 $2" >qemu.out 2>&1 &
	echo $! >qemu.pid
	i=0
	until grep -q '^KEND' console.log 2>/dev/null; do
		i=$((i + 1))
		[ $i -lt 600 ] || { echo "capture.sh: $1: no KEND after 600 s" >&2; exit 1; }
		sleep 1
	done
	python3 - "$work/$1.elf" <<'PY'
import re, socket, sys
s = socket.socket(socket.AF_UNIX); s.connect("mon.sock"); s.settimeout(300)
s.recv(4096)
s.send(("dump-guest-memory " + sys.argv[1] + "\n").encode())
# The monitor echoes the command (with line-editing redraws), then prints
# its prompt again when the dump is written.
buf = b""
while not re.search(rb"\.elf[^\n]*\n.*\(qemu\)", buf, re.S):
    buf += s.recv(4096)
PY
	kill "$(cat qemu.pid)"
	wait "$(cat qemu.pid)" 2>/dev/null || true
	grep '^KS\|^KEND' console.log | tr -d '\r' >"$here/$1.kallsyms.txt"
	"$work/gen" "$work/$1.elf" "$here/$1.vmcore.gz"
}
for b in $BOOTS; do
	boot "$KNAME-${b%%:*}" "${b#*:}"
done
ls -l "$here"/*.gz "$here"/*.txt
