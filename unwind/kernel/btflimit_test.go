package kernel_test

import (
	"encoding/binary"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/unwindkit/unwindkit/internal/kcapture"
	"github.com/unwindkit/unwindkit/unwind/kernel"
	"github.com/unwindkit/unwindkit/unwind/vmcore"
)

// TestBTFSizeBoundedByDump: a BTF size the dump cannot hold (here 60 MiB,
// under the 64 MiB bound, from a dump of a few MiB) is refused before
// anything is read or allocated, naming the dump and the address; the
// offsets then come from the table, as without BTF.
func TestBTFSizeBoundedByDump(t *testing.T) {
	cp, err := kcapture.OpenCapture("../../testdata/kernel/deb-6.1")
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

// loopBTF is BTF whose struct task_struct (type 1, 4,096 bytes) has 16
// anonymous members of type task_struct itself.
func loopBTF() []byte {
	le := binary.LittleEndian
	strs := []byte("\x00task_struct\x00")
	var types []byte
	types = le.AppendUint32(types, 1)                // name "task_struct"
	types = le.AppendUint32(types, uint32(4)<<24|16) // BTF_KIND_STRUCT, 16 members
	types = le.AppendUint32(types, 4096)             // size
	for i := range 16 {
		types = le.AppendUint32(types, 0)            // anonymous
		types = le.AppendUint32(types, 1)            // task_struct
		types = le.AppendUint32(types, uint32(64*i)) // bit offset
	}
	h := make([]byte, 24)
	le.PutUint16(h, 0xeb9f)
	h[2] = 1
	le.PutUint32(h[4:], 24)
	le.PutUint32(h[12:], uint32(len(types)))
	le.PutUint32(h[16:], uint32(len(types)))
	le.PutUint32(h[20:], uint32(len(strs)))
	return append(append(h, types...), strs...)
}

// TestNewOverBTFLoop: kernel.New over BTF whose task_struct contains
// itself through anonymous members answers at once, the task_struct
// offsets unknown (before: 16^9 descents per lookup, hours).
func TestNewOverBTFLoop(t *testing.T) {
	btf, err := vmcore.ParseBTF(loopBTF())
	if err != nil {
		t.Fatal(err)
	}
	cp, err := kcapture.OpenCapture("../../testdata/kernel/deb-6.1")
	if err != nil {
		t.Fatal(err)
	}
	s0 := &cp.Expected.Stops[0]
	v, err := cp.Vmcore(s0.Name)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := kernel.New(v, cp.Syms, kernel.Options{Current: s0.SPEL0(), BTF: btf, BTFFrom: "loopBTF"})
		done <- err
	}()
	select {
	case err := <-done:
		t.Logf("kernel.New over the loop: %v", time.Since(start))
		if err != nil {
			t.Errorf("New: %v (the table gives pt_regs for 6.1)", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatalf("kernel.New over a BTF type loop still running after 2 s")
	}
}
