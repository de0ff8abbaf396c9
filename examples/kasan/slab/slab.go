// Package slab is the modelled KASAN slab allocator behind examples/kasan
// and examples/compare. It uses only unwindkit's public API.
//
// It follows the generic KASAN of the Linux kernel (mm/kasan/common.c,
// generic.c, report.c, quarantine.c): every object keeps an allocation
// track and a free track, each a pid and a 32-bit stack depot handle
// (struct kasan_track); kmalloc and kfree record the current stack trace
// (kasan_save_stack) into a depot that cuts every trace after its first
// frame in the IRQ-entry text (filter_irq_stacks); freed objects wait in a
// quarantine before they can be reused, so that a later access is caught as
// a use-after-free and a second kfree as a double free, and both are
// reported with the two stacks symbolized (print_report).
//
// The trace is recorded with the shadow call stack copy or with the
// frame-pointer walk of a modelled arm64 CPU (machine.Machine), or not at
// all, so the cost of each can be compared on the same workload: the
// question the 2022 "collect stack traces from Shadow Call Stack" series
// argued about.
package slab

import (
	"fmt"
	"strings"

	"github.com/unwindkit/unwindkit/depot"
	"github.com/unwindkit/unwindkit/unwind"
)

// Record selects how kmalloc and kfree record their stack trace.
type Record uint8

const (
	// RecordNone records no stack trace (KASAN with stack collection
	// hacked out: the seed thread's baseline).
	RecordNone Record = iota
	// RecordSCS copies the shadow call stack (the seed patch).
	RecordSCS
	// RecordFP walks frame records (the kernel's stack_trace_save).
	RecordFP
)

// Records lists every Record, in order.
var Records = [...]Record{RecordNone, RecordSCS, RecordFP}

// String returns "none", "scs" or "fp".
func (r Record) String() string {
	switch r {
	case RecordNone:
		return "none"
	case RecordSCS:
		return "scs"
	case RecordFP:
		return "fp"
	}
	return fmt.Sprintf("Record(%d)", r)
}

// ParseRecord parses the String form of a Record.
func ParseRecord(s string) (Record, error) {
	for _, r := range Records {
		if r.String() == s {
			return r, nil
		}
	}
	return 0, fmt.Errorf("slab: unknown record method %q (want none, scs or fp)", s)
}

// StackDepth is the number of frames KASAN records per trace
// (KASAN_STACK_DEPTH).
const StackDepth = 64

// QuarantineSize is the number of freed objects kept poisoned before reuse.
const QuarantineSize = 256

// Sizes are the kmalloc caches' object sizes.
var Sizes = [...]int{32, 64, 128, 256, 512}

// cacheBase is where the modelled slab pages of cache i start:
// cacheBase + i<<32, in the arm64 linear map.
const cacheBase = 0xffff000010000000

type objState uint8

const (
	stateNever     objState = iota // never allocated
	stateAllocated                 // live
	stateFreed                     // freed: in quarantine or on the freelist
)

// track is struct kasan_track: who, and a 32-bit depot handle.
type track struct {
	pid   uint32
	stack depot.Handle
}

type object struct {
	state       objState
	alloc, free track
}

type cache struct {
	name     string
	size     int
	objs     []object
	freelist []int
}

// Slab is the allocator with its KASAN metadata and its stack depot.
type Slab struct {
	caches     []*cache
	quarantine []uint64 // FIFO of freed object addresses
	qHead      int
	Depot      *depot.Depot
}

func newSlab(filter func(uint64) bool) (*Slab, error) {
	// CountHits: the example reports the depot's hits.
	d, err := depot.New(depot.Config{MaxFrames: StackDepth, Filter: filter, CountHits: true})
	if err != nil {
		return nil, err
	}
	s := &Slab{Depot: d}
	for _, sz := range Sizes {
		s.caches = append(s.caches, &cache{name: fmt.Sprintf("kmalloc-%d", sz), size: sz})
	}
	return s, nil
}

// cacheFor returns the index of the smallest cache that fits size.
func (s *Slab) cacheFor(size int) (int, error) {
	for i, c := range s.caches {
		if size <= c.size {
			return i, nil
		}
	}
	return 0, fmt.Errorf("slab: no kmalloc cache for %d bytes", size)
}

// find returns the object containing addr.
func (s *Slab) find(addr uint64) (c *cache, idx int, obj *object, ok bool) {
	if addr < cacheBase {
		return nil, 0, nil, false
	}
	ci := (addr - cacheBase) >> 32
	if ci >= uint64(len(s.caches)) {
		return nil, 0, nil, false
	}
	c = s.caches[ci]
	off := (addr - cacheBase) & (1<<32 - 1)
	idx64 := off / uint64(c.size)
	if idx64 >= uint64(len(c.objs)) {
		return nil, 0, nil, false
	}
	idx = int(idx64)
	return c, idx, &c.objs[idx], true
}

func (s *Slab) objAddr(ci, idx int) uint64 {
	return cacheBase + uint64(ci)<<32 + uint64(idx)*uint64(s.caches[ci].size)
}

