package debuginfo_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/unwind/debuginfo"
)

// openCU opens the first compilation unit of Debian's 6.1 -dbg vmlinux,
// cut out by testdata/kernel/dwarfcu (unwind/kernel compares its
// structure offsets with the kernel's BTF).
func openCU(t *testing.T) *debuginfo.File {
	t.Helper()
	const path = "../../testdata/debuginfo/vmlinux-6.1-cu0.debug.gz"
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(io.LimitReader(zr, 16<<20))
	if err != nil {
		t.Fatal(err)
	}
	f, err := debuginfo.NewFile(path, bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestTypesAnswers checks Types' answers and errors on the kernel unit:
// pahole's layout of struct pt_regs (testdata/kernel/deb-6.1/layout.txt:
// stackframe at 304, size 336), a nested path, and an error naming the
// path for a missing struct, a missing member, a path without a member,
// a bitfield and a lookup after Close.
func TestTypesAnswers(t *testing.T) {
	f := openCU(t)
	ty := f.Types()
	if ty.Origin() != "dwarf" {
		t.Errorf("Origin %q", ty.Origin())
	}
	if o, err := ty.Offset("pt_regs.stackframe"); err != nil || o != 304 {
		t.Errorf("pt_regs.stackframe: %d, %v; want 304", o, err)
	}
	if s, err := ty.Size("pt_regs"); err != nil || s != 336 {
		t.Errorf("sizeof(pt_regs): %d, %v; want 336", s, err)
	}
	// layout.txt: task_struct.thread at 3008, thread_struct.cpu_context
	// at 0, cpu_context.pc at 96.
	if o, err := ty.Offset("task_struct.thread.cpu_context.pc"); err != nil || o != 3008+96 {
		t.Errorf("task_struct.thread.cpu_context.pc: %d, %v", o, err)
	}
	for _, c := range []struct{ path, want string }{
		{"no_such_struct.x", "no unit defines struct no_such_struct"},
		{"pt_regs.no_such", "no member no_such"},
		{"pt_regs", "no member path"},
		{"task_struct.sched_reset_on_fork", "is a bitfield"},
		{"pt_regs.pc.x", "x is not in a struct"},
	} {
		if _, err := ty.Offset(c.path); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Offset(%q): %v, want an error saying %q", c.path, err, c.want)
		}
	}
	if _, err := ty.Size("no_such_struct"); err == nil {
		t.Error("Size of a missing struct: no error")
	}
	f.Close()
	if _, err := ty.Offset("pt_regs.pc"); err == nil || !strings.Contains(err.Error(), "after Close") {
		t.Errorf("after Close: %v", err)
	}
}
