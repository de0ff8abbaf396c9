#!/bin/sh
# Capture a real arm64 Linux kernel under qemu-system-aarch64: vmcores taken through QEMU's
# gdbstub at a breakpoint on the path that prints a trace, next to the kernel's own printed
# `Call trace:` lines and its /proc/kallsyms.
#
#   sh testdata/kernel/capture.sh deb-6.1      # Debian linux-image-6.1.0-57-cloud-arm64
#   sh testdata/kernel/capture.sh deb-6.12     # Debian linux-image-6.12.117+deb12-cloud-arm64-unsigned
#   sh testdata/kernel/capture.sh deb-6.12-nolva   # the same with arm64.nolva (48-bit VAs)
#   sh testdata/kernel/capture.sh scs-6.12     # $KCAP/scs/scs-6.12/Image from build-scs.sh
#   sh testdata/kernel/capture.sh scs-6.12-onstack, scs-6.12-percpu, scs-6.1, scs-6.1-onstack   (likewise)
#   sh testdata/kernel/capture.sh scs-7.2      # build-scs.sh 7.2's dynamic-SCS kernel, booted on a CPU
#                                              # without PAC (-cpu max,pauth=off): it patches its
#                                              # paciasp/autiasp into SCS pushes and pops at boot
#   MODULE=$KCAP/module/ukit.ko sh testdata/kernel/capture.sh deb-6.1-mod   # deb-6.1's kernel, the
#       test module (module/build.sh) loaded first: sysrq-t prints its kthread's trace through it
#   sh testdata/kernel/capture.sh deb-7.2      # Debian sid linux-binary-unsigned-7.2.13+deb14-cloud-arm64
#                                              # (+ linux-modules-*), downloaded with a separate apt state
#
# One boot per kernel. The guest's /init (written below) loads qemu_fw_cfg (VMCOREINFO), starts
# `taskset 1 dd if=/dev/zero of=/dev/null bs=1M` so CPU0 stays busy in the kernel, prints the
# breakpoint addresses from /proc/kallsyms and "@@READY", sleeps while the host attaches gdb,
# then triggers, from a shell pinned to CPU1:
#   sysrq-l (four times, markers l1..l4)
#            -> stop "l-syscall": the writing CPU's own trace (syscall from user space down to
#               el0t_64_sync: show_stack on 6.1, nmi_cpu_backtrace(regs == NULL) on 6.12)
#            -> stop "l-ipi": CPU0 interrupted by the backtrace IPI (showacpu on 6.1,
#               nmi_cpu_backtrace(regs != NULL, interrupted EL1) on 6.12): IRQ stack, exception
#               boundary, the interrupted task (dd, or whatever CPU0 ran)
#   sysrq-t  -> stop "t": first sched_show_task call, before any task is printed; every task
#               (the blocked ones from cpu_context) is printed afterwards
# At each stop gdb records both CPUs' registers and runs `monitor dump-guest-memory`; after the
# last one it detaches and the guest prints. Then the guest crashes the static test program
# usercore/crash (ulimit -c unlimited, core_pattern /tmp/core.%e.%p) and sends the core and
# /proc/kallsyms over the console, gzip + base64, and powers off.
#
# Outputs:
#   $KCAP/captures/NAME/    console.raw, gdb.log, STOP.vmcore.zst (raw dumps, zstd), kallsyms.gz
#                           (full), core.gz, initrd.gz, times  -- never in git
#   testdata/kernel/NAME/   console.log (blobs replaced by their size and sha256), expected.json
#                           (every printed Call trace, parsed), kallsyms.txt.gz (the symbols the
#                           traces and the unwinding need), gdb.log.gz (all registers, system
#                           registers included, of both CPUs at each stop), and for the SCS
#                           kernels config.gz (the full .config) and build-time.txt,
#                           vmcoreinfo.txt (the VMCOREINFO note of l-ipi.vmcore),
#                           manifest.txt
#   testdata/kernel/usercore/ (deb-6.1 only) core.gz, crash, crash.c, gdb-bt.txt
# CI never runs this (it needs minutes of TCG and a network); the outputs are committed.
set -eu
name=${1:?usage: capture.sh deb-6.1|deb-6.12|deb-6.12-nolva|deb-7.2|scs-6.12|scs-6.12-onstack|scs-6.12-percpu|scs-6.1|scs-6.1-onstack|scs-7.2}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
KCAP=${KCAP:-/work/kcap}
MEM=${MEM:-256}
t0=$(date +%s)

