package snapshot

import (
	"fmt"
	"io"
	"os"

	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/internal/snapshot"
	"github.com/unwindkit/unwindkit/internal/symbridge"
	"github.com/unwindkit/unwindkit/ptrauth"
	"github.com/unwindkit/unwindkit/scs"
	"github.com/unwindkit/unwindkit/unwind"
)

// Snapshot is a capture of a real arm64 thread: registers, memory regions
// (stacks, shadow call stack), symbols and, optionally, the known call
// chain. See Load for the format.
type Snapshot struct {
	// VABits and TBI describe the captured addresses' layout; Layout is
	// the PAC layout built from them.
	VABits int
	TBI    bool
	Layout ptrauth.Layout
	// Regs are the captured registers (PC and X30 may carry a PAC).
	Regs Regs
	// SCSBase is the base of the shadow call stack x18 points into; valid
	// when HasSCS.
	SCSBase uint64
	HasSCS  bool
	// HasGCS says the capture gives GCSPR_EL0 (Regs.GCSPR) and the
	// Guarded Control Stack it points into (GCSRegion).
	HasGCS bool
	// Expect is the known call chain, innermost first, by symbol name; nil
	// when the snapshot gives none.
	Expect []string

	s   *snapshot.Snapshot
	sym *unwind.Symbolizer
}

// Regs are a captured thread's registers (PC and X30 may carry a PAC).
type Regs struct {
	// PC is the program counter, SP the stack pointer, X18 the shadow
	// call stack pointer, X29 the frame pointer and X30 the link
	// register.
	PC, SP, X18, X29, X30 uint64
	// GCSPR is GCSPR_EL0, the Guarded Control Stack pointer (its newest
	// entry); valid when the Snapshot's HasGCS is set (see GCSRegion).
	GCSPR uint64
}

// Region describes one captured memory region.
type Region struct {
	// Name and Kind are the region's name and kind ("stack", "scs", ...)
	// as the snapshot gives them.
	Name, Kind string
	// Base and Size are the region's first address and size in bytes.
	Base, Size uint64
}

// Load reads a snapshot (format version 1):
//
//	{
//	  "version": 1, "arch": "arm64",
//	  "va_bits": 48,                 // PAC bits start at va_bits
//	  "tbi": true,                   // top-byte-ignore for these addresses
//	  "regs": {"pc": "0x…", "sp": "0x…", "x18": "0x…", "x29": "0x…", "x30": "0x…",
//	           "gcspr": "0x…"},       // optional: GCSPR_EL0, into a region of kind "gcs"
//	  "scs_base": "0x…",             // optional: the shadow call stack x18 points into
//	  "regions": [{"name": "stack", "kind": "stack", "base": "0x…", "data": "<base64>"},
//	              {"name": "scs", "kind": "scs", "base": "0x…", "data": "…"}, …],
//	  "symbols": [{"name": "f1", "addr": "0x…", "size": 64}, …],
//	  "expect": ["capture", "f8", …] // optional: known chain, innermost first
//	}
//
// Numbers are hex strings with a 0x prefix; data is standard base64 of the
// little-endian bytes. Unknown fields are ignored. A missing required
// field, bad hex, overlapping regions, a region over 64 MiB, or a register
// outside every region it must point into is an error naming the field
// (wrapping ErrCorrupt). testdata/README.md documents every field.
func Load(r io.Reader) (*Snapshot, error) {
	s, err := snapshot.Load(r)
	if err != nil {
		return nil, err
	}
	out := &Snapshot{
		VABits: s.VABits, TBI: s.TBI, Layout: s.Layout,
		Regs:    Regs(s.Regs),
		SCSBase: s.SCSBase, HasSCS: s.HasSCS, HasGCS: s.HasGCS, Expect: s.Expect, s: s,
	}
	out.sym = symbridge.Wrap(s.Symbols).(*unwind.Symbolizer) // the loader's table as it is
	return out, nil
}

// Open loads the snapshot file at path (see Load).
func Open(path string) (*Snapshot, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s, err := Load(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// Symbolizer returns the snapshot's symbolizer.
func (s *Snapshot) Symbolizer() *unwind.Symbolizer { return s.sym }

// Regions describes the captured regions in address order.
func (s *Snapshot) Regions() []Region {
	var out []Region
	for _, r := range s.s.Memory.Regions() {
		out = append(out, Region{Name: r.Name, Kind: r.Kind, Base: r.Base, Size: r.Size()})
	}
	return out
}

// Source returns a Source unwinding the snapshot: MethodSCS copies the
// shadow call stack from x18 down to scs_base (ErrNotSupported without
// one); MethodFP walks frame records from x29 over every stack region,
// starting with pc, ending successfully at a zero frame pointer as an
// AAPCS64 user-space chain does. MethodAuto is SCS when there is one.
//
// What each cannot see: the SCS copy lacks the innermost pc (it is not a
// return address), a return address still in x30 (a leaf's caller), the
// pc a signal interrupted, and the frames of uninstrumented callers (main
// and _start in the committed captures); the FP walk lacks a return
// address still in x30. MethodGCS copies the Guarded Control Stack from
// GCSPR_EL0 up (ErrNotSupported without one): it lacks the innermost pc
// and the pc a signal interrupted, and holds every caller that returns
// with ret, instrumented or not.
func (s *Snapshot) Source(method unwind.Method) (*unwind.Source, error) {
	method = method.Resolve(s.HasSCS)
	var src *unwind.Source
	switch method {
	case unwind.MethodSCS:
		r := s.s.SCSRegion()
		if r == nil {
			return nil, fmt.Errorf("snapshot: snapshot has no shadow call stack: %w", unwind.ErrNotSupported)
		}
		var data []byte // the shadow stack's bytes from SCSBase on
		if s.SCSBase >= r.Base && s.SCSBase <= r.End() {
			data = r.Bytes()[s.SCSBase-r.Base:]
		}
		v := scs.NewSnapshotView(data, s.SCSBase, s.Regs.X18, s.Layout)
		src = unwind.NewSCSSource(&v, unwind.SourceOptions{Symbolizer: s.sym})
	case unwind.MethodFP:
		c := fp.Config{
			FP:         s.Regs.X29,
			PC:         s.Regs.PC,
			Layout:     s.Layout,
			ZeroFPEnds: true,
		}
		for _, r := range s.s.StackRegions() {
			kind := fp.Extra
			if r.Name == "stack" {
				kind = fp.Task
			}
			c.Stacks = append(c.Stacks, fp.Stack{Kind: kind, Low: r.Base, High: r.End(), Name: r.Name, Data: r.View()})
		}
		src = unwind.NewFPSource(&c, unwind.SourceOptions{Symbolizer: s.sym})
	case unwind.MethodGCS:
		base, data, ok := s.GCSRegion()
		if !ok || !s.HasGCS {
			return nil, fmt.Errorf("snapshot: snapshot has no Guarded Control Stack: %w", unwind.ErrNotSupported)
		}
		src = unwind.NewGCSSource(data, base, s.Regs.GCSPR, unwind.SourceOptions{Symbolizer: s.sym})
	default:
		return nil, fmt.Errorf("snapshot: unknown method %v", method)
	}
	return src, nil
}
