package kernel_test

import (
	"runtime"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/unwind/kernel"
)

// TestBTFSizeBoundedByDump: a BTF size the dump cannot hold (here 60 MiB,
// under the 64 MiB bound, from a dump of a few MiB) is refused before
// anything is read or allocated, naming the dump and the address; the
// offsets then come from the table, as without BTF.
func TestBTFSizeBoundedByDump(t *testing.T) {
	cp, err := kernel.OpenCapture("../../testdata/kernel/deb-6.1")
	if err != nil {
		t.Fatal(err)
	}
	s0 := &cp.Expected.Stops[0]
	v, err := cp.Vmcore(s0.Name)
	if err != nil {
		t.Fatal(err)
	}
	var at uint64
	for _, s := range cp.Syms {
		if s.Name == "__start_BTF" {
			at = s.Addr
		}
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	k, err := kernel.New(v, cp.Syms, kernel.Options{Current: s0.SPEL0(), BTFAt: at, BTFSize: 60 << 20})
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if k.BTF != nil {
		t.Errorf("a 60 MiB BTF was parsed")
	}
	var note string
	for _, n := range k.Notes {
		if strings.HasPrefix(n, "BTF: ") {
			note = n
		}
	}
	if !strings.Contains(note, "more than the dump's") || !strings.Contains(note, v.Path) || !strings.Contains(note, "0x") {
		t.Errorf("BTF note %q: want the dump's size refusing it, with the dump's name and the address", note)
	}
	if a := after.TotalAlloc - before.TotalAlloc; a > 32<<20 {
		t.Errorf("New allocated %d bytes", a)
	}
}