case $name in
deb-6.1 | deb-6.1-mod)
	pkg=linux-image-6.1.0-57-cloud-arm64 kver=6.1.0-57-cloud-arm64 family=6.1 ;;
deb-6.12 | deb-6.12-nolva)
	pkg=linux-image-6.12.117+deb12-cloud-arm64-unsigned kver=6.12.117+deb12-cloud-arm64 family=6.12 ;;
deb-7.2) # sid: the image and the modules are two packages; /usr/lib/modules/KVER/vmlinuz.unsigned
	pkg=linux-binary-unsigned-7.2.13+deb14-cloud-arm64 kver=7.2.13+deb14-cloud-arm64 family=6.12
	modpkg=linux-modules-$kver ;;
scs-6.12 | scs-6.12-onstack | scs-6.12-percpu | scs-7.2) pkg= kver= family=6.12 ;;
scs-6.1 | scs-6.1-onstack) pkg= kver= family=6.1 ;;
*) echo "unknown kernel $name" >&2; exit 2 ;;
esac

cap=$KCAP/captures/$name
out=$here/$name
mkdir -p "$KCAP/debs" "$cap" "$out"
rm -f "$cap"/*.vmcore "$cap"/*.vmcore.zst "$cap/console.raw" "$cap/gdb.log" "$cap/gdb-kick.log"

# --- packages ------------------------------------------------------------------------------------
debof() { # debof PKG: the downloaded .deb of PKG, if any
	for f in "$KCAP"/debs/*_arm64.deb; do
		case ${f##*/} in "$1"_*) echo "$f"; return 0 ;; esac
	done
	return 1
}
# deb-7.2's kernel packages come from Debian sid through an apt state of its own under $KCAP/sid-apt (the
# host's bookworm lists and status are not touched).
sidapt=
if [ "$name" = deb-7.2 ]; then
	sa=$KCAP/sid-apt
	mkdir -p "$sa/state/lists/partial" "$sa/cache/archives/partial"
	touch "$sa/state/status"
	echo 'deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian sid main' >"$sa/sources.list"
	sidapt="-o Dir::State=$sa/state -o Dir::State::status=$sa/state/status -o Dir::Cache=$sa/cache
		-o Dir::Etc::SourceList=$sa/sources.list -o Dir::Etc::SourceParts=/dev/null -o APT::Architecture=arm64"
fi
fetch() { # fetch PKG: download PKG:arm64 into $KCAP/debs once
	debof "$1" >/dev/null && return 0
	if [ -n "$sidapt" ] && [ "$1" != busybox-static ]; then # busybox: bookworm's, as for the others
		[ -n "$(ls "$sa/state/lists" | grep _sid_)" ] || flock /tmp/apt.lock apt-get $sidapt update
		(cd "$KCAP/debs" && flock /tmp/apt.lock apt-get $sidapt download "$1")
	else
		(cd "$KCAP/debs" && flock /tmp/apt.lock apt-get download "$1:arm64")
	fi
}
modpkg=${modpkg:-}
fetch busybox-static
bb=$KCAP/bb
[ -x "$bb/bin/busybox" ] || dpkg-deb -x "$(debof busybox-static)" "$bb"
if [ -n "$pkg" ]; then
	fetch "$pkg"
	kdir=$KCAP/kernels/${name%-nolva}
	kdir=${kdir%-mod}
	if [ ! -d "$kdir/boot" ] && [ ! -d "$kdir/usr/lib/modules/$kver" ]; then
		mkdir -p "$kdir"
		dpkg-deb -x "$(debof "$pkg")" "$kdir"
		[ -z "$modpkg" ] || { fetch "$modpkg" && dpkg-deb -x "$(debof "$modpkg")" "$kdir"; }
	fi
	image=$kdir/boot/vmlinuz-$kver
	[ -f "$image" ] || image=$kdir/usr/lib/modules/$kver/vmlinuz.unsigned # sid's layout
	fwcfg=$(find "$kdir/lib/modules/$kver" "$kdir/usr/lib/modules/$kver" -name 'qemu_fw_cfg.ko*' 2>/dev/null | head -1)
