package core

import (
	"fmt"

	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/internal/elfcore"
	"github.com/unwindkit/unwindkit/internal/mem"
)

const pfW = 2

// memory is the part of the core the unwinders read: every writable
// segment with bytes in the file (stacks, shadow stacks, data), as
// bounds-checked regions. The bytes copied never exceed the file's size.
type memory struct {
	m      mem.Memory
	stacks []fp.Stack // every region, as an extra stack of the FP walk
	segs   []elfcore.Prog
}

func newMemory(f *elfcore.File) (*memory, error) {
	m := &memory{}
	for _, p := range f.Loads {
		if p.Flags&pfW == 0 || p.FileSz == 0 || p.VAddr%8 != 0 || p.FileSz%8 != 0 {
			continue
		}
		b := make([]byte, p.FileSz)
		if err := f.ReadAt(b, p.VAddr); err != nil {
			return nil, err
		}
		name := fmt.Sprintf("segment %d", p.Index)
		r, err := mem.NewRegionBytes(name, "data", p.VAddr, b)
		if err != nil {
			return nil, f.Errf(name, int64(p.Off), "%v", err)
		}
		if err := m.m.Add(r); err != nil {
			return nil, f.Errf(name, int64(p.Off), "%v", err)
		}
		m.stacks = append(m.stacks, fp.Stack{Kind: fp.Extra, Low: r.Base, High: r.End(), Name: name})
		m.segs = append(m.segs, p)
	}
	return m, nil
}

// findSCS sets t's shadow call stack from x18: the writable segment that
// holds the newest entry (x18-8), or x18 itself for an empty stack.
func (c *Core) findSCS(t *Thread) {
	x18 := t.Regs.X[18]
	if x18 == 0 || x18%8 != 0 {
		t.SCSNote = fmt.Sprintf("x18 %#x is not a shadow call stack pointer", x18)
		return
	}
	r := c.mem.m.Find(x18 - 8)
	if r == nil || r.Base == x18 {
		r = c.mem.m.Find(x18)
	}
	if r == nil {
		t.SCSNote = fmt.Sprintf("x18 %#x is in no writable segment held by the core", x18)
		return
	}
	if sp := c.mem.m.Find(t.Regs.SP); sp == r {
		t.SCSNote = fmt.Sprintf("x18 %#x is in the stack's own segment: not a separate shadow call stack", x18)
		return
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
}
