package pgtable

import (
	"encoding/binary"
	"errors"
	"fmt"
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

// enc encodes output address oa into a descriptor of the format.
func (b *builder) enc(oa uint64) uint64 {
	switch {
	case b.f.LPA2:
		return oa&(1<<50-1) | (oa>>50&3)<<8
	case b.f.LPA:
		return oa&(1<<48-1) | (oa>>48&0xf)<<12
	}
	return oa
}

// mapAt maps va to pa with a leaf at level leaf (3: page).
func (b *builder) mapAt(va, pa uint64, leaf int, extra uint64) {
	bits := b.f.PageShift - 3
	n, start := b.f.Levels()
	table := b.root
	for i := 0; i < n; i++ {
		level := start + i
		shift := b.f.PageShift + uint(3-level)*bits
		idxBits := bits
		if i == 0 {
			idxBits = b.f.VABits - shift
		}
		slot := table + (va>>shift&(1<<idxBits-1))*8
		if level == leaf {
			d := b.enc(pa&^(1<<shift-1)) | 1 | extra
			if level == 3 {
				d |= 2
			}
			b.mem[slot] = d
			return
		}
		d := b.mem[slot]
		if d&3 != 3 {
			t := b.alloc()
			d = b.enc(t) | 3
			b.mem[slot] = d
		}
		table = b.f.OA(d, b.f.PageShift)
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
			b.mapAt(va, tc.pa, 3, 0)
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
				b.mapAt(bva, bpa, lvl, 1<<52)
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
			if _, err := Walk(tc.f, b.root, va+1<<tc.f.PageShift, b.mem.read); !errors.Is(err, ErrFault) {
				t.Errorf("unmapped: %v, want ErrFault", err)
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
		b.mapAt(va+i<<12, 0x4020_0000+i<<12, 3, 1<<52)
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
