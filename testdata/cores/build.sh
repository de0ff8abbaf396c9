#!/bin/sh
# build.sh rebuilds the crash cores in testdata/cores from source.
#
# Needs Debian packages only:
#   apt-get install -y clang lld gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user gdb-multiarch
# plus the Go toolchain. Run from anywhere: sh testdata/cores/build.sh
#
# src/crash.c (instrumented with -fsanitize=shadow-call-stack) crashes with
# SIGSEGV in a leaf, at the bottom of a recursion, in a signal handler and
# in a qsort callback; src/main.c (uninstrumented) sets up the shadow call
# stack. Each is built with clang and GCC, without PAC and with
# -mbranch-protection=pac-ret, statically against glibc, plus one dynamic
# PIE (GCC, no PAC). Each scenario runs under qemu-aarch64 with core dumps
# on (qemu writes qemu_<prog>_<time>_<pid>.core): the default CPU ("max",
# PAC on) and, for pac-ret builds, also -cpu max,pauth=off. The cores are
# trimmed and gzip-compressed by gen/ (CORE.core.gz); next to each one
# gdb's view of it (CORE.gdb.txt: gdb-multiarch EXE CORE -batch -ex bt) is
# kept for the PAC-off runs (gdb 13 does not strip PACs of qemu-user cores).
# Executables are stripped of debug information (gdb then unwinds by
# .eh_frame; with DWARF it hangs on these signal cores) and gzipped.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
src=$here/src
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for t in clang ld.lld aarch64-linux-gnu-gcc qemu-aarch64 gdb-multiarch go gzip setarch; do
	command -v $t >/dev/null || { echo "build.sh: $t not found" >&2; exit 1; }
done
(cd "$root" && go build -o "$work/gen" ./testdata/cores/gen)
out=$work/out
mkdir -p "$out"

F="-O2 -fno-omit-frame-pointer -ffixed-x18 -fno-stack-protector"
SCENARIOS="leaf recurse signal qsort"
QEMU=$(command -v qemu-aarch64)

# run EXE NAME CPU...: runs every scenario, keeps the cores.
run() {
	exe=$1 name=$2 cpuname=$3
	shift 3
	for sc in $SCENARIOS; do
		d=$work/run-$name-$cpuname-$sc
		mkdir -p "$d"
		cp "$exe" "$d/$name.elf"
		# -seed 1 fixes QEMU's PAC keys; setarch -R and an empty
		# environment keep the addresses the same on every run.
		(cd "$d" && ulimit -c unlimited && env -i setarch "$(uname -m)" -R "$QEMU" -seed 1 "$@" "./$name.elf" $sc) >/dev/null 2>&1 || true
		core=$(ls "$d"/qemu_"$name".elf_*.core 2>/dev/null | head -1)
		[ -n "$core" ] || { echo "build.sh: $name $sc: no core written" >&2; exit 1; }
		base=$name-$cpuname-$sc
		"$work/gen" "$core" "$out/$base.core.gz"
		if [ "$cpuname" = nopauth ]; then
			gunzip -c "$out/$base.core.gz" >"$d/trimmed.core"
			# frame 0 and 1 only for signal: gdb 13 loops on qemu's
			# signal trampoline frame.
			if [ $sc = signal ]; then
				g="-ex 'frame 1'"
			else
				g="-ex bt"
			fi
			eval timeout 60 gdb-multiarch -q -nx -batch "$d/$name.elf" "$d/trimmed.core" $g 2>/dev/null |
				grep '^#' | sed -e 's/ (.*//' -e 's/  */ /g' >"$out/$base.gdb.txt"
			[ -s "$out/$base.gdb.txt" ] || { echo "build.sh: gdb printed nothing for $base" >&2; exit 1; }
		fi
	done
}

for cc in clang gcc; do
	for bp in nopac pacret; do
		case $bp in
		nopac) BP="" ;;
		pacret) BP="-mbranch-protection=pac-ret" ;;
		esac
		if [ $cc = clang ]; then
			CC="clang --target=aarch64-linux-gnu" LDF=-fuse-ld=lld
		else
			CC=aarch64-linux-gnu-gcc LDF=
		fi
		o=$work/$cc-$bp
		mkdir -p "$o"
		$CC $F $BP -fsanitize=shadow-call-stack -c "$src/crash.c" -o "$o/crash.o"
		$CC $F $BP -c "$src/main.c" -o "$o/main.o"
		$CC $LDF -static -Wl,--build-id=none "$o/main.o" "$o/crash.o" -o "$o/$cc-$bp.elf"
		aarch64-linux-gnu-strip --strip-debug "$o/$cc-$bp.elf"
		gzip -9n -c "$o/$cc-$bp.elf" >"$out/$cc-$bp.elf.gz"
		if [ $bp = nopac ]; then
			run "$o/$cc-$bp.elf" $cc-$bp nopauth
		else
			run "$o/$cc-$bp.elf" $cc-$bp pauth
			run "$o/$cc-$bp.elf" $cc-$bp nopauth -cpu max,pauth=off
		fi
	done
done

# A dynamically linked PIE: the load bias comes from AT_ENTRY, libc's
# from the dynamic linker's link map in the core.
o=$work/gcc-pie
mkdir -p "$o"
aarch64-linux-gnu-gcc $F -fPIE -fsanitize=shadow-call-stack -c "$src/crash.c" -o "$o/crash.o"
aarch64-linux-gnu-gcc $F -fPIE -c "$src/main.c" -o "$o/main.o"
aarch64-linux-gnu-gcc -pie -Wl,--build-id=none "$o/main.o" "$o/crash.o" -o "$o/gcc-pie.elf"
aarch64-linux-gnu-strip --strip-debug "$o/gcc-pie.elf"
gzip -9n -c "$o/gcc-pie.elf" >"$out/gcc-pie.elf.gz"
SCENARIOS="leaf qsort" run "$o/gcc-pie.elf" gcc-pie pauth -L /usr/aarch64-linux-gnu

rm -rf "$here/bin" "$here/cores"
mkdir -p "$here/bin" "$here/cores"
mv "$out"/*.elf.gz "$here/bin/"
mv "$out"/* "$here/cores/"
ls -l "$here/bin" "$here/cores" | awk '{s+=$5} END {print "build.sh: " s " bytes"}'
