#!/bin/sh
# The KASAN claim of the seed series, measured (issue 27, part 3): boot cost of the three ways
# kasan_save_stack can collect its trace, on SCS + KASAN 6.12 kernels under TCG, with generic
# KASAN and with the series' production target, MTE-based KASAN_HW_TAGS.
#
#   sh testdata/kernel/kasan.sh build fp      # generic KASAN, stack_trace_save (the FP unwinder, as shipped)
#   sh testdata/kernel/kasan.sh build scs     # generic KASAN, arch_stack_walk_shadow (the series' SCS copy)
#   sh testdata/kernel/kasan.sh build none    # generic KASAN, no trace, no depot (the maintainer's bound)
#   sh testdata/kernel/kasan.sh build hw-fp   # KASAN_HW_TAGS (MTE), likewise hw-scs, hw-none
#   sh testdata/kernel/kasan.sh boot VARIANT [RUNS]   # RUNS boots (default 5), one line each
#   sh testdata/kernel/kasan.sh table         # the results so far, as a markdown table
#
# Build: linux-source-6.12 + scs-percpu.patch (for arch_stack_walk_shadow) + kasan-stack.patch,
# scs.config + scs-6.12-issue27.config less their debug info (DWARF, BTF: nothing reads it
# here) + the KASAN lines below, clang (LLVM=1). `fp` (`hw-fp`) is a full build in
# $KCAP/build/kasan-fp; the others copy that tree and change the one KASAN_SAVE_STACK_HOW line
# of mm/kasan/common.c, so only common.o (and the five objects the patches touch, re-applied)
# and the link are redone.
# Boot: qemu-system-aarch64 -M virt,dtb-kaslr-seed=off -cpu max -smp 1 -accel tcg,thread=single
# -icount shift=0,sleep=off (hw-*: -M virt,mte=on,...): the guest's clock advances 1 ns per
# executed instruction (2^shift), and with sleep=off, one vCPU and no random seed in the device
# tree the run repeats instruction for instruction, so a printk timestamp is an instruction
# count (in thousands: printk prints microseconds). The initramfs's /init writes "@@INIT" to
# /dev/kmsg at once and powers off; the boot "time" is that line's timestamp. The kernel also
# prints "kasan_save_stack: how H, C calls, F frames" at late_initcall_sync (kasan-stack.patch):
# the number of stack recordings and their mean depth in the boot, for examples/kasan's
# prediction. The share spent collecting stacks is (T_variant - T_none) / T_variant.
# Results: one line per boot in $KCAP/kasan/results.txt (variant, run, insns to @@INIT, calls,
# frames). Instruction counts are not cycles: cache misses, TLB and branch costs (the TCG caveat)
# are not in them.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
KCAP=${KCAP:-/work/kcap}
JOBS=${JOBS:-2}
# The emulator: QEMU 7.2 (bookworm) boots the generic kernels, but its MTE raises a false tag
# fault in the hw-* kernels' first slab allocation (kmem_cache_init: "memory tag fa, pointer tag
# f0") and init dies; QEMU 11.1 (sid) boots them cleanly. The shipped results are all QEMU 11.1:
#   QEMU="chroot /path/to/sid qemu-system-aarch64" sh testdata/kernel/kasan.sh boot hw-fp
# (the sid tree must see $KCAP at the same path: mount --bind /work SID/work).
QEMU=${QEMU:-qemu-system-aarch64}
cmd=${1:?usage: kasan.sh build|boot|table [fp|scs|none|hw-fp|hw-scs|hw-none] [RUNS]}
variant=${2:-}
mode=generic base=fp
case $variant in hw-*) mode=hwtags base=hw-fp ;; esac
case ${variant#hw-} in fp) how=0 ;; scs) how=1 ;; none) how=2 ;; "") how= ;; *) echo "variant [hw-]fp|scs|none" >&2; exit 2 ;; esac
src=$KCAP/src/linux-source-6.12
res=$KCAP/kasan
mkdir -p "$res"

build() {
	[ -d "$src" ] || { mkdir -p "$KCAP/src" && (cd "$KCAP/src" && tar xf /usr/src/linux-source-6.12.tar.xz); }
	out=$KCAP/build/kasan-$variant
	if [ "$variant" != $base ]; then
		[ -f "$KCAP/build/kasan-$base/vmlinux" ] || { echo "build $base first" >&2; exit 1; }
		[ -d "$out" ] || cp -a "$KCAP/build/kasan-$base" "$out"
	fi
	(cd "$src" && patch -p1 <"$here/scs-percpu.patch" && patch -p1 <"$here/kasan-stack.patch")
	# The source is restored on exit, even on failure: the HOW line as the patch has it, then
	# both patches reversed.
	sethow() { sed -i "s/^#define KASAN_SAVE_STACK_HOW [0-9]\$/#define KASAN_SAVE_STACK_HOW $1/" "$src/mm/kasan/common.c"; }
	trap 'sethow 0; (cd "$src" && patch -R -p1 <"$here/kasan-stack.patch" && patch -R -p1 <"$here/scs-percpu.patch")' EXIT
	sethow $how
	mkdir -p "$out"
	frag=$out/kasan.config
	# The capture kernels' fragments without their debug info (DWARF, BTF and the BPF it
	# needs): nothing here reads it, and it is most of a tinyconfig build's time.
	cat "$here/scs.config" "$here/scs-6.12-issue27.config" |
		grep -v '^CONFIG_DEBUG_INFO\|^# CONFIG_DEBUG_INFO\|^CONFIG_BPF' >"$frag"
	cat >>"$frag" <<-'FRAG'
	CONFIG_KASAN=y
	CONFIG_STACKDEPOT=y
	CONFIG_SLUB=y
	# CONFIG_SLUB_TINY is not set
	CONFIG_PRINTK_TIME=y
	CONFIG_DEBUG_INFO_NONE=y
	# CONFIG_DEBUG_INFO_DWARF5 is not set
	# CONFIG_DEBUG_INFO_DWARF4 is not set
	# CONFIG_DEBUG_INFO_DWARF_TOOLCHAIN_DEFAULT is not set
	FRAG
	if [ $mode = generic ]; then
		printf 'CONFIG_KASAN_GENERIC=y\nCONFIG_KASAN_INLINE=y\n' >>"$frag"
	else
		printf 'CONFIG_ARM64_PAN=y\nCONFIG_ARM64_TAGGED_ADDR_ABI=y\nCONFIG_ARM64_MTE=y\nCONFIG_KASAN_HW_TAGS=y\n# CONFIG_KASAN_GENERIC is not set\n' >>"$frag"
	fi
	mk() { nice make -C "$src" O="$out" ARCH=arm64 LLVM=1 "$@"; }
	start=$(date +%s)
	if [ "$variant" = $base ]; then
		mk tinyconfig >/dev/null
		for pass in 1 2; do
			grep '^CONFIG_' "$frag" | while IFS== read -r opt _; do
				"$src/scripts/config" --file "$out/.config" --enable "${opt#CONFIG_}"
			done
			sed -n 's/^# CONFIG_\(.*\) is not set$/\1/p' "$frag" | while read -r opt; do
				"$src/scripts/config" --file "$out/.config" --disable "$opt"
			done
			mk olddefconfig >/dev/null
		done
	fi
	for opt in $(grep '^CONFIG_' "$frag" | cut -d= -f1); do
		grep -qx "$opt=y" "$out/.config" || { echo "kasan.sh: $opt is not =y" >&2; exit 1; }
	done
	mk -j"$JOBS" Image >"$res/build-$variant.log" 2>&1 || { tail -40 "$res/build-$variant.log" >&2; exit 1; }
	mkdir -p "$res/$variant"
	cp "$out/arch/arm64/boot/Image" "$out/vmlinux" "$out/.config" "$res/$variant/"
	echo "$variant: $(($(date +%s) - start)) s wall, make -j$JOBS under nice, $(date -u +%F)" | tee "$res/$variant/build-time"
}

boot() {
	runs=${3:-5}
	image=$res/$variant/Image
	[ -f "$image" ] || { echo "no $image: kasan.sh build $variant" >&2; exit 1; }
	bb=$KCAP/bb
	[ -x "$bb/bin/busybox" ] || { echo "no $bb/bin/busybox: run capture.sh once (it unpacks busybox-static:arm64)" >&2; exit 1; }
	root=$res/root
	rm -rf "$root" && mkdir -p "$root/bin" "$root/dev" "$root/proc"
	cp "$bb/bin/busybox" "$root/bin/busybox"
	mknod "$root/dev/console" c 5 1
	printf '#!/bin/busybox sh\n/bin/busybox mount -t devtmpfs dev /dev\necho @@INIT >/dev/kmsg\n/bin/busybox poweroff -f\n' >"$root/init"
	chmod +x "$root/init"
	(cd "$root" && find . | cpio -o -H newc --quiet | gzip -9 >"$res/initrd.gz")
	for r in $(seq 1 "$runs"); do
		log=$res/$variant/console-$r.txt
		machine=virt,dtb-kaslr-seed=off
		[ $mode = generic ] || machine=$machine,mte=on
		nice timeout 3600 $QEMU -M $machine -cpu max -smp 1 -m 512 -accel tcg,thread=single \
			-icount shift=0,sleep=off -display none -no-reboot -monitor none -serial "file:$log" \
			-kernel "$image" -initrd "$res/initrd.gz" -append "console=ttyAMA0 rdinit=/init nokaslr panic=-1"
		# printk prints seconds.microseconds: the count is in units of 1000 instructions.
		insns=$(tr -d '\r' <"$log" | sed -n 's/^\[ *\([0-9]*\.[0-9]*\)\] @@INIT$/\1/p' | head -1 | awk '{ printf "%.0f", $1 * 1e9 }')
		counts=$(tr -d '\r' <"$log" | sed -n 's/.*kasan_save_stack: how [0-9], \([0-9]*\) calls, \([0-9]*\) frames$/\1 \2/p' | head -1)
		[ -n "$insns" ] || { echo "run $r: no @@INIT line in $log" >&2; exit 1; }
		echo "$variant $r $insns $counts" | tee -a "$res/results.txt"
	done
}

table() {
	# "vs none" and "collecting" compare with the boot of the same KASAN mode that collects
	# nothing: T / T_none and (T - T_none) / T.
	echo "| variant | runs | instructions to @@INIT (mean) | spread (max-min) | vs none | collecting stacks | kasan_save_stack calls | mean depth |"
	echo "|---|---:|---:|---:|---:|---:|---:|---:|"
	for v in fp scs none hw-fp hw-scs hw-none; do
		case $v in hw-*) nv=hw-none ;; *) nv=none ;; esac
		none=$(awk -v nv=$nv '$1 == nv { s += $3; n++ } END { if (n) printf "%.0f", s / n }' "$res/results.txt")
		awk -v v=$v -v none="${none:-0}" '$1 == v { s += $3; n++; if (min == "" || $3 < min) min = $3; if ($3 > max) max = $3; c = $4; f = $5 }
			END { if (n) printf "| %s | %d | %.0f | %d | %s | %s | %s | %s |\n", v, n, s / n, max - min,
				(none > 0 ? sprintf("%.3fx", s / n / none) : "-"), (none > 0 ? sprintf("%.1f%%", 100 * (s / n - none) / (s / n)) : "-"),
				c, (c > 0 && f > 0 ? sprintf("%.1f", f / c) : "-") }' "$res/results.txt"
	done
}

case $cmd in
build) [ -n "$how" ] || exit 2; build ;;
boot) [ -n "$how" ] || exit 2; boot "$@" ;;
table) table ;;
*) echo "usage: kasan.sh build|boot|table" >&2; exit 2 ;;
esac
