#!/bin/sh
# The KASAN claim of the seed series, measured (issue 27, part 3): boot cost of the three ways
# kasan_save_stack can collect its trace, on an SCS + generic KASAN 6.12 kernel under TCG.
#
#   sh testdata/kernel/kasan.sh build fp      # stack_trace_save (the FP unwinder, as shipped)
#   sh testdata/kernel/kasan.sh build scs     # arch_stack_walk_shadow (the series' SCS copy)
#   sh testdata/kernel/kasan.sh build none    # no trace, no depot (the maintainer's bound)
#   sh testdata/kernel/kasan.sh boot VARIANT [RUNS]   # RUNS boots (default 5), one line each
#   sh testdata/kernel/kasan.sh table         # the results so far, as a markdown table
#
# NOT YET RUN: written 2026-12-02 when the three KASAN builds did not fit on the 2 shared cores
# (the SCS tinyconfig 6.12 tree alone took 61 min there). Expect to fix small things on first use.
#
# Build: linux-source-6.12 + scs-percpu.patch (for arch_stack_walk_shadow) + kasan-stack.patch,
# scs.config + scs-6.12-issue27.config + the KASAN lines below, clang (LLVM=1). `fp` is a full
# build in $KCAP/build/kasan-fp; `scs` and `none` copy that tree and change the one
# KASAN_SAVE_STACK_HOW line of mm/kasan/common.c, so only common.o and the link are redone.
# Boot: qemu-system-aarch64 -M virt -cpu max -smp 1 -accel tcg,thread=single
# -icount shift=0,sleep=off: the guest's clock advances 1 ns per executed instruction
# (2^shift), and with sleep=off and one vCPU the run repeats instruction for instruction, so a
# printk timestamp is an instruction count. The initramfs's /init writes "@@INIT" to /dev/kmsg
# at once and powers off; the boot "time" is that line's timestamp. The kernel also prints
# "kasan_save_stack: how H, C calls, F frames" at late_initcall_sync (kasan-stack.patch): the
# number of stack recordings and their mean depth in the boot, for examples/kasan's prediction.
# The share spent collecting stacks is (T_variant - T_none) / T_variant.
# Generic KASAN only: the series' production target, MTE-based KASAN_HW_TAGS, would replace
# KASAN_GENERIC/KASAN_INLINE with CONFIG_KASAN_HW_TAGS=y and boot with -M virt,mte=on (not written).
# Results: one line per boot in $KCAP/kasan/results.txt (variant, run, insns to @@INIT, calls,
# frames). Instruction counts are not cycles: cache misses, TLB and branch costs (the TCG caveat)
# are not in them.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
KCAP=${KCAP:-/work/kcap}
JOBS=${JOBS:-2}
cmd=${1:?usage: kasan.sh build|boot|table [fp|scs|none] [RUNS]}
variant=${2:-}
case $variant in fp) how=0 ;; scs) how=1 ;; none) how=2 ;; "") how= ;; *) echo "variant fp|scs|none" >&2; exit 2 ;; esac
src=$KCAP/src/linux-source-6.12
res=$KCAP/kasan
mkdir -p "$res"

build() {
	[ -d "$src" ] || { mkdir -p "$KCAP/src" && (cd "$KCAP/src" && tar xf /usr/src/linux-source-6.12.tar.xz); }
	out=$KCAP/build/kasan-$variant
	if [ "$variant" != fp ]; then
		[ -f "$KCAP/build/kasan-fp/vmlinux" ] || { echo "build fp first" >&2; exit 1; }
		[ -d "$out" ] || cp -a "$KCAP/build/kasan-fp" "$out"
	fi
	(cd "$src" && patch -p1 <"$here/scs-percpu.patch" && patch -p1 <"$here/kasan-stack.patch")
	trap '(cd "$src" && patch -R -p1 <"$here/kasan-stack.patch" && patch -R -p1 <"$here/scs-percpu.patch")' EXIT
	sed -i "s/^#define KASAN_SAVE_STACK_HOW [0-9]\$/#define KASAN_SAVE_STACK_HOW $how/" "$src/mm/kasan/common.c"
	mkdir -p "$out"
	frag=$out/kasan.config
	grep -v '^CONFIG_DEBUG_INFO_DWARF4=y$' "$here/scs.config" >"$frag"
	cat "$here/scs-6.12-issue27.config" >>"$frag"
	cat >>"$frag" <<-'FRAG'
	CONFIG_KASAN=y
	CONFIG_KASAN_GENERIC=y
	CONFIG_KASAN_INLINE=y
	CONFIG_STACKDEPOT=y
	CONFIG_SLUB=y
	# CONFIG_SLUB_TINY is not set
	FRAG
	mk() { nice make -C "$src" O="$out" ARCH=arm64 LLVM=1 "$@"; }
	start=$(date +%s)
	if [ "$variant" = fp ]; then
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
		nice timeout 3600 qemu-system-aarch64 -M virt -cpu max -smp 1 -m 512 -accel tcg,thread=single \
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
	echo "| variant | runs | instructions to @@INIT (mean) | spread (max-min) | vs none | kasan_save_stack calls | mean depth |"
	echo "|---|---:|---:|---:|---:|---:|---:|"
	none=$(awk '$1 == "none" { s += $3; n++ } END { if (n) printf "%.0f", s / n }' "$res/results.txt")
	for v in fp scs none; do
		awk -v v=$v -v none="${none:-0}" '$1 == v { s += $3; n++; if (min == "" || $3 < min) min = $3; if ($3 > max) max = $3; c = $4; f = $5 }
			END { if (n) printf "| %s | %d | %.0f | %d | %s | %s | %s |\n", v, n, s / n, max - min,
				(none > 0 ? sprintf("%.3fx", s / n / none) : "-"), c, (c > 0 ? sprintf("%.1f", f / c) : "-") }' "$res/results.txt"
	done
}

case $cmd in
build) [ -n "$how" ] || exit 2; build ;;
boot) [ -n "$how" ] || exit 2; boot "$@" ;;
table) table ;;
*) echo "usage: kasan.sh build|boot|table" >&2; exit 2 ;;
esac
