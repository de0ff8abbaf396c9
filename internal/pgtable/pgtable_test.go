package pgtable

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math/bits"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/internal/errs"
)

// phys is a sparse physical memory of 8-byte words.
type phys map[uint64]uint64

func (p phys) read(pa uint64) (uint64, error) {
	v, ok := p[pa]
	if !ok {
		return 0, fmt.Errorf("pa %#x outside memory", pa)
	}
	return v, nil
}

// builder allocates tables and maps pages in a format.
type builder struct {
	f    Format
	mem  phys
	next uint64
	root uint64
}

func newBuilder(f Format, base uint64) *builder {
	b := &builder{f: f, mem: phys{}, next: base}
	b.root = b.alloc()
	return b
}

func (b *builder) alloc() uint64 {
	pa := b.next
	b.next += 1 << b.f.PageShift
	for i := uint64(0); i < 1<<b.f.PageShift; i += 8 {
		b.mem[pa+i] = 0
	}
	return pa
}

// Read, Write and NewTable make a builder the Memory that Map builds in.
func (b *builder) Read(pa uint64) (uint64, error) { return b.mem.read(pa) }
func (b *builder) Write(pa, v uint64) error       { b.mem[pa] = v; return nil }
func (b *builder) NewTable() (uint64, error)      { return b.alloc(), nil }

// mapAt maps va to pa with a leaf at level leaf (3: page).
func (b *builder) mapAt(t testing.TB, va, pa uint64, leaf int, extra uint64) {
	t.Helper()
	if err := Map(b.f, b.root, va, pa, leaf, extra, b); err != nil {
		t.Fatal(err)
	}
}

func TestWalkFormats(t *testing.T) {
	formats := []struct {
		f      Format
		levels int
		pa     uint64 // a physical address to map, above 48 bits where the format allows
		blocks []int
	}{
		{Format{PageShift: 12, VABits: 39}, 3, 0x4000_0000, []int{1, 2}},
		{Format{PageShift: 12, VABits: 48}, 4, 0x4000_0000, []int{1, 2}},
		{Format{PageShift: 12, VABits: 48, LPA2: true}, 4, 0x000f_0000_4000_0000, []int{0, 1, 2}},
		{Format{PageShift: 12, VABits: 52, LPA2: true}, 5, 0x000f_0000_4000_0000, []int{0, 1, 2}},
		{Format{PageShift: 14, VABits: 47}, 3, 0x4000_0000, []int{2}},
		{Format{PageShift: 14, VABits: 48}, 4, 0x4000_0000, []int{2}},
		{Format{PageShift: 14, VABits: 52, LPA2: true}, 4, 0x000c_0000_4000_0000, []int{1, 2}},
		{Format{PageShift: 16, VABits: 42}, 2, 0x4000_0000, []int{2}},
		{Format{PageShift: 16, VABits: 48}, 3, 0x4000_0000, []int{2}},
		{Format{PageShift: 16, VABits: 52, LPA: true}, 3, 0x000a_0000_4000_0000, []int{1, 2}},
	}
	for _, tc := range formats {
		t.Run(fmt.Sprintf("%dK-%d-lpa2=%v-lpa=%v", 1<<tc.f.PageShift>>10, tc.f.VABits, tc.f.LPA2, tc.f.LPA), func(t *testing.T) {
			if n, _ := tc.f.Levels(); n != tc.levels {
				t.Fatalf("%d levels, want %d", n, tc.levels)
			}
			b := newBuilder(tc.f, 0x1000_0000)
			va := uint64(1)<<(tc.f.VABits-1) | 0x1234_5000&(1<<(tc.f.VABits-1)-1)
			va &^= 1<<tc.f.PageShift - 1
			b.mapAt(t, va, tc.pa, 3, 0)
			r, err := Walk(tc.f, b.root, va|0x18, b.mem.read)
			if err != nil {
				t.Fatal(err)
			}
			if r.PA != tc.pa|0x18 || r.Level != 3 || r.Steps != tc.levels {
				t.Errorf("page: %+v, want pa %#x at level 3 in %d steps", r, tc.pa|0x18, tc.levels)
			}
			// The upper half: the same low bits select the same entry.
			if r2, err := Walk(tc.f, b.root, va|0x18|^uint64(0)<<tc.f.VABits, b.mem.read); err != nil || r2.PA != r.PA {
				t.Errorf("upper-half address: %+v, %v", r2, err)
			}
			for i, lvl := range tc.blocks {
				bits := tc.f.PageShift - 3
				shift := tc.f.PageShift + uint(3-lvl)*bits
				if shift >= tc.f.VABits-1 {
					continue
				}
				bva := uint64(i+1) << shift
				bpa := tc.pa &^ (1<<shift - 1)
				b.mapAt(t, bva, bpa, lvl, 1<<52)
				off := uint64(1)<<shift - 8
				r, err := Walk(tc.f, b.root, bva+off, b.mem.read)
				if err != nil {
					t.Fatalf("level %d block: %v", lvl, err)
				}
				if r.PA != bpa+off || r.Level != lvl || r.Size != 1<<shift || !r.Contiguous {
					t.Errorf("level %d block: %+v, want pa %#x", lvl, r, bpa+off)
				}
			}
			// An unmapped address faults.
			if _, err := Walk(tc.f, b.root, va+1<<tc.f.PageShift, b.mem.read); !errors.Is(err, ErrNotMapped) {
				t.Errorf("unmapped: %v, want ErrNotMapped", err)
			}
		})
	}
}

