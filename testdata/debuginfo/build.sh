#!/bin/sh
# Builds the test binaries of unwind/debuginfo from src/ and records
# addr2line's answers for them. Debian packages: gcc-aarch64-linux-gnu,
# clang, lld, llvm (llvm-symbolizer), binutils-aarch64-linux-gnu.
#
#   sh testdata/debuginfo/build.sh          rebuild bin/*.elf.gz and the answers bin/*.{addr2line,llvm-symbolizer}.gz
#   sh testdata/debuginfo/build.sh DIR      build the binaries (not gzipped) into DIR only
#
# Every binary is freestanding (no libc), -O2 so that functions inline, and
# its paths are mapped to the fixed source root /build/debuginfo, so that a
# rebuild gives the same bytes wherever the tree is.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$here"
common="-O2 -ffreestanding -fno-stack-protector -fdebug-prefix-map=$here=/build/debuginfo"
ldflags="-nostdlib -static -Wl,--build-id=none -Wl,-e,_start"
build() { # name compiler flags...
	name=$1; shift
	"$@" $common $ldflags -o "$tmp/$name.elf" src/main.c src/other.c
}
build gcc-dwarf4 aarch64-linux-gnu-gcc -gdwarf-4
build gcc-dwarf5 aarch64-linux-gnu-gcc -gdwarf-5
build clang-dwarf4 clang --target=aarch64-linux-gnu -fuse-ld=lld -gdwarf-4
build clang-dwarf5 clang --target=aarch64-linux-gnu -fuse-ld=lld -gdwarf-5
# Link-time optimization: references cross units (DW_FORM_ref_addr).
build gcc-lto aarch64-linux-gnu-gcc -flto -gdwarf-5
# A shared library (ET_DYN, linked at 0): the libraries' case.
aarch64-linux-gnu-gcc -gdwarf-5 $common -fPIC -shared -nostdlib -Wl,--build-id=none \
	-o "$tmp/gcc-dwarf5-so.elf" src/main.c src/other.c
# Compressed debug sections (SHF_COMPRESSED, zlib).
aarch64-linux-gnu-objcopy --compress-debug-sections=zlib "$tmp/gcc-dwarf4.elf" "$tmp/gcc-dwarf4-gz.elf"
if [ -n "$out" ]; then
	mkdir -p "$out"
	cp "$tmp"/*.elf "$out"/
	exit 0
fi
mkdir -p bin
for f in "$tmp"/*.elf; do
	n=$(basename "$f" .elf)
	gzip -9n <"$f" >"bin/$n.elf.gz"
	# addr2line at every instruction of every function symbol.
	addrs=$(aarch64-linux-gnu-nm -S --defined-only "$f" | while read -r a s t n; do
		case $t in [tTwW]) ;; *) continue ;; esac
		i=0
		while [ $i -lt $((0x$s)) ]; do
			printf '0x%x\n' $((0x$a + i))
			i=$((i + 4))
		done
	done | sort -u)
	aarch64-linux-gnu-addr2line -a -f -i -e "$f" $addrs | gzip -9n >"bin/$n.addr2line.gz"
	# A second opinion where binutils is wrong (see addr2line_test.go).
	llvm-symbolizer --output-style=GNU -a -f -i -e "$f" $addrs |
		sed -n '/^$/!p' | gzip -9n >"bin/$n.llvm-symbolizer.gz"
done
