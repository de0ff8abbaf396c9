#!/bin/sh
# Ship an SCS kernel's DWARF beside its capture, and addr2line's answers for its printed frames:
#
#   sh testdata/kernel/vmlinux-debug.sh scs-6.12-percpu     # after build-scs.sh and capture.sh
#
# Writes testdata/kernel/NAME/vmlinux.debug: the debug sections of $KCAP/scs/NAME/vmlinux
# (objcopy --only-keep-debug --compress-debug-sections=zlib: .symtab and the zlib-compressed
# .debug_* sections, .text left as NOBITS), and testdata/kernel/NAME/addr2line.txt: the output
# of `aarch64-linux-gnu-addr2line -a -f -i -e vmlinux.debug` at return address - 4 of every
# frame of every printed Call trace and printed shadow call stack copy of the capture
# (go run ./testdata/kernel/addr2line lists them). unwind/debuginfo's TestKernelCaptureAddr2line
# compares its lookups with that file, and with addr2line run live where it is installed.
# Needs binutils-aarch64-linux-gnu. CI never runs this.
set -eu
name=${1:?usage: vmlinux-debug.sh NAME}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
KCAP=${KCAP:-/work/kcap}
v=$KCAP/scs/$name/vmlinux
out=$here/$name
[ -f "$v" ] && [ -f "$out/expected.json" ] || { echo "need $v and $out/expected.json" >&2; exit 1; }
aarch64-linux-gnu-objcopy --only-keep-debug --compress-debug-sections=zlib "$v" "$out/vmlinux.debug"
addrs=$(cd "$repo" && go run ./testdata/kernel/addr2line -capture "$out")
{
	echo "# aarch64-linux-gnu-addr2line -a -f -i -e vmlinux.debug ($(aarch64-linux-gnu-addr2line --version | head -1))"
	echo "# at return address - 4 of every printed frame of expected.json (traces and scs)"
	echo "# vmlinux.debug sha256 $(sha256sum "$out/vmlinux.debug" | cut -c1-64)"
	# shellcheck disable=SC2086 # one argument per address
	(cd "$out" && aarch64-linux-gnu-addr2line -a -f -i -e vmlinux.debug $addrs)
} >"$out/addr2line.txt"
echo "$out/vmlinux.debug: $(wc -c <"$out/vmlinux.debug") bytes; addr2line.txt: $(echo "$addrs" | wc -l) addresses"
