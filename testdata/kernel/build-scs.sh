#!/bin/sh
# Build an arm64 kernel with CONFIG_SHADOW_CALL_STACK from Debian's kernel sources, with clang.
#
#   sh testdata/kernel/build-scs.sh 6.12          # linux-source-6.12, entry code as shipped
#   sh testdata/kernel/build-scs.sh 6.1           # linux-source-6.1, entry code as shipped
#   sh testdata/kernel/build-scs.sh 6.12-onstack  # 6.12 with scs-onstack.patch (x18 kept on the stack)
#   sh testdata/kernel/build-scs.sh 6.1-onstack   # 6.1 with scs-onstack.patch
#   sh testdata/kernel/build-scs.sh 7.2           # linux-source-7.2 (Debian sid), dynamic SCS:
#                                                 # run inside a sid tree (chroot) for its clang
#   sh testdata/kernel/build-scs.sh 6.12-percpu   # 6.12 with scs-percpu.patch (the seed series'
#                                                 # per-CPU saved x18 and its in-kernel SCS copy)
#   SCS_EXTRA=testdata/kernel/scs-6.12-issue27.config sh ...   # a second fragment on top
#                                                 # (its options replace scs.config's lines)
#   SCS_EXTRA="testdata/kernel/scs-6.12-issue27.config testdata/kernel/scs-6.12-kcore.config" \
#   SCS_SUFFIX=-kcore sh testdata/kernel/build-scs.sh 6.12-percpu
#                                                 # several fragments, in order; the outputs go to
#                                                 # scs-6.12-percpu-kcore, built from a copy of the
#                                                 # scs-6.12-percpu tree (kcore.sh scs-6.12-percpu)
#
# Needs: linux-source-6.1/-6.12 (tarballs in /usr/src), clang, lld, llvm, flex, bison, bc,
# libelf-dev, libssl-dev, dwarves (pahole, for BTF). Everything big goes under $KCAP
# (default /work/kcap), never into git:
#   $KCAP/src/linux-source-V          extracted source (shared, read-only for the build)
#   $KCAP/build/scs-NAME              the O= build tree
#   $KCAP/scs/scs-NAME/{Image,vmlinux,System.map,config,build.log,build-time}
# The fragment scs.config (beside this script) is applied on top of `make tinyconfig`, and every
# line of it must read =y in the final .config, or the script fails.
# CI never runs this; the captures made with these kernels are committed.
set -eu
name=${1:?usage: build-scs.sh 6.12|6.1|6.12-onstack|6.1-onstack|6.12-percpu|7.2}
here=$(cd "$(dirname "$0")" && pwd)
KCAP=${KCAP:-/work/kcap}
JOBS=${JOBS:-2}
ver=${name%%-*}
case $name in
6.1 | 6.12 | 6.1-onstack | 6.12-onstack | 6.12-percpu | 7.2) ;;
*) echo "unknown kernel $name" >&2; exit 2 ;;
esac

src=$KCAP/src/linux-source-$ver
if [ ! -d "$src" ]; then
	mkdir -p "$KCAP/src"
	(cd "$KCAP/src" && tar xf "/usr/src/linux-source-$ver.tar.xz")
fi
out=$KCAP/build/scs-$name${SCS_SUFFIX:-}
# With SCS_SUFFIX, start from a copy of the tree without it: Kbuild redoes only the objects that
# depend on the options the extra fragments change.
if [ -n "${SCS_SUFFIX:-}" ] && [ -f "$KCAP/build/scs-$name/vmlinux" ] && [ ! -d "$out" ]; then
	cp -a "$KCAP/build/scs-$name" "$out"
