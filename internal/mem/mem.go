// Package mem is unwindkit's one memory abstraction: a set of non-overlapping
// regions of little-endian 8-byte words, every access bounds-checked.
//
// It models the address space an unwinder reads: a kernel's task, IRQ, SDEI
// and shadow call stacks, or the stacks and code captured in a snapshot. No
// access, however wrong the address, panics or touches memory outside a
// region; a failed access reports false.
//
// Words are read and written with sync/atomic, so one goroutine may model a
// CPU writing its stacks while another unwinds them (READ_ONCE/WRITE_ONCE in
// the kernel). The set of regions itself must not change while it is read.
package mem

import (
	"encoding/binary"
	"fmt"
	"sort"
	"sync/atomic"
	"unsafe"
)

// Region is the address range [Base, Base+8*len(words)) backed by words.
type Region struct {
	Name string // human-readable name, e.g. "task0 stack"
	Kind string // free-form kind, e.g. "task", "irq", "scs", "text"
	Base uint64 // lowest address, 8-byte aligned

	words []uint64
}

// NewRegion returns a zeroed region of size bytes at base. base and size must
// be multiples of 8, size non-zero, and the region must not wrap around the
// end of the 64-bit address space (its exclusive end must be representable).
func NewRegion(name, kind string, base, size uint64) (*Region, error) {
	if err := checkShape(name, base, size); err != nil {
		return nil, err
	}
	return &Region{Name: name, Kind: kind, Base: base, words: make([]uint64, size/8)}, nil
}

// NewRegionBytes returns a region at base holding data (little-endian),
// padded with zeros to a multiple of 8 bytes.
func NewRegionBytes(name, kind string, base uint64, data []byte) (*Region, error) {
	size := (uint64(len(data)) + 7) &^ 7
	if err := checkShape(name, base, size); err != nil {
		return nil, err
	}
	r := &Region{Name: name, Kind: kind, Base: base, words: make([]uint64, size/8)}
	for i := range r.words {
		var w [8]byte
		copy(w[:], data[i*8:])
		r.words[i] = binary.LittleEndian.Uint64(w[:])
	}
	return r, nil
}

func checkShape(name string, base, size uint64) error {
	switch {
	case base%8 != 0:
		return fmt.Errorf("mem: region %q: base %#x is not 8-byte aligned", name, base)
	case size == 0 || size%8 != 0:
		return fmt.Errorf("mem: region %q: size %#x is not a non-zero multiple of 8", name, size)
	case size > ^uint64(0)-base:
		return fmt.Errorf("mem: region %q: [%#x, +%#x) wraps around the address space", name, base, size)
	}
	return nil
}

// Size returns the region's size in bytes.
func (r *Region) Size() uint64 { return uint64(len(r.words)) * 8 }

// End returns the exclusive end address, Base+Size.
func (r *Region) End() uint64 { return r.Base + uint64(len(r.words))*8 }

// Contains reports whether the n bytes at addr lie entirely inside r. It is
// overflow-safe: addr+n is never computed.
func (r *Region) Contains(addr, n uint64) bool {
	return addr >= r.Base && n <= r.End()-addr && addr <= r.End()
}

// Words returns the backing words. Word i is at Base+8*i. Callers that may
// race with writers must use sync/atomic on the elements; Load and Store do.
func (r *Region) Words() []uint64 { return r.words }

// Load returns the 8-byte word at addr. ok is false if addr is misaligned or
// outside r.
func (r *Region) Load(addr uint64) (v uint64, ok bool) {
	off := addr - r.Base // wraps to a huge value when addr < Base
	if addr%8 != 0 || off >= uint64(len(r.words))*8 {
		return 0, false
	}
	return atomic.LoadUint64(&r.words[off/8]), true
}

// Store writes the 8-byte word v at addr. It reports false, writing nothing,
// if addr is misaligned or outside r.
func (r *Region) Store(addr, v uint64) bool {
	off := addr - r.Base
	if addr%8 != 0 || off >= uint64(len(r.words))*8 {
		return false
	}
	atomic.StoreUint64(&r.words[off/8], v)
	return true
}