else
	image=$KCAP/scs/$name/Image
	fwcfg=
	[ -f "$image" ] || { echo "no $image: run build-scs.sh ${name#scs-} first" >&2; exit 1; }
fi

# --- the user-space test program -----------------------------------------------------------------
uc=$here/usercore
if [ ! -f "$uc/crash" ]; then
	aarch64-linux-gnu-gcc -static -O1 -g -fno-omit-frame-pointer -fno-inline \
		-fno-optimize-sibling-calls -o "$uc/crash" "$uc/crash.c"
fi

# --- initramfs -----------------------------------------------------------------------------------
case $family in
6.1) bp1=show_stack bp2=showacpu ;;
6.12) bp1=nmi_cpu_backtrace bp2=nmi_cpu_backtrace ;;
esac
bp3=sched_show_task
# SCS kernels: a stop after a function's SCS push (`str x30, [x18], #8`) but before x29 is set
# (`mov x29, sp`), on the writer's sysrq-l path, in the round after the l-ipi stop: the caller's return
# address is on the SCS and in x30, in no frame record (see README, stop "x30").
bp0= off0=
case $name in
scs-6.1 | scs-6.1-*) bp0=sysrq_handle_showallcpus off0=16 ;; # +0x10: after stp x29, x30 and str x19, before mov x29, sp
scs-6.12*) bp0=nmi_trigger_cpumask_backtrace off0=8 ;; # +0x8: after the SCS push, before stp x29, x30
scs-7.2) bp0=nmi_trigger_cpumask_backtrace off0=${OFF0_72:-4} ;; # after the push patched over paciasp, before stp
esac
root=$cap/root
rm -rf "$root"
mkdir -p "$root/bin" "$root/proc" "$root/sys" "$root/dev" "$root/tmp"
cp "$bb/bin/busybox" "$root/bin/busybox"
cp "$uc/crash" "$root/crash"
case $fwcfg in
*.xz) xz -dc "$fwcfg" >"$root/qemu_fw_cfg.ko" ;;
?*) cp "$fwcfg" "$root/qemu_fw_cfg.ko" ;;
esac
mknod "$root/dev/console" c 5 1
case $name in *-mod) cp "${MODULE:?deb-6.1-mod needs MODULE=ukit.ko (module/build.sh)}" "$root/ukit.ko" ;; esac
cat >"$root/init" <<EOF
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
[ -e /qemu_fw_cfg.ko ] && insmod /qemu_fw_cfg.ko
[ -e /ukit.ko ] && insmod /ukit.ko && echo "@@MODULE \$(grep ukit /proc/modules)"
echo 0 > /proc/sys/kernel/kptr_restrict
echo 1 > /proc/sys/kernel/sysrq
echo 8 > /proc/sys/kernel/printk
echo "@@UNAME \$(uname -a)"
echo "@@CMDLINE \$(cat /proc/cmdline)"
[ -e /sys/firmware/qemu_fw_cfg/rev ] && echo "@@FWCFG rev \$(cat /sys/firmware/qemu_fw_cfg/rev)"
ulimit -c unlimited
echo '/tmp/core.%e.%p' > /proc/sys/kernel/core_pattern
/crash; echo "@@CRASH-EXIT \$?"
for f in $bp0 $bp1 $bp2 $bp3; do
	echo "@@ADDR \$f \$(grep -m1 " [tT] \$f\\\$" /proc/kallsyms | cut -d' ' -f1)"
