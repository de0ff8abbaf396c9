#!/bin/sh
# build.sh rebuilds every arm64 capture in testdata/arm64 from source.
#
# Needs Debian packages only:
#   apt-get install -y clang lld gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user gdb-multiarch
# plus the Go toolchain (for testdata/arm64/gen). Run from anywhere:
#   sh testdata/arm64/build.sh
#
# It builds the test program (src/) with clang and GCC, each without PAC,
# with -mbranch-protection=pac-ret and with pac-ret+b-key, keeps the six
# static ELF files in bin/, runs the scenarios under qemu-aarch64 (default
# CPU "max" with pointer authentication, and -cpu max,pauth=off) and writes
# one snapshot per run to snapshots/. Host ASLR is turned off with
# setarch -R, QEMU's random keys are fixed with -seed 1 and the environment
# is empty, so reruns give identical files.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
src=$here/src
work=$(mktemp -d)
# Everything is built in $work and replaces bin/ and snapshots/ only when
# every step has succeeded.
bin=$work/out/bin
snaps=$work/out/snapshots
trap 'rm -rf "$work"' EXIT

for t in setarch clang ld.lld aarch64-linux-gnu-gcc aarch64-linux-gnu-ld qemu-aarch64 go; do
	command -v $t >/dev/null || { echo "build.sh: $t not found" >&2; exit 1; }
done

# -ffreestanding/-fno-builtin: no libc, no memcpy calls; -ffixed-x18 in
# every file: x18 belongs to the shadow call stack.
COMMON="-O2 -ffreestanding -fno-builtin -fno-stack-protector -fno-pic -ffixed-x18 -fno-omit-frame-pointer -fno-asynchronous-unwind-tables -fno-unwind-tables -Wall -Werror"
SCS="-fsanitize=shadow-call-stack"
SCENARIOS="chain leaf recurse deep signal"

mkdir -p "$bin" "$snaps"
# The program runs with an empty environment, from bin/, as ./NAME.elf: the
# initial stack (argv, environment, auxv strings) and so every captured
# address are then the same wherever the repository is checked out.
SETARCH=$(command -v setarch)
QEMU=$(command -v qemu-aarch64)
(cd "$root" && go build -o "$work/gen" ./testdata/arm64/gen)

clang_ver="clang $(clang -dumpversion)"
gcc_ver="aarch64-linux-gnu-gcc $(aarch64-linux-gnu-gcc -dumpfullversion)"
qemu_ver=$(qemu-aarch64 --version | head -1 | sed 's/ (.*//')

for cc in clang gcc; do
	for bp in nopac pacret pacretb; do
		case $bp in
		nopac) BP="" ;;
		pacret) BP="-mbranch-protection=pac-ret" ;;
		pacretb) BP="-mbranch-protection=pac-ret+b-key" ;;
		esac
		if [ $cc = clang ]; then
			CC="clang --target=aarch64-linux-gnu"
			LD=ld.lld
			ver=$clang_ver
		else
			CC=aarch64-linux-gnu-gcc
			LD=aarch64-linux-gnu-ld
			ver=$gcc_ver
		fi
		o=$work/$cc-$bp
		mkdir -p "$o"
		# rt.c is uninstrumented (main sets up x18); the rest is instrumented.
		$CC $COMMON $BP -c "$src/rt.c" -o "$o/rt.o"
		$CC $COMMON $BP $SCS -c "$src/capture.c" -o "$o/capture.o"
		$CC $COMMON $BP $SCS -c "$src/chain.c" -o "$o/chain.o"
		$CC $COMMON $BP $SCS -momit-leaf-frame-pointer -c "$src/leaf.c" -o "$o/leaf.o"
		elf=$bin/$cc-$bp.elf
		$LD -static -nostdlib --build-id=none -z max-page-size=4096 -o "$elf" \
			"$o/rt.o" "$o/capture.o" "$o/chain.o" "$o/leaf.o"

		# Without PAC the CPU makes no difference: run the default CPU only.
		# With PAC: every scenario on the default CPU (PAC on), chain and
		# signal also with pauth=off (the hint instructions are NOPs).
		for cpu in pauth nopauth; do
			if [ $cpu = pauth ]; then
				QCPU=""
				qdesc="$qemu_ver (default CPU: max, PAuth on)"
				list=$SCENARIOS
			else
				[ $bp = nopac ] && continue
				QCPU="-cpu max,pauth=off"
				qdesc="$qemu_ver -cpu max,pauth=off"
				list="chain signal"
			fi
			for sc in $list; do
				name=$cc-$bp-$cpu-$sc
				# shellcheck disable=SC2086
				(cd "$bin" && env -i "$SETARCH" -R "$QEMU" -seed 1 $QCPU ./$cc-$bp.elf $sc) >"$work/$name.bin"
				"$work/gen" -elf "$elf" -dump "$work/$name.bin" -o "$snaps/$name.json" \
					-binary "testdata/arm64/bin/$cc-$bp.elf" -compiler "$ver" \
					-cflags "$COMMON $BP (rt.c without $SCS; leaf.c with -momit-leaf-frame-pointer)" \
					-qemu "qemu-aarch64 -seed 1${QCPU:+ $QCPU} [$qdesc]" >"$work/$name.txt"
				if [ -n "${VERBOSE:-}" ]; then cat "$work/$name.txt"; fi
			done
		done
	done