// TestContiguous maps 16 pages with the contiguous hint, as the kernel
// maps its image: every page of the run translates to its own frame.
func TestContiguous(t *testing.T) {
	f := Format{PageShift: 12, VABits: 48}
	b := newBuilder(f, 0x1000_0000)
	va := uint64(0xffff_8000_0800_0000)
	for i := uint64(0); i < 16; i++ {
		b.mapAt(t, va+i<<12, 0x4020_0000+i<<12, 3, 1<<52)
	}
	for i := uint64(0); i < 16; i++ {
		r, err := Walk(f, b.root, va+i<<12+8, b.mem.read)
		if err != nil || r.PA != 0x4020_0000+i<<12+8 || !r.Contiguous {
			t.Errorf("page %d: %+v, %v", i, r, err)
		}
	}
}

func TestWalkBad(t *testing.T) {
	f := Format{PageShift: 12, VABits: 48}
	// A level 0 entry pointing at the root itself: the tables loop.
	b := newBuilder(f, 0x1000_0000)
	b.mem[b.root] = b.root | 3
	_, err := Walk(f, b.root, 0, b.mem.read)
	var pe *Error
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "loop") || !errors.Is(err, errs.ErrCorrupt) {
		t.Errorf("loop: %v", err)
	}
	// A table outside memory.
	b = newBuilder(f, 0x1000_0000)
	b.mem[b.root] = 0x7700_0000 | 3
	if _, err := Walk(f, b.root, 0, b.mem.read); !errors.As(err, &pe) || pe.Level != 1 || pe.DescPA != 0x7700_0000 {
		t.Errorf("outside: %v", err)
	}
	// A block at level 0 without LPA2.
	b = newBuilder(f, 0x1000_0000)
	b.mem[b.root] = 0x4000_0000 | 1
	if _, err := Walk(f, b.root, 0, b.mem.read); !errors.As(err, &pe) || !strings.Contains(err.Error(), "block") {
		t.Errorf("level 0 block: %v", err)
	}
	for _, bad := range []Format{{PageShift: 13, VABits: 48}, {PageShift: 12, VABits: 52}, {PageShift: 16, VABits: 52, LPA2: true}, {PageShift: 12, VABits: 60}} {
		if _, err := Walk(bad, 0, 0, b.mem.read); err == nil {
			t.Errorf("format %+v accepted", bad)
		}
	}
}

