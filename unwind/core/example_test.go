package core_test

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"

	"github.com/unwindkit/unwindkit/unwind"
	"github.com/unwindkit/unwindkit/unwind/core"
)

func readGz(path string) []byte {
	f, err := os.Open(path)
	if err != nil {
		panic(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		panic(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		panic(err)
	}
	return b
}

// A program built with GCC and -fsanitize=shadow-call-stack crashed at the
// bottom of a recursion under qemu-aarch64: unwind its thread with both
// techniques. GCC shrink-wraps rec, so the innermost rec has no frame yet
// and its caller is only in x30.
func Example() {
	raw := readGz("../../testdata/cores/cores/gcc-nopac-nopauth-recurse.core.gz")
	exe := readGz("../../testdata/cores/bin/gcc-nopac.elf.gz")
	c, err := core.Load("recurse.core", bytes.NewReader(raw), int64(len(raw)),
		core.ObjectFile{Path: "gcc-nopac.elf", Data: exe})
	if err != nil {
		fmt.Println(err)
		return
	}
	t := &c.Threads[0]
	fmt.Println("signal", t.Signal, "shadow call stack", t.HasSCS)
	for _, m := range []unwind.Method{unwind.MethodFP, unwind.MethodSCS} {
		fs, err := c.Frames(t, m)
		fmt.Print(m, ":")
		for _, f := range fs {
			fmt.Print(" ", c.Symbolizer().Func(f.PC))
		}
		fmt.Println(" err:", err)
	}
	// Output:
	// signal 11 shadow call stack true
	// fp: rec rec rec rec rec rec_root main __libc_start_call_main __libc_start_main_impl _start err: <nil>
	// scs: rec rec rec rec rec_root main err: <nil>
}
