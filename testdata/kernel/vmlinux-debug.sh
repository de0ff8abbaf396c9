#!/bin/sh
# Ship an SCS kernel's DWARF beside its capture, and addr2line's answers for its printed frames:
#
#   sh testdata/kernel/vmlinux-debug.sh scs-6.12-percpu     # after build-scs.sh and capture.sh
#
# Writes $KCAP/scs/NAME/vmlinux.debug: the debug sections of $KCAP/scs/NAME/vmlinux
# (objcopy --only-keep-debug --compress-debug-sections=zlib: .symtab and the zlib-compressed
# .debug_* sections, .text left as NOBITS), and testdata/kernel/NAME/addr2line.txt: the output
# of `aarch64-linux-gnu-addr2line -a -f -i -e vmlinux.debug` at return address - 4 of every
# frame of every printed Call trace and printed shadow call stack copy of the capture
# (go run ./testdata/kernel/addr2line lists them). unwind/debuginfo's TestKernelCaptureAddr2line
# compares its lookups in vmlinux.debug with that file, and with addr2line run live where it is
# installed. vmlinux.debug is copied into testdata/kernel/NAME/ only when it is under 6 MB
# (scs-6.12-percpu's is 19 MB, .debug_info alone 12.9 MB compressed: not shipped; the test then
# needs SCS_VMLINUX_DEBUG=$KCAP/scs/NAME/vmlinux.debug).
# Needs binutils-aarch64-linux-gnu and llvm (llvm-symbolizer). CI never runs this.
set -eu
name=${1:?usage: vmlinux-debug.sh NAME}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
KCAP=${KCAP:-/work/kcap}
v=$KCAP/scs/$name/vmlinux
out=$here/$name
[ -f "$v" ] && [ -f "$out/expected.json" ] || { echo "need $v and $out/expected.json" >&2; exit 1; }
dbg=$KCAP/scs/$name/vmlinux.debug
aarch64-linux-gnu-objcopy --only-keep-debug --compress-debug-sections=zlib "$v" "$dbg"
addrs=$(cd "$repo" && go run ./testdata/kernel/addr2line -capture "$out")
{
	echo "# aarch64-linux-gnu-addr2line -a -f -i -e vmlinux.debug ($(aarch64-linux-gnu-addr2line --version | head -1))"
	echo "# at return address - 4 of every printed frame of expected.json (traces and scs)"
	echo "# vmlinux.debug sha256 $(sha256sum "$dbg" | cut -c1-64), $(wc -c <"$dbg") bytes"
	# shellcheck disable=SC2086 # one argument per address
	(cd "${dbg%/*}" && aarch64-linux-gnu-addr2line -a -f -i -e vmlinux.debug $addrs)
} >"$out/addr2line.txt"
# The second reference where binutils 2.40 drops inlined levels (rule rnglistx, see
# unwind/debuginfo): llvm-symbolizer's GNU-style answers at the same addresses.
{
	echo "# llvm-symbolizer --output-style=GNU -a -f -i -e vmlinux.debug ($(llvm-symbolizer --version | grep -m1 -i version | sed 's/^ *//'))"
	# shellcheck disable=SC2086
	(cd "${dbg%/*}" && llvm-symbolizer --output-style=GNU -a -f -i -e vmlinux.debug $addrs) | sed '/^$/d'
} >"$out/llvm-symbolizer.txt"
rm -f "$out/vmlinux.debug"
if [ "$(wc -c <"$dbg")" -lt 6291456 ]; then cp "$dbg" "$out/vmlinux.debug"; fi
echo "$dbg: $(wc -c <"$dbg") bytes; addr2line.txt: $(echo "$addrs" | wc -l) addresses"