func FuzzWalk(f *testing.F) {
	f.Add(make([]byte, 64), uint64(0), uint8(12), uint8(48), false)
	f.Add([]byte{3, 0, 0, 0, 0, 0, 0, 0}, uint64(0xffff000012345678), uint8(12), uint8(52), true)
	f.Fuzz(func(t *testing.T, mem []byte, va uint64, shift, vabits uint8, lpa2 bool) {
		fm := Format{PageShift: uint(shift), VABits: uint(vabits), LPA2: lpa2, LPA: !lpa2}
		read := func(pa uint64) (uint64, error) {
			if pa%8 != 0 || pa >= uint64(len(mem)) || uint64(len(mem))-pa < 8 {
				return 0, errors.New("outside")
			}
			return binary.LittleEndian.Uint64(mem[pa:]), nil
		}
		r, err := Walk(fm, 0, va, read)
		if err == nil && (r.Steps < 1 || r.Steps > 5 || r.PA&(r.Size-1) != va&(r.Size-1)) {
			t.Fatalf("bad result %+v", r)
		}
	})
}

// FuzzMap maps va to pa through arbitrary existing tables (mem, at
// physical address 0; new tables come from above it): Map never panics
// and, when it succeeds, Walk translates va to pa at the leaf's level, so
// hostile tables can neither make Map go round nor write where the walk
// does not read.
func FuzzMap(f *testing.F) {
	f.Add(make([]byte, 4096), uint64(0x1234_5000), uint64(0x4000_0000), uint8(12), uint8(48), int8(3), false)
	f.Add([]byte{3, 0, 0, 0, 0, 0, 0, 0}, uint64(0xffff000012345678), uint64(0x8000_0000), uint8(12), uint8(52), int8(2), true)
	f.Fuzz(func(t *testing.T, mem []byte, va, pa uint64, shift, vabits uint8, leaf int8, lpa2 bool) {
		fm := Format{PageShift: uint(shift), VABits: uint(vabits), LPA2: lpa2, LPA: !lpa2}
		m := &fuzzMem{mem: mem, extra: phys{}, next: (uint64(len(mem)) + 1<<16) &^ (1<<16 - 1)}
		if err := Map(fm, 0, va, pa, int(leaf), 0, m); err != nil {
			return
		}
		r, err := Walk(fm, 0, va, m.Read)
		if err != nil {
			t.Fatalf("Map succeeded, then Walk: %v", err)
		}
		want := fm.OA(fm.Desc(pa&^(r.Size-1))|3, uint(bits.TrailingZeros64(r.Size))) | va&(r.Size-1)
		if r.Level != int(leaf) || r.PA != want {
			t.Fatalf("Map(va %#x, pa %#x, level %d), then Walk: %+v, want pa %#x", va, pa, leaf, r, want)
		}
	})
}

// fuzzMem is mem (from physical address 0) and, above it, the tables
// NewTable hands out.
type fuzzMem struct {
	mem   []byte
	extra phys
	next  uint64
}

func (m *fuzzMem) in(pa uint64) bool {
	return pa%8 == 0 && pa < uint64(len(m.mem)) && uint64(len(m.mem))-pa >= 8
}

func (m *fuzzMem) Read(pa uint64) (uint64, error) {
	if m.in(pa) {
		return binary.LittleEndian.Uint64(m.mem[pa:]), nil
	}
	return m.extra.read(pa)
}

func (m *fuzzMem) Write(pa, v uint64) error {
	if m.in(pa) {
		binary.LittleEndian.PutUint64(m.mem[pa:], v)
		return nil
	}
	if _, err := m.extra.read(pa); err != nil {
		return err
	}
	m.extra[pa] = v
	return nil
}

func (m *fuzzMem) NewTable() (uint64, error) {
	pa := m.next
	m.next += 1 << 16 // the largest granule: aligned for every format
	for i := uint64(0); i < 1<<16; i += 8 {
		m.extra[pa+i] = 0
	}
	return pa, nil
}

