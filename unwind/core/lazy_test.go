package core

import (
	"bytes"
	"encoding/binary"
	"os"
	"sync"
	"testing"

	"github.com/unwindkit/unwindkit/internal/elfcore"
	"github.com/unwindkit/unwindkit/unwind"
)

const (
	stack = 0x7ff000
	alt   = 0xa00000
	heap  = 0x1000000
	text  = 0x400000
)

// lazyCore is a core whose frame chain leads from the stack into a second
// stack no register points into, beside a 1 MiB heap.
func lazyCore() []byte {
	le := binary.LittleEndian
	s := make([]byte, 0x1000)
	a := make([]byte, 0x1000)
	le.PutUint64(s[0x800:], alt+0x100) // record 1 -> record 2 on the other stack
	le.PutUint64(s[0x808:], text+0x104)
	le.PutUint64(a[0x100:], 0) // record 2 ends the chain
	le.PutUint64(a[0x108:], text+0x204)
	pr := make([]byte, 392)
	le.PutUint64(pr[112+29*8:], stack+0x800)
	le.PutUint64(pr[112+31*8:], stack+0x7f0)
	le.PutUint64(pr[112+32*8:], text+0x10)
	bd := &elfcore.Builder{
		Notes: []elfcore.BNote{{Name: "CORE", Type: 1, Desc: pr}},
		Loads: []elfcore.BLoad{
			{VAddr: stack, Flags: 6, Data: s},
			{VAddr: alt, Flags: 6, Data: a},
			{VAddr: heap, Flags: 6, Data: make([]byte, 1<<20)},
		},
	}
	return bd.Bytes()
}

// TestLazySegments: only the segments an unwind needs are copied: the
// stack, and a second stack the frame chain leads into (loaded when the
// walk first reaches it); a large heap segment is never read.
func TestLazySegments(t *testing.T) {
	b := lazyCore()
	c, err := Load("lazy.core", bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(c.mem.regions); n != 1 {
		t.Fatalf("%d segments loaded by Load, want 1 (the stack)", n)
	}
	fs, err := c.Frames(&c.Threads[0], unwind.MethodFP)
	if err != nil || len(fs) != 3 || fs[2].PC != text+0x204 {
		t.Fatalf("frames %+v, %v", fs, err)
	}
	if n := len(c.mem.regions); n != 2 {
		t.Errorf("%d segments loaded after the walk, want 2 (stack and the other stack, not the heap)", n)
	}
	// Concurrent unwinds of a fresh core load the second stack once and
	// agree (run with -race).
	c, _ = Load("lazy.core", bytes.NewReader(b), int64(len(b)))
	var wg sync.WaitGroup
	res := make([][]unwind.Frame, 4)
	for g := range res {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[g], _ = c.Frames(&c.Threads[0], unwind.MethodFP)
		}()
	}
	wg.Wait()
	for g, fs := range res {
		if len(fs) != 3 || fs[2].PC != text+0x204 {
			t.Errorf("goroutine %d: %+v", g, fs)
		}
	}
	if n := len(c.mem.regions); n != 2 {
		t.Errorf("%d segments loaded by concurrent walks, want 2", n)
	}
}

// TestOpenFile: a Core from Open reads segments lazily from its file, so
// an unwind that needs a segment Load did not read works after Open
// returns, until Close.
func TestOpenFile(t *testing.T) {
	p := t.TempDir() + "/lazy.core"
	if err := os.WriteFile(p, lazyCore(), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Open(p, "")
	if err != nil {
		t.Fatal(err)
	}
	if fs, err := c.Frames(&c.Threads[0], unwind.MethodFP); err != nil || len(fs) != 3 {
		t.Errorf("FP after Open: %d frames, %v", len(fs), err)
	}
	if err := c.Close(); err != nil {
		t.Error(err)
	}
}
