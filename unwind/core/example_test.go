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
	// fp: rec rec rec rec rec rec_root main __libc_start_call_main __libc_start_main _start err: <nil>
	// scs: rec rec rec rec rec_root main err: <nil>
}

// Linux 7.2 wrote this core of a GCS-enabled program that crashed in a
// leaf: NT_ARM_GCS gives the thread's GCSPR_EL0, and the GCS copy has
// the leaf's caller (leaf_mid), which only x30 held, and glibc's frames,
// which push nothing on the shadow call stack.
func ExampleCore_Frames_gcs() {
	raw := readGz("../../testdata/arm64/gcs/cores/leaf.core.gz")
	sym := readGz("../../testdata/arm64/gcs/cores/gcs-core.sym.gz")
	c, err := core.Load("leaf.core", bytes.NewReader(raw), int64(len(raw)), core.ObjectFile{Path: "gcs", Data: sym})
	if err != nil {
		fmt.Println(err)
		return
	}
	t := &c.Threads[0]
	fmt.Printf("GCSPR_EL0 %#x, enabled %v\n", t.GCS.GCSPR, t.GCS.Enabled())
	for _, m := range []unwind.Method{unwind.MethodGCS, unwind.MethodSCS} {
		fs, err := c.Frames(t, m)
		fmt.Print(m, ":")
		for _, f := range fs {
			fmt.Print(" ", c.Symbolizer().Func(f.PC))
		}
		fmt.Println(" err:", err)
	}
	// Output:
	// GCSPR_EL0 0xfffff7dfffd0, enabled true
	// gcs: leaf_mid run_leaf main __libc_start_call_main __libc_start_main err: <nil>
	// scs: run_leaf main err: <nil>
}