// TestDescInvertsOA checks that Desc puts every output address a format
// can express where OA reads it back, for tables, blocks and pages.
func TestDescInvertsOA(t *testing.T) {
	for _, f := range []Format{
		{PageShift: 12, VABits: 48},
		{PageShift: 12, VABits: 52, LPA2: true},
		{PageShift: 14, VABits: 52, LPA2: true},
		{PageShift: 16, VABits: 48},
		{PageShift: 16, VABits: 52, LPA: true},
	} {
		oaBits := uint(48)
		if f.LPA2 || f.LPA {
			oaBits = 52
		}
		for i := range uint64(2000) {
			shift := f.PageShift + uint(i%3)*(f.PageShift-3) // page, level 2, level 1
			oa := (i*0x9e3779b97f4a7c15)&(1<<oaBits-1)&^(1<<shift-1) | 1<<(oaBits-1)
			if got := f.OA(f.Desc(oa)|3, shift); got != oa {
				t.Fatalf("%+v shift %d: OA(Desc(%#x)) = %#x", f, shift, oa, got)
			}
		}
	}
}

// TestMapRefuses checks what Map will not do: a leaf at a level the format
// has no block (or no level) for, a table where a block already maps,
// tables that loop, and building on when memory fails; each leaves the
// tables as they were.
func TestMapRefuses(t *testing.T) {
	f := Format{PageShift: 14, VABits: 48} // levels 0-3; blocks only at level 2
	b := newBuilder(f, 0x1000_0000)
	for _, leaf := range []int{-1, 0, 1, 4} {
		if err := Map(f, b.root, 0x4000_0000, 0x8000_0000, leaf, 0, b); err == nil {
			t.Errorf("leaf at level %d: no error", leaf)
		}
	}
	if err := Map(Format{PageShift: 13, VABits: 48}, b.root, 0, 0, 3, 0, b); err == nil {
		t.Error("an invalid format: no error")
	}
	b.mapAt(t, 0x4000_0000, 0x8000_0000, 2, 0) // a 32 MiB block
	before := maps.Clone(b.mem)
	err := Map(f, b.root, 0x4000_4000, 0x9000_0000, 3, 0, b)
	var pe *Error
	if !errors.As(err, &pe) || pe.Level != 2 || !strings.Contains(err.Error(), "block") {
		t.Errorf("a page inside a block: %v, want an *Error at level 2 naming the block", err)
	}
	if !maps.Equal(b.mem, before) {
		t.Error("a refused Map changed the tables")
	}
	if r, err := Walk(f, b.root, 0x4000_4000, b.mem.read); err != nil || r.PA != 0x8000_4000 || r.Level != 2 {
		t.Errorf("the block after a refused Map: %+v, %v", r, err)
	}
	// A table that points back at the root: Map refuses it, as Walk does,
	// and writes nothing.
	loop := newBuilder(f, 0x2000_0000)
	loop.mem[loop.root] = f.Desc(loop.root) | 3 // entry 0 of level 0: the root again
	before = maps.Clone(loop.mem)
	if err := Map(f, loop.root, 0x1000, 0x8000_0000, 3, 0, loop); err == nil || !strings.Contains(err.Error(), "loop") {
		t.Errorf("tables that loop: %v, want an error naming the loop", err)
	}
	if !maps.Equal(loop.mem, before) {
		t.Error("Map into tables that loop changed them")
	}
	full := errors.New("out of table pages")
	err = Map(f, b.root, 0x8000_0000_0000, 0x8000_0000, 3, 0, failingTables{b, full})
	if !errors.Is(err, full) {
		t.Errorf("NewTable failing: %v, want its error", err)
	}
}

// failingTables is a builder whose NewTable fails.
type failingTables struct {
	*builder
	err error
}

func (m failingTables) NewTable() (uint64, error) { return 0, m.err }
