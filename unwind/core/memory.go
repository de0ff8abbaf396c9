package core

import (
	"errors"
	"fmt"
	"sync"

	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/internal/elfcore"
	"github.com/unwindkit/unwindkit/internal/errs"
	"github.com/unwindkit/unwindkit/internal/mem"
)

const pfW = 2

// memory is the part of the core the unwinders read: the writable
// segments holding a thread's sp, x29 or x18, and those a frame chain
// leads into, copied into bounds-checked regions when first needed, so a
// core of gigabytes of heap costs only its stacks. The bytes copied never
// exceed the file's size.
type memory struct {
	f       *elfcore.File
	mu      sync.Mutex
	regions []*mem.Region // loaded, in load order
	loaded  map[int]*mem.Region
}

func newMemory(f *elfcore.File) *memory {
	return &memory{f: f, loaded: map[int]*mem.Region{}}
}

// ensure loads the writable segment containing addr, if there is one with
// bytes in the file, and returns its region (nil otherwise).
func (m *memory) ensure(addr uint64) (*mem.Region, error) {
	p, ok := m.f.Find(addr)
	if !ok || p.Flags&pfW == 0 || p.FileSz == 0 || p.VAddr%8 != 0 || p.FileSz%8 != 0 || addr-p.VAddr >= p.FileSz {
		return nil, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if r := m.loaded[p.Index]; r != nil {
		return r, nil
	}
	b := make([]byte, p.FileSz)
	if err := m.f.ReadAt(b, p.VAddr); err != nil {
		return nil, err
	}
	name := fmt.Sprintf("segment %d", p.Index)
	r, err := mem.NewRegionBytes(name, "data", p.VAddr, b)
	if err != nil {
		return nil, m.f.Errf(name, int64(p.Off), "%v", err)
	}
	m.loaded[p.Index] = r
	m.regions = append(m.regions, r)
	return r, nil
}

// snapshot returns the FP walk's stacks over the regions loaded so far
// (the one holding sp is the task stack), and how many regions it holds
// (for missing).
func (m *memory) snapshot(sp uint64) ([]fp.Stack, int) {
	m.mu.Lock()
	rs := append([]*mem.Region(nil), m.regions...)
	m.mu.Unlock()
	var stacks []fp.Stack
	for _, r := range rs {
		k := fp.Extra
		if r.Contains(sp, 1) {
			k = fp.Task
		}
		stacks = append(stacks, fp.Stack{Kind: k, Low: r.Base, High: r.End(), Name: r.Name, Data: r.View()})
	}
	return stacks, len(rs)
}

// missing returns the address of an FP-walk error that points into a
// writable segment not loaded yet.
func (m *memory) missing(err error, inSnapshot int) (uint64, bool) {
	var ce *errs.CorruptError
	if !errors.As(err, &ce) {
		return 0, false
	}
	p, ok := m.f.Find(ce.Addr)
	if !ok || p.Flags&pfW == 0 || p.FileSz == 0 {
		return 0, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.loaded[p.Index]
	if r == nil {
		return ce.Addr, true
	}
	// Loaded, but perhaps by another goroutine after this walk took its
	// snapshot of the first inSnapshot regions: then walk again.
	for _, s := range m.regions[:min(inSnapshot, len(m.regions))] {
		if s == r {
			return 0, false
		}
	}
	return ce.Addr, true
}

// findSCS sets t's shadow call stack from x18: the writable segment that
// holds the newest entry (x18-8), or x18 itself for an empty stack.
func (c *Core) findSCS(t *Thread) error {
	x18 := t.Regs.X[18]
	if x18 == 0 || x18%8 != 0 {
		t.SCSNote = fmt.Sprintf("x18 %#x is not a shadow call stack pointer", x18)
		return nil
	}
	r, err := c.mem.ensure(x18 - 8)
	if err == nil && (r == nil || r.Base == x18) {
		r, err = c.mem.ensure(x18)
	}
	if err != nil {
		return err
	}
	if r == nil {
		t.SCSNote = fmt.Sprintf("x18 %#x is in no writable segment held by the core", x18)
		return nil
	}
	if r.Contains(t.Regs.SP, 1) {
		t.SCSNote = fmt.Sprintf("x18 %#x is in the stack's own segment: not a separate shadow call stack", x18)
		return nil
	}
	t.SCSBase, t.HasSCS, t.SCSBaseGuessed = r.Base, true, true
	// Guard pages: inaccessible mappings right below and above.
	below, above := false, false
	for _, p := range c.f.Loads {
		if p.Flags&7 != 0 {
			continue
		}
		if p.VAddr+p.MemSz == r.Base {
			below = true
		}
		if p.VAddr == r.End() {
			above = true
		}
	}
	t.SCSGuarded = below && above
	return nil
}
