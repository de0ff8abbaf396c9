package debuginfo_test

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/unwindkit/unwindkit/unwind/debuginfo"
)

// A return address found on a stack (a saved x30) is looked up at its call
// instruction. Here note's caller, run, had leaf_add inlined into mid_mix,
// inlined into outer_walk, inlined into run: addr2line -f -i's four
// levels, innermost first, each with the call site of the level before it.
func Example() {
	raw, err := os.ReadFile("../../testdata/debuginfo/bin/gcc-dwarf5.elf.gz")
	if err != nil {
		fmt.Println(err)
		return
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		fmt.Println(err)
		return
	}
	elf, err := io.ReadAll(zr)
	if err != nil {
		fmt.Println(err)
		return
	}
	// debuginfo.Open(path) maps a file on disk instead.
	f, err := debuginfo.NewFile("gcc-dwarf5.elf", bytes.NewReader(elf), int64(len(elf)))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()

	const ra = 0x40038c // the return address of the bl at 0x400388
	frames, err := f.Lookup(ra, debuginfo.ReturnAddress)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, fr := range frames {
		inl := ""
		if fr.Inlined {
			inl = " (inlined)"
		}
		fmt.Printf("%-10s %s:%d%s\n", fr.Func, fr.File, fr.Line, inl)
	}
	fmt.Println("source root:", frames[0].Path[:len(frames[0].Path)-len(frames[0].File)])

	// The same address as a stopped pc names the instruction after the
	// call: the loop in mid_mix goes on there, leaf_add has returned.
	frames, err = f.Lookup(ra, debuginfo.PC)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s %s:%d\n", frames[0].Func, frames[0].File, frames[0].Line)
	// Output:
	// leaf_add   src/inl.h:11 (inlined)
	// mid_mix    src/inl.h:20 (inlined)
	// outer_walk src/inl.h:29 (inlined)
	// run        src/main.c:46
	// source root: /build/debuginfo/
	// mid_mix src/inl.h:20
}

// A shared library's DWARF holds link-time addresses: subtract the load
// bias (the address its first PT_LOAD was mapped at, for one linked at 0)
// from a run-time return address first.
func ExampleOpen() {
	raw, err := os.ReadFile("../../testdata/debuginfo/bin/gcc-dwarf5-so.elf.gz")
	if err != nil {
		fmt.Println(err)
		return
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		fmt.Println(err)
		return
	}
	dir, err := os.MkdirTemp("", "debuginfo")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	lib := filepath.Join(dir, "libtest.so")
	out, err := os.Create(lib)
	if err == nil {
		_, err = io.Copy(out, zr)
		out.Close()
	}
	if err != nil {
		fmt.Println(err)
		return
	}

	f, err := debuginfo.Open(lib)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	const bias = 0x7f12340000 // where the library was mapped
	const ra = bias + 0x750   // a return address into other, from a stack
	frames, err := f.Lookup(ra-bias, debuginfo.ReturnAddress)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, fr := range frames {
		fmt.Printf("%s at %s:%d\n", fr.Func, fr.File, fr.Line)
	}
	// Output:
	// leaf_add at src/inl.h:11
	// twice at src/other.c:6
	// other at src/other.c:11
}
