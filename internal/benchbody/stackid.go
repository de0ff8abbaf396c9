package benchbody

import (
	"runtime"
	"sync"
	"testing"
	"unsafe"

	"github.com/unwindkit/unwindkit/depot"
	ilive "github.com/unwindkit/unwindkit/internal/live"
	"github.com/unwindkit/unwindkit/unwind/live"
	"github.com/unwindkit/unwindkit/unwind/live/stackid"
)

// The contenders for capturing a deduplicated stack of the running Go
// program (unwind/live/stackid's BenchmarkStackIDSideBySide and the
// report's table): each gets a 4-byte ID for its caller's stack, depth
// frames kept of a deeper stack.

// StackIDDepths are the depths of the comparison.
var StackIDDepths = []int{8, 32, 128}

// StackIDContender is one way to get a stack's ID, or a part of one (a
// floor). Fn reports whether it did what it should.
type StackIDContender struct {
	Name  string
	Desc  string
	Floor bool
	Fn    func() bool
}

// StackIDMutexPeer is the idiom a Go programmer writes today:
// runtime.Callers, then a map[string]uint32 keyed by the pcs' bytes
// (looked up without allocating) behind a sync.Mutex.
type StackIDMutexPeer struct {
	mu sync.Mutex
	m  map[string]uint32
}

// Save returns the ID of pcs, storing a copy if they are new.
func (p *StackIDMutexPeer) Save(pcs []uintptr) uint32 {
	key := unsafe.String((*byte)(unsafe.Pointer(unsafe.SliceData(pcs))), len(pcs)*int(unsafe.Sizeof(uintptr(0))))
	p.mu.Lock()
	defer p.mu.Unlock()
	if h, ok := p.m[key]; ok {
		return h
	}
	if p.m == nil {
		p.m = map[string]uint32{}
	}
	h := uint32(len(p.m) + 1)
	p.m[string(append([]byte(nil), key...))] = h
	return h
}

// StackIDContenders returns the contenders for depth, in this order:
// onepass, twopass, peer, callersfp, callers, runtime, and the floors
// walkhash and lookup. Each stores (or hashes) exactly depth frames when
// called with more than depth frames below it, from its own call site.
func StackIDContenders(depth int) ([]StackIDContender, error) {
	tb, err := stackid.New(depot.Config{MaxFrames: depth})
	if err != nil {
		return nil, err
	}
	d, err := depot.New(depot.Config{MaxFrames: depth})
	if err != nil {
		return nil, err
	}
	peer := &StackIDMutexPeer{}
	pc := make([]uintptr, depth)
	rec := make([]uint64, depth)
	k := d.HashKey()
	stored := make([]uint64, depth)
	for i := range stored {
		stored[i] = 0x4a0000 + uint64(i)*0x40
	}
	storedHash := k.Sum(stored)
	if _, err := d.Save(stored); err != nil {
		return nil, err
	}
	return []StackIDContender{
		{Name: "onepass", Desc: "stackid.Table.Save (one pass)", Fn: func() bool { h, err := tb.Save(1); return err == nil && h != 0 }},
		{Name: "twopass", Desc: "live.Callers + depot.SavePCs", Fn: func() bool {
			n := live.Callers(1, pc)
			h, err := d.SavePCs(pc[:n])
			return err == nil && h != 0 && n == depth
		}},
		{Name: "peer", Desc: "runtime.Callers + map behind a mutex", Fn: func() bool {
			n := runtime.Callers(1, pc)
			return peer.Save(pc[:n]) != 0 && n == depth
		}},
		{Name: "callersfp", Desc: "live.CallersFP alone", Fn: func() bool { n, err := live.CallersFP(1, pc); return err == nil && n == depth }},
		{Name: "callers", Desc: "live.Callers alone", Fn: func() bool { return live.Callers(1, pc) == depth }},
		{Name: "runtime", Desc: "runtime.Callers alone", Fn: func() bool { return runtime.Callers(1, pc) == depth }},
		{Name: "walkhash", Desc: "the walk and hash alone (a save that does not guess)", Floor: true, Fn: func() bool {
			fp, _ := ilive.FrameAndPC()
			n, _, ok := ilive.WalkHash(fp, fp, 0, rec, k.Seed, k.Mul)
			return ok && n == depth
		}},
		{Name: "lookup", Desc: "depot.LookupHashed alone (a hot trace, its hash given)", Floor: true, Fn: func() bool {
			_, ok := d.LookupHashed(stored, storedHash)
			return ok
		}},
	}, nil
}

// StackIDSupported reports whether the comparison can run here (it needs
// frame pointers: live.CallersFP).
func StackIDSupported() bool { return ilive.Supported }

// StackIDBody returns the body that times contender i of depth, called
// with depth+8 frames below it.
func StackIDBody(depth, i int) func(*testing.B) {
	return func(b *testing.B) {
		cs, err := StackIDContenders(depth)
		if err != nil {
			b.Fatal(err)
		}
		fn := cs[i].Fn
		liveAtDepth(depth+8, func() {
			for first := true; first || b.Loop(); first = false {
				if !RunBatch(fn, 1) {
					b.Fatalf("%s failed", cs[i].Name)
				}
			}
		})
	}
}

// RunBatch calls fn n times, from one call site (so that every call of a
// contender has the same stack), and reports whether the last call
// succeeded.
//
//go:noinline
func RunBatch(fn func() bool, n int) bool {
	ok := false
	for range n {
		ok = fn()
	}
	return ok
}