done
taskset 1 dd if=/dev/zero of=/dev/null bs=1M &
dd=\$!
sleep 2
echo "@@READY"
sleep 30
for i in 1 2 3 4; do
	echo "@@SCENARIO l\$i"
	taskset 2 sh -c 'echo l > /proc/sysrq-trigger'
	sleep 8
done
echo "@@SCENARIO t"
taskset 2 sh -c 'echo t > /proc/sysrq-trigger'
sleep 5
kill \$dd
echo "@@SCENARIO end"
echo 1 > /proc/sys/kernel/printk
for c in /tmp/core.*; do
	[ -e "\$c" ] || continue
	echo "@@BEGIN core.gz \$c"; gzip -9 -c "\$c" | base64; echo "@@END core.gz"
done
echo "@@BEGIN kallsyms.gz"; gzip -9 -c /proc/kallsyms | base64; echo "@@END kallsyms.gz"
echo "@@END-OF-CAPTURE"
poweroff -f
EOF
chmod +x "$root/init"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -9 >"$cap/initrd.gz")

# --- boot ----------------------------------------------------------------------------------------
port=$(awk -v s=$$ 'BEGIN { print 20000 + s % 20000 }')
while ss -ltn 2>/dev/null | grep -q ":$port "; do port=$((port + 1)); done
append="console=ttyAMA0 rdinit=/init nokaslr panic=-1"
case $name in *-nolva) append="$append arm64.nolva" ;; esac # 48-bit VAs instead of 52-bit LPA2
cpu=max
case $name in scs-7.2) cpu=max,pauth=off ;; esac # no PAC: the dynamic SCS is patched in
qemu="qemu-system-aarch64 -M virt,dtb-kaslr-seed=off -cpu $cpu -smp 2 -m $MEM -display none \
-no-reboot -monitor none -gdb tcp:127.0.0.1:$port -device vmcoreinfo -serial file:$cap/console.raw \
-kernel $image -initrd $cap/initrd.gz"
echo "capture $name: booting ($image)"
nice $qemu -append "$append" &
qpid=$!
trap 'kill $qpid 2>/dev/null || true' EXIT INT TERM

wait_for() { # wait_for PATTERN SECONDS
	i=0
	while ! grep -q "$1" "$cap/console.raw" 2>/dev/null; do
		kill -0 $qpid 2>/dev/null || { echo "qemu exited before '$1'" >&2; return 1; }
		i=$((i + 1))
		[ $i -le $(($2 * 2)) ] || { echo "timeout waiting for '$1'" >&2; return 1; }
		sleep 0.5
	done
}
wait_for '@@READY' 900
t_ready=$(date +%s)
addr() { tr -d '\r' <"$cap/console.raw" | sed -n "s/^@@ADDR $1 \([0-9a-f]*\)\$/\1/p" | head -1; }
a1=$(addr $bp1) a2=$(addr $bp2) a3=$(addr $bp3)
[ -n "$a1" ] && [ -n "$a2" ] && [ -n "$a3" ] || { echo "breakpoint addresses missing" >&2; exit 1; }
a0=
if [ -n "$bp0" ]; then # ADDR + off0 (sh arithmetic is signed 64-bit: add on the low 32 bits)
	a=$(addr $bp0) hi=${a%????????} lo=${a#"${a%????????}"}
	a0=$(printf '%s%08x' "$hi" $((0x$lo + off0)))
fi
# gdb's own backtrace at each stop (gdbbt.py) needs the vmlinux with DWARF: the SCS builds' (tried
# only with those; Debian's -dbg vmlinux under $KCAP/dbg would be the one for deb-*, untested).
vml=$KCAP/scs/$name/vmlinux
[ -f "$vml" ] || vml=
# scs-7.2: gdb 13 (bookworm) refused gdbbt.py's first register write on this kernel ("Attempt to
# assign to an unmodifiable value"), the restore after it failed the same way, and the guest,
# resumed with half-written registers, oopsed. No gdb backtrace for it: the printed traces and
# the kernel's own checks stay the references.
case $name in scs-7.2) vml= ;; esac
pacmask=0xffff000000000000 # KERNELPACMASK of the 48-bit VA kernels
rm -f "$cap/gdb-cfi-bt.txt"