fi
if [ "$name" != "$ver" ]; then
	# The patch touches one file, so when the VER build tree exists, start from a copy of it
	# and patch the source in place for this build (entry.S becomes newer than entry.o, so only
	# entry.o and the link are redone; the command lines, which name the source path, stay the
	# same). The source is restored afterwards, even on failure.
	if [ -f "$KCAP/build/scs-$ver/vmlinux" ] && [ ! -d "$out" ]; then
		cp -a "$KCAP/build/scs-$ver" "$out"
	fi
	pf=$here/scs-${name#*-}.patch
	(cd "$src" && patch -p1 <"$pf")
	trap '(cd "$src" && patch -R -p1 <"$pf")' EXIT
fi
dest=$KCAP/scs/scs-$name${SCS_SUFFIX:-}
mkdir -p "$out" "$dest"
mk() { nice make -C "$src" O="$out" ARCH=arm64 LLVM=1 "$@"; }

# The fragment as applied: scs.config, and with SCS_EXTRA a second fragment whose options
# replace scs.config's lines for them (e.g. DWARF5 for DWARF4, the choice's other member off).
frag=$out/scs.config.new
cp "$here/scs.config" "$frag"
for extra in ${SCS_EXTRA:-}; do
	for opt in $(sed -n 's/^\(CONFIG_[A-Z0-9_]*\)=y$/\1/p; s/^# \(CONFIG_[A-Z0-9_]*\) is not set$/\1/p' "$extra"); do
		sed -i "/^$opt=y\$/d; /^# $opt is not set\$/d" "$frag"
	done
	cat "$extra" >>"$frag"
done
# 7.2: the shadow call stack patched in at boot (CONFIG_UNWIND_PATCH_PAC_INTO_SCS, clang 15 or
# newer; it selects DYNAMIC_SCS): on a CPU without PAC the kernel rewrites paciasp/autiasp into
# SCS pushes and pops.
[ "$ver" != 7.2 ] || printf 'CONFIG_UNWIND_PATCH_PAC_INTO_SCS=y\nCONFIG_DYNAMIC_SCS=y\n' >>"$frag"
# A variant's tree copied from the VER tree already has the .config of the same fragment
# (checked below again): the config passes (minutes of Kconfig's compiler probes) are skipped.
reconfig=1
if [ "$name" != "$ver" ] && [ -f "$out/.config" ] && cmp -s "$frag" "$out/scs.config"; then
	reconfig=0
fi
mv "$frag" "$out/scs.config"
frag=$out/scs.config

start=$(date +%s)
if [ $reconfig = 1 ]; then
mk tinyconfig >/dev/null
apply() {
	grep '^CONFIG_' "$frag" | while IFS== read -r opt _; do
		"$src/scripts/config" --file "$out/.config" --enable "${opt#CONFIG_}"
	done
	sed -n 's/^# CONFIG_\(.*\) is not set$/\1/p' "$frag" | while read -r opt; do
		"$src/scripts/config" --file "$out/.config" --disable "$opt"
	done
}
apply
mk olddefconfig >/dev/null
# Each option may need another one to stick; a second pass settles choices and dependencies.
apply
mk olddefconfig >/dev/null
fi
bad=0
for opt in $(grep '^CONFIG_' "$frag" | cut -d= -f1); do
	if ! grep -qx "$opt=y" "$out/.config"; then
		echo "build-scs: $opt is not =y: $(grep "^$opt=\|# $opt is" "$out/.config" || echo absent)" >&2
		bad=1
	fi
done
[ $bad = 0 ] || exit 1

mk -j"$JOBS" Image >"$dest/build.log" 2>&1 || { tail -40 "$dest/build.log" >&2; exit 1; }
end=$(date +%s)

cp "$out/arch/arm64/boot/Image" "$out/vmlinux" "$out/System.map" "$dest/"
cp "$out/.config" "$dest/config"
echo "$((end - start)) s wall for config+Image, make -j$JOBS under nice, $(nproc) cores, $(date -u +%F)${SCS_EXTRA:+, fragment scs.config + $(for e in $SCS_EXTRA; do printf '%s ' "${e##*/}"; done)}" >"$dest/build-time"
cat "$dest/build-time"
