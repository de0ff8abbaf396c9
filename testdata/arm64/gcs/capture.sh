#!/bin/sh
# capture.sh rebuilds the GCS captures in testdata/arm64/gcs from source.
# It runs outside CI: it needs a Debian sid tree (GCC 16, glibc 2.43,
# QEMU 11.1, gdb 18; see README.md for how to make one) and Go on the host:
#
#   sh testdata/arm64/gcs/capture.sh /path/to/sid
#
# It builds src/ with the sid tree's aarch64-linux-gnu-gcc (static, glibc
# 2.43, -mbranch-protection=gcs, the scenarios also with
# -fsanitize=shadow-call-stack; the 700 KB ELF file is not kept: each
# snapshot holds the symbols it needs), runs each
# scenario under the tree's static qemu-aarch64 with -cpu max and
# GLIBC_TUNABLES=glibc.cpu.aarch64_gcs=1 (glibc's start code enables GCS),
# stops it with the tree's gdb-multiarch at the capture point
# (gen/gcscapture.py) and writes snapshots/SCENARIO.json (gen/main.go) and
# gdb/SCENARIO.bt.txt, gdb's own backtrace. Host ASLR is off (setarch
# -R), QEMU's random bytes are fixed (-seed 1) and the environment holds
# only the tunable, so reruns give the same files, except that now and
# then (one run in seven here) QEMU places the guest's stack and GCS
# elsewhere: the same stops at other addresses; and thread's stack
# holds 7 bytes that change (its thread id, a number in a leftover
# string). The tree needs no /proc mounted.
set -eu