# --- stop, dump, detach --------------------------------------------------------------------------
# 6.12: nmi_cpu_backtrace(regs): regs == NULL is the local CPU's dump_stack(); for the IPI, stop
# only if the IPI interrupted EL1 (pstate at pt_regs+264, M[3:2] != 0): an interrupted EL0 prints
# no kernel frames. 6.1's showacpu has no regs argument; its first call is taken.
case $family in
6.1) c1= c2= ;;
6.12) c1=' if $x0 == 0' c2=' if $x0 != 0 && (*(unsigned long *)($x0 + 264) & 0xc) != 0' ;;
esac
stop() { # stop NAME ADDR FUNC COND
	cat <<EOF
hbreak *0x$2$4
continue
echo @@STOP $1 $3 0x$2$4\\n
shell date +@@TIME\ %s.%N
shell echo @@CONSOLE-LINES \$(tr -d '\\r' <$cap/console.raw | wc -l)
info threads
thread apply all info registers
monitor dump-guest-memory $cap/$1.vmcore
shell date +@@DUMPED\ %s.%N
EOF
	[ -z "$vml" ] || echo "kbt $cap/gdb-cfi-bt.txt $1 $pacmask"
	echo delete
}
{
	echo "set pagination off"
	echo "set confirm off"
	[ -z "$vml" ] || printf 'file %s\nsource %s\n' "$vml" "$here/gdbbt.py"
	echo "target remote 127.0.0.1:$port"
	stop l-syscall "$a1" "$bp1" "$c1"
	stop l-ipi "$a2" "$bp2" "$c2"
	[ -z "$a0" ] || stop x30 "$a0" "$bp0" "" # the next sysrq-l round (l2 when l-ipi came in l1)
	stop t "$a3" "$bp3" ""
	echo "detach"
} >"$cap/gdb.cmd"
timeout 1200 gdb-multiarch -nx -batch -x "$cap/gdb.cmd" >"$cap/gdb.log" 2>&1 || {
	tail -20 "$cap/gdb.log" >&2
	exit 1
}
# Seen once with 6.12: after the batch's detach the guest stayed stopped (QEMU idle, console
# cut mid-line). Attaching and detaching again resumes it, and is harmless when it runs.
sleep 5
timeout 120 gdb-multiarch -nx -batch -ex "target remote 127.0.0.1:$port" -ex detach >>"$cap/gdb-kick.log" 2>&1 || true
t_dumped=$(date +%s)
wait_for '@@END-OF-CAPTURE' 1200
i=0
while kill -0 $qpid 2>/dev/null && [ $i -lt 120 ]; do sleep 0.5; i=$((i + 1)); done
trap - EXIT INT TERM
kill $qpid 2>/dev/null || true
t_done=$(date +%s)

# --- keep the raw dumps outside git, extract the small files -------------------------------------
(cd "$repo" && go run ./testdata/kernel/extract -vmcoreinfo "$cap/l-ipi.vmcore") >"$out/vmcoreinfo.txt"
for s in ${a0:+x30} l-syscall l-ipi t; do
	[ -f "$cap/$s.vmcore" ] || { echo "no $s.vmcore" >&2; exit 1; }
	nice zstd -q -T1 -10 --rm -f "$cap/$s.vmcore" -o "$cap/$s.vmcore.zst"