// Load32 returns the 4-byte little-endian value at addr (4-byte aligned),
// e.g. an instruction. ok is false if the access is misaligned or outside r.
func (r *Region) Load32(addr uint64) (v uint32, ok bool) {
	w, ok := r.Load(addr &^ 7)
	if !ok || addr%4 != 0 {
		return 0, false
	}
	return uint32(w >> ((addr & 4) * 8)), true
}

// Store32 writes the 4-byte little-endian value v at addr (4-byte aligned).
func (r *Region) Store32(addr uint64, v uint32) bool {
	off := addr - r.Base
	if addr%4 != 0 || off >= uint64(len(r.words))*8 {
		return false
	}
	p := &r.words[off/8]
	shift := (addr & 4) * 8
	for {
		old := atomic.LoadUint64(p)
		nw := old&^(0xffffffff<<shift) | uint64(v)<<shift
		if atomic.CompareAndSwapUint64(p, old, nw) {
			return true
		}
	}
}

// View returns the region's words as bytes, in place (no copy): byte 0 is
// the byte at Base. On a little-endian host (amd64, arm64) the bytes are
// the little-endian words an unwinder's caller memory holds (fp.Stack.Data,
// fp.Config.GraphStackData), and fp reads them with atomic loads, as Load
// does, so a modelled CPU may write the region while a walk reads it. On a
// big-endian host View returns a little-endian copy (the model's writes
// after it are not seen).
func (r *Region) View() []byte {
	if len(r.words) == 0 {
		return nil
	}
	if !littleEndian {
		return r.Bytes()
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(r.words))), len(r.words)*8)
}

// littleEndian reports whether the host stores words little-endian.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// Bytes returns a little-endian copy of the region's contents.
func (r *Region) Bytes() []byte {
	b := make([]byte, len(r.words)*8)
	for i := range r.words {
		binary.LittleEndian.PutUint64(b[i*8:], atomic.LoadUint64(&r.words[i]))
	}
	return b
}

// String describes r as name [base, end).
func (r *Region) String() string {
	return fmt.Sprintf("%s [%#x, %#x)", r.Name, r.Base, r.End())
}

// Memory is a set of non-overlapping regions, sorted by base. Add regions
// before sharing a Memory between goroutines; reads and writes of words are
// then safe for concurrent use.
type Memory struct {
	regions []*Region
}

// Add inserts r. It fails if r overlaps a region already present.
func (m *Memory) Add(r *Region) error {
	i := sort.Search(len(m.regions), func(i int) bool { return m.regions[i].Base >= r.Base })
	if i > 0 && m.regions[i-1].End() > r.Base {
		return fmt.Errorf("mem: region %s overlaps %s", r, m.regions[i-1])
	}
	if i < len(m.regions) && r.End() > m.regions[i].Base {
		return fmt.Errorf("mem: region %s overlaps %s", r, m.regions[i])
	}
	m.regions = append(m.regions, nil)
	copy(m.regions[i+1:], m.regions[i:])
	m.regions[i] = r
	return nil
}

// Regions returns the regions in address order. The slice must not be
// modified.
func (m *Memory) Regions() []*Region { return m.regions }

// Find returns the region containing addr, or nil.
func (m *Memory) Find(addr uint64) *Region {
	rs := m.regions
	lo, hi := 0, len(rs)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if rs[mid].End() <= addr {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo < len(rs) && rs[lo].Base <= addr {
		return rs[lo]
	}
	return nil
}

// FindName returns the first region with the given name, or nil.
func (m *Memory) FindName(name string) *Region {
	for _, r := range m.regions {
		if r.Name == name {
			return r
		}
	}
	return nil
}

// Load returns the 8-byte word at addr, or ok=false if addr is misaligned or
// in no region.
func (m *Memory) Load(addr uint64) (uint64, bool) {
	if r := m.Find(addr); r != nil {
		return r.Load(addr)
	}
	return 0, false
}

// Store writes the word v at addr; false if addr is misaligned or unmapped.
func (m *Memory) Store(addr, v uint64) bool {
	if r := m.Find(addr); r != nil {
		return r.Store(addr, v)
	}
	return false
}

// Load32 returns the 4-byte value at addr; false if misaligned or unmapped.
func (m *Memory) Load32(addr uint64) (uint32, bool) {
	if r := m.Find(addr); r != nil {
		return r.Load32(addr)
	}
	return 0, false
}