sid=${1:?usage: capture.sh SID_TREE}
sid=$(cd "$sid" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
QEMU=$sid/usr/bin/qemu-aarch64
for t in "$QEMU" "$sid/usr/bin/aarch64-linux-gnu-gcc" "$sid/usr/bin/gdb-multiarch"; do
	[ -x "$t" ] || { echo "capture.sh: $t not found" >&2; exit 1; }
done
command -v go >/dev/null || { echo "capture.sh: go not found" >&2; exit 1; }

# The build and the capture run in a folder of the sid tree (the chroot
# sees it as /gcs-capture); the results replace bin/, snapshots/ and gdb/
# only when every step has succeeded.
#
# What was found with QEMU 11.1 and gdb 18: the gdbstub has no
# org.gnu.gdb.aarch64.gcs feature (gdb's $gcspr is void) but lists the
# system register GCSPR_EL0 (and GCSCRE0_EL1) in org.qemu.gdb.arm.sys.regs,
# which gcscapture.py reads; gdb's backtrace does not use the GCS; and
# qemu-aarch64's own core dumps hold NT_PRSTATUS, NT_PRPSINFO and NT_AUXV
# only (no NT_ARM_GCS), so the captures are snapshots, not cores; kcore.sh
# makes real cores of the same program (built with -DGCS_CRASH) under
# Debian sid's Linux 7.2, which writes NT_ARM_GCS.
work=$sid/gcs-capture
rm -rf "$work"
mkdir -p "$work/out/snapshots" "$work/out/gdb"
trap 'rm -rf "$work"' EXIT
cp "$here"/src/* "$here/gen/gcscapture.py" "$work/"
(cd "$root" && go build -o "$work/gen" ./testdata/arm64/gcs/gen)

CFLAGS="-O2 -g -ffixed-x18 -fno-omit-frame-pointer -fno-optimize-sibling-calls -mbranch-protection=gcs -Wall -Werror"
chroot "$sid" sh -euc "cd /gcs-capture
C='$CFLAGS -fdebug-prefix-map=/gcs-capture=testdata/arm64/gcs/src'
aarch64-linux-gnu-gcc \$C -c gcsrt.c -o gcsrt.o
aarch64-linux-gnu-gcc \$C -fsanitize=shadow-call-stack -c gcs.c -o gcs.o
aarch64-linux-gnu-gcc \$C -fsanitize=shadow-call-stack -momit-leaf-frame-pointer -c gcs-leaf.c -o gcs-leaf.o
aarch64-linux-gnu-gcc -c noframe.S -o noframe.o
aarch64-linux-gnu-gcc -static -Wl,--build-id=none -o gcs.elf gcsrt.o gcs.o gcs-leaf.o noframe.o
aarch64-linux-gnu-readelf -n gcs.elf | grep -q 'AArch64 feature: GCS'"
gcc_ver="aarch64-linux-gnu-gcc $(chroot "$sid" aarch64-linux-gnu-gcc -dumpfullversion) (glibc $(chroot "$sid" dpkg-query -W -f '${Version}' libc6-dev-arm64-cross), static) $CFLAGS"
qemu_ver=$("$QEMU" --version | head -1)
gdb_ver=$(chroot "$sid" gdb-multiarch --version | head -1)

port=23470
start='__libc_start_call_main,__libc_start_main,_start'
for sc in chain leaf noframe recurse signal longjmp deep thread; do
	brk=snap_touch finish=finish qopt="" note=""
	case $sc in
	chain) exp="capture_here,chain_d,chain_c,chain_b,run_chain,main,$start" ;;
	leaf) exp="leaf_spin,leaf_mid,run_leaf,main,$start" brk=leaf_spin finish=""
		note="stopped at leaf_spin's first instruction: a leaf without a frame record or SCS push, its caller only in x30 and on the GCS" ;;
	noframe) exp="capture_here,noframe_call,asm_mid,run_noframe,main,$start"
		note="noframe_call (noframe.S) keeps x30 on the stack without a frame record and makes no SCS push" ;;
	recurse) exp="capture_here$(for i in $(seq 0 100); do printf ,rec; done),run_recurse,main,$start" ;;
	signal) exp="capture_here,handler_mid,on_usr1,?,sig_raise,sig_mid,run_signal,main,$start"
		note="SIGUSR1 on the normal stack, raised by sig_raise's rt_sigqueueinfo svc; ? is the sigreturn trampoline (QEMU's vdso, no symbol in the ELF)" ;;
	longjmp) exp="capture_here,lj_after,lj_top,run_longjmp,main,$start"
		note="after longjmp out of lj_deep and lj_mid: glibc's longjmp unwound the GCS; x18 is not in the jmp_buf, so the SCS keeps two dead slots" ;;
	thread) exp="capture_here,chain_d,chain_c,chain_b,run_chain,thread_main,start_thread,thread_start"
		note="the chain on a second thread (pthread_create): its own GCS, allocated at clone, and its own shadow call stack" ;;
	deep) exp="" brk="" finish="" qopt="-s 65536"
		note="gcs_descend calls itself until the GCS (32 KiB with qemu -s 65536: half the stack size) is full; stopped at the SIGSEGV of the push that found the guard page" ;;
	esac
	port=$((port + 1))
	# shellcheck disable=SC2086
	(cd "$work" && env -i GLIBC_TUNABLES=glibc.cpu.aarch64_gcs=1 setarch -R "$QEMU" -seed 1 -cpu max $qopt -g $port ./gcs.elf $sc >/dev/null 2>&1 &)
	set -- -batch -nx -ex "set pagination off" -ex "set backtrace past-main on" -ex "set tcp auto-retry on" -ex "set tcp connect-timeout 20" \
		-ex "file /gcs-capture/gcs.elf" -ex "target remote :$port" -ex "handle SIGUSR1 nostop noprint pass"
	if [ -n "$brk" ]; then set -- "$@" -ex "break $brk"; fi
	set -- "$@" -ex continue
	if [ -n "$finish" ]; then set -- "$@" -ex finish; fi
	set -- "$@" -ex "python CAPTURE_OUT = '/gcs-capture/$sc.raw.json'" -x /gcs-capture/gcscapture.py -ex kill
	chroot "$sid" gdb-multiarch "$@" >"$work/$sc.gdb.log" 2>&1 || { cat "$work/$sc.gdb.log" >&2; exit 1; }
	[ -s "$work/$sc.raw.json" ] || { cat "$work/$sc.gdb.log" >&2; exit 1; }
	"$work/gen" -raw "$work/$sc.raw.json" -elf "$work/gcs.elf" -scenario "$sc" -expect "$exp" \
		-o "$work/out/snapshots/$sc.json" -bt "$work/out/gdb/$sc.bt.txt" -binary 'gcs.elf (built by capture.sh, not kept)' \
		-compiler "$gcc_ver" -qemu "GLIBC_TUNABLES=glibc.cpu.aarch64_gcs=1 qemu-aarch64 -seed 1 -cpu max${qopt:+ $qopt} [$qemu_ver; $gdb_ver]" -note "$note"
done

mkdir -p "$here/snapshots" "$here/gdb"
rm -f "$here"/snapshots/*.json "$here"/gdb/*.txt
cp "$work"/out/snapshots/*.json "$here/snapshots/"
cp "$work"/out/gdb/*.txt "$here/gdb/"
echo "capture.sh: $(ls "$here/snapshots" | wc -l) snapshots in $here/snapshots"