done
(cd "$repo" && go run ./testdata/kernel/extract -name "$name" -family "$family" \
	-console "$cap/console.raw" -gdblog "$cap/gdb.log" -kcap "$cap" -out "$out")
# trimmed vmcores (only the pages the unwinds read) and their symbols, checked on reopening
(cd "$repo" && go run ./testdata/kernel/trim -raw "$cap" -out "$out")
t_end=$(date +%s)

{
	echo "capture: $name"
	echo "date: $(date -u +%FT%TZ)"
	[ -n "$pkg" ] && echo "package: $pkg $(dpkg-deb -f "$(debof "$pkg")" Version)"
	echo "image: $image (sha256 $(sha256sum "$image" | cut -c1-64))"
	echo "uname: $(tr -d '\r' <"$cap/console.raw" | sed -n 's/^@@UNAME //p')"
	echo "cmdline: $append"
	echo "qemu: $qemu -append '$append'"
	echo "qemu-version: $(qemu-system-aarch64 --version | head -1)"
	echo "gdb: $(gdb-multiarch --version | head -1)"
	[ -z "$a0" ] || echo "breakpoint x30: $bp0+$off0@0x$a0 (hbreak; after the SCS push, before x29 is set)"
	echo "breakpoints: l-syscall=$bp1@0x$a1$c1 l-ipi=$bp2@0x$a2$c2 t=$bp3@0x$a3 (hbreak, QEMU gdbstub)"
	echo "dd: taskset 1 dd if=/dev/zero of=/dev/null bs=1M (keeps CPU0 in the kernel)"
	echo "trigger: taskset 2 sh -c 'echo l > /proc/sysrq-trigger' four times (l1..l4, 8 s apart), then 'echo t' (CPU1)"
	echo "raw-vmcores: $cap/{${a0:+x30,}l-syscall,l-ipi,t}.vmcore.zst ($(du -ch "$cap"/*.vmcore.zst | tail -1 | cut -f1) zstd)"
	echo "time-boot-to-ready-s: $((t_ready - t0))"
	echo "time-stops-and-dumps-s: $((t_dumped - t_ready))"
	echo "time-print-and-poweroff-s: $((t_done - t_dumped))"
	echo "time-compress-and-extract-s: $((t_end - t_done))"
	echo "time-total-s: $((t_end - t0)) (2 cores shared with other jobs, qemu under nice)"
	cat "$out/stops.txt"
} >"$out/manifest.txt"
rm -f "$out/stops.txt"
gzip -9 -n -c "$cap/gdb.log" >"$out/gdb.log.gz"
if [ -n "$vml" ]; then cp "$cap/gdb-cfi-bt.txt" "$out/gdb-cfi-bt.txt"; else rm -f "$out/gdb-cfi-bt.txt"; fi
if [ -z "$pkg" ]; then # an SCS kernel: its full .config and how long it took to build
	gzip -9 -n -c "$KCAP/scs/$name/config" >"$out/config.gz"
	cp "$KCAP/scs/$name/build-time" "$out/build-time.txt"
fi

if [ "$name" = deb-6.1 ] && [ -f "$cap/core.gz" ]; then
	cp "$cap/core.gz" "$uc/core.gz"
	gzip -dc "$uc/core.gz" >"$cap/core"
	gdb-multiarch -nx "$uc/crash" "$cap/core" -batch -ex bt 2>&1 | tee "$uc/gdb-bt.txt"
	echo "kernel: $(tr -d '\r' <"$cap/console.raw" | sed -n 's/^@@UNAME //p')" >"$uc/manifest.txt"
	tr -d '\r' <"$cap/console.raw" | grep -E 'crash|@@CRASH' | grep -v '^@@BEGIN' >>"$uc/manifest.txt" || true
fi
echo "capture $name: done in $((t_end - t0)) s"
cat "$out/manifest.txt"