done
# Two more binaries for the prologue scanner only (not run): BTI landing
# pads plus pac-ret (-mbranch-protection=standard) and two patchable NOPs
# at every function entry, the layout the kernel's ftrace patches into
# "mov x9, x30; bl ftrace_caller".
for cc in clang gcc; do
	if [ $cc = clang ]; then
		CC="clang --target=aarch64-linux-gnu"
		LD=ld.lld
	else
		CC=aarch64-linux-gnu-gcc
		LD=aarch64-linux-gnu-ld
	fi
	o=$work/$cc-pfe
	mkdir -p "$o"
	PFE="-mbranch-protection=standard -fpatchable-function-entry=2"
	$CC $COMMON $PFE -c "$src/rt.c" -o "$o/rt.o"
	$CC $COMMON $PFE $SCS -c "$src/capture.c" -o "$o/capture.o"
	$CC $COMMON $PFE $SCS -c "$src/chain.c" -o "$o/chain.o"
	$CC $COMMON $PFE $SCS -momit-leaf-frame-pointer -c "$src/leaf.c" -o "$o/leaf.o"
	$LD -static -nostdlib --build-id=none -z max-page-size=4096 -o "$bin/$cc-pfe.elf" \
		"$o/rt.o" "$o/capture.o" "$o/chain.o" "$o/leaf.o"
done

# Hand-written prologue shapes (src/shapes.S) for the scanner's tests: a
# static executable, a shared library with .symtab and .dynsym, the same
# stripped to .dynsym only, and the executable with no symbols at all.
clang --target=aarch64-linux-gnu -march=armv8.5-a -c "$src/shapes.S" -o "$work/shapes.o"
ld.lld -static -nostdlib --build-id=none -z max-page-size=4096 -e sp_frame -o "$bin/shapes.elf" "$work/shapes.o"
ld.lld -shared --build-id=none -z max-page-size=4096 -o "$bin/shapes.so" "$work/shapes.o"
aarch64-linux-gnu-strip -o "$bin/shapes-stripped.so" "$bin/shapes.so"
aarch64-linux-gnu-strip -o "$bin/shapes-nosyms.elf" "$bin/shapes.elf"

# A dynamically linked PIE program on glibc (src/dyn.c, src/dynrt.c),
# captured by "gen -run" at a gdb breakpoint, with gdb-multiarch's own
# backtrace kept for the comparison (unwind TestSnapshotGDB). -z now: no
# lazy binding (ld.so's resolver is not built with -ffixed-x18).
gdbsnaps=$work/out/gdb
mkdir -p "$gdbsnaps"
if command -v gdb-multiarch >/dev/null; then
	DYN="-O2 -g -fdebug-prefix-map=$root=. -fPIE -ffixed-x18 -fno-omit-frame-pointer -fno-optimize-sibling-calls -mbranch-protection=pac-ret -Wall -Werror"
	for cc in clang gcc; do
		o=$work/dyn-$cc
		mkdir -p "$o"
		if [ $cc = clang ]; then
			CC="clang --target=aarch64-linux-gnu"
			LINK="$CC -fuse-ld=lld"
			rt=main # clang inlines with_scs into main
		else
			CC=aarch64-linux-gnu-gcc
			LINK=$CC
			rt=with_scs,main
		fi
		$CC $DYN -c "$src/dynrt.c" -o "$o/dynrt.o"
		$CC $DYN $SCS -c "$src/dyn.c" -o "$o/dyn.o"
		$LINK -pie -Wl,-z,now -Wl,--build-id=none -o "$bin/dyn-$cc.elf" "$o/dynrt.o" "$o/dyn.o"
		for sc in qsort signal; do
			case $sc in
			qsort) exp="capture_here,cmp_ints,?,?,?,qsort_r,sort_it,run_qsort,$rt,?,__libc_start_main,_start"
				note="comparator called back through glibc's qsort (msort_with_tmp x3 and __libc_start_call_main have no symbol in .dynsym)" ;;
			signal) exp="capture_here,handler_mid,on_usr1,?,sig_raise,sig_mid,run_signal,$rt,?,__libc_start_main,_start"
				note="SIGUSR1 handler on the normal stack; sig_raise interrupted after its rt_sigqueueinfo svc; ? after on_usr1 is QEMU's sigreturn trampoline" ;;
			esac
			# Stopped when snap_touch returns: capture_here's frame is set
			# up whatever the compiler's prologue scheduling.
			"$work/gen" -run "$bin/dyn-$cc.elf" -args $sc -break snap_touch -finish -scs-base g_scs_base \
				-binary testdata/arm64/bin/dyn-$cc.elf -expect "$exp" -note "$note" \
				-o "$gdbsnaps/dyn-$cc-$sc.json" >"$work/dyn-$cc-$sc.txt" 2>"$work/dyn-$cc-$sc.err" ||
				{ cat "$work/dyn-$cc-$sc.err" >&2; exit 1; }
			if [ -n "${VERBOSE:-}" ]; then cat "$work/dyn-$cc-$sc.txt"; fi
		done
	done
else
	echo "build.sh: gdb-multiarch not found: keeping testdata/arm64/gdb and bin/dyn-*.elf" >&2
	cp "$here"/bin/dyn-*.elf "$bin/" && cp "$here"/gdb/*.json "$gdbsnaps/"
fi

mkdir -p "$here/bin" "$here/snapshots" "$here/gdb"
rm -f "$here"/snapshots/*.json "$here"/bin/*.elf "$here"/bin/*.so "$here"/gdb/*.json
cp "$gdbsnaps"/*.json "$here/gdb/"
cp "$snaps"/*.json "$here/snapshots/"
cp "$bin"/*.elf "$bin"/*.so "$here/bin/"
echo "build.sh: $(ls "$snaps" | wc -l) snapshots in $here/snapshots, $(ls "$bin" | wc -l) binaries in $here/bin"