// alloc takes an object of the cache for size and gives it the track.
func (s *Slab) alloc(size int, t track) (uint64, error) {
	ci, err := s.cacheFor(size)
	if err != nil {
		return 0, err
	}
	c := s.caches[ci]
	var idx int
	if n := len(c.freelist); n > 0 {
		idx = c.freelist[n-1]
		c.freelist = c.freelist[:n-1]
	} else {
		idx = len(c.objs)
		c.objs = append(c.objs, object{})
	}
	o := &c.objs[idx]
	o.state = stateAllocated
	o.alloc = t
	o.free = track{}
	return s.objAddr(ci, idx), nil
}

// release poisons the object, stores the free track and puts it in
// quarantine; the oldest quarantined object goes back to its freelist.
func (s *Slab) release(addr uint64, o *object, t track) {
	o.state = stateFreed
	o.free = t
	if len(s.quarantine) < QuarantineSize {
		s.quarantine = append(s.quarantine, addr)
		return
	}
	old := s.quarantine[s.qHead]
	s.quarantine[s.qHead] = addr
	s.qHead = (s.qHead + 1) % QuarantineSize
	if c, idx, _, ok := s.find(old); ok {
		c.freelist = append(c.freelist, idx)
	}
}

// Report is one KASAN report.
type Report struct {
	// Kind is "use-after-free" or "double-free".
	Kind string
	// Where is the faulting location, function+0xoff/0xsize.
	Where string
	// Addr is the bad address; Size and Write describe the access (Size 0
	// for a double free).
	Addr  uint64
	Size  int
	Write bool
	// Task, PID and CPU say who made the bad access.
	Task string
	PID  uint32
	CPU  int
	// CallTrace is the current stack of the bad access, symbolized,
	// innermost first (dump_stack: a full frame-pointer walk).
	CallTrace []string
	// AllocPID and FreePID are the tracks' pids; Alloc and Free their
	// stacks, symbolized, innermost first (nil if not recorded).
	AllocPID, FreePID uint32
	Alloc, Free       []string
	// Cache, Object and ObjSize describe the object the address is in.
	Cache   string
	Object  uint64
	ObjSize int
}

// AllocFuncs returns the function names of the allocation stack.
func (r *Report) AllocFuncs() []string { return funcsOf(r.Alloc) }

// FreeFuncs returns the function names of the free stack.
func (r *Report) FreeFuncs() []string { return funcsOf(r.Free) }

// CallTraceFuncs returns the function names of the call trace.
func (r *Report) CallTraceFuncs() []string { return funcsOf(r.CallTrace) }

func funcsOf(frames []string) []string {
	out := make([]string, len(frames))
	for i, f := range frames {
		name, _, _ := strings.Cut(f, "+")
		out[i] = name
	}
	return out
}

// String formats r as the kernel's KASAN report.
func (r *Report) String() string {
	var b strings.Builder
	bar := strings.Repeat("=", 66)
	fmt.Fprintln(&b, bar)
	fmt.Fprintf(&b, "BUG: KASAN: %s in %s\n", r.Kind, r.Where)
	if r.Kind == "double-free" {
		fmt.Fprintf(&b, "Free of addr %016x by task %s/%d\n", r.Addr, r.Task, r.PID)
	} else {
		op := "Read"
		if r.Write {
			op = "Write"
		}
		fmt.Fprintf(&b, "%s of size %d at addr %016x by task %s/%d\n", op, r.Size, r.Addr, r.Task, r.PID)
	}
	fmt.Fprintf(&b, "\nCPU: %d PID: %d Comm: %s (unwindkit model)\nCall trace:\n", r.CPU, r.PID, r.Task)
	for _, f := range r.CallTrace {
		fmt.Fprintf(&b, " %s\n", f)
	}
	printTrack := func(what string, pid uint32, stack []string) {
		fmt.Fprintf(&b, "\n%s by task %d:\n", what, pid)
		if stack == nil {
			fmt.Fprintln(&b, " (stack is not available)")
		}
		for _, f := range stack {
			fmt.Fprintf(&b, " %s\n", f)
		}
	}
	printTrack("Allocated", r.AllocPID, r.Alloc)
	printTrack("Freed", r.FreePID, r.Free)
	fmt.Fprintf(&b, "\nThe buggy address belongs to the object at %016x\n which belongs to the cache %s of size %d\n",
		r.Object, r.Cache, r.ObjSize)
	fmt.Fprintf(&b, "The buggy address is located %d bytes inside of\n freed %d-byte region [%016x, %016x)\n",
		r.Addr-r.Object, r.ObjSize, r.Object, r.Object+uint64(r.ObjSize))
	fmt.Fprintln(&b, bar)
	return b.String()
}

// symbolize formats pc as the kernel's %pS: function+0xoff/0xsize.
func symbolize(sym *unwind.Symbolizer, pc uint64) string {
	s, off, ok := sym.Lookup(pc)
	if !ok {
		return fmt.Sprintf("0x%x", pc)
	}
	return fmt.Sprintf("%s+0x%x/0x%x", s.Name, off, s.Size)
}
