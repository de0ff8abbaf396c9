// Package snapshot loads arm64 memory snapshots, format version 1: the
// registers, stack and shadow-call-stack memory, function symbols and known
// call chain of a real program, captured at one instant. The format is
// documented in testdata/README.md; the captures under testdata/arm64 come
// from C programs built with clang's and GCC's -fsanitize=shadow-call-stack
// (with and without -mbranch-protection=pac-ret) and run under qemu-aarch64.
//
// A snapshot is a JSON document. Addresses and register values are strings
// in hexadecimal with a 0x prefix; region data is standard base64 of the
// little-endian bytes; unknown fields are ignored. Load checks everything an
// unwinder will rely on (regions well formed and disjoint, sp and x29 inside
// stack regions, x18 inside the shadow call stack, regs.gcspr inside
// the Guarded Control Stack) and reports a broken
// rule with an error that names the field.
//
// Package unwind/snapshot wraps Load as snapshot.Load.
package snapshot

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/unwindkit/unwindkit/fault"
	"github.com/unwindkit/unwindkit/internal/errs"
	"github.com/unwindkit/unwindkit/internal/mem"
	"github.com/unwindkit/unwindkit/ptrauth"
)

// Version is the snapshot format version Load understands.
const Version = 1

// Limits Load enforces while reading, before allocating past them.
const (
	// MaxRegionSize is the largest region a snapshot may hold, 64 MiB.
	MaxRegionSize = 64 << 20
	// MaxTotalSize bounds what a snapshot keeps: the decoded bytes of all
	// regions plus every name and string kept, 256 MiB.
	MaxTotalSize = 256 << 20
	// MaxRegions is the largest number of regions, 4096.
	MaxRegions = 4096
	// MaxSymbols is the largest number of symbols (and of expect
	// entries), 1<<20.
	MaxSymbols = 1 << 20
	// MaxString is the longest name or other string kept, 64 KiB.
	MaxString = 64 << 10
)

// The limits Load enforces: the constants above, lowered by tests.
var (
	maxRegion  = MaxRegionSize
	maxTotal   = MaxTotalSize
	maxRegions = MaxRegions
	maxSymbols = MaxSymbols
)

// Region kinds with a meaning to Load. Other kinds are kept as given.
const (
	KindStack = "stack" // a call stack: sp and x29 point into one
	KindSCS   = "scs"   // a shadow call stack: scs_base and x18 point into one
	KindGCS   = "gcs"   // a Guarded Control Stack: regs.gcspr points into one
)

// Rules of the corruption errors Load returns (errs.CorruptError.Rule),
// from package fault's one list. The
// error's Detail starts with the name of the offending field, e.g.
// "regions[2].base: ...".
const (
	RuleSyntax        = fault.RuleSnapshotSyntax     // not a JSON document of the right shape
	RuleMissing       = fault.RuleSnapshotMissing    // a required field is absent
	RuleBadValue      = fault.RuleSnapshotBadValue   // bad hex, base64, version, arch, va_bits, ...
	RuleOverlap       = fault.RuleSnapshotOverlap    // two regions share an address
	RuleTooLarge      = fault.RuleSnapshotTooLarge   // a region over MaxRegionSize
	RuleTotalTooLarge = fault.RuleSnapshotTotal      // the regions and strings together pass MaxTotalSize
	RuleTooMany       = fault.RuleSnapshotTooMany    // more than MaxRegions regions or MaxSymbols symbols or expect entries
	RuleRegOutside    = fault.RuleSnapshotRegOutside // sp/x29/x18/scs_base not where it must point
)

// Regs are the registers of the captured thread. PC and X30 may carry a
// pointer-authentication code; strip them with the snapshot's Layout.
type Regs struct {
	PC, SP, X18, X29, X30 uint64
	// GCSPR is GCSPR_EL0, the Guarded Control Stack pointer (the newest
	// entry), valid when the Snapshot's HasGCS is true.
	GCSPR uint64
}

// Snapshot is a loaded snapshot.
type Snapshot struct {
	// VABits and TBI describe the virtual address layout of the captured
	// addresses (all in the lower, user half): PAC bits start at bit VABits,
	// and with TBI bits 63:56 are a tag, not PAC.
	VABits int
	TBI    bool
	// Layout is the PAC layout built from VABits and TBI, for both halves.
	Layout ptrauth.Layout
	// Regs are the captured registers.
	Regs Regs
	// SCSBase is the lowest address of the shadow call stack x18 points
	// into, valid when HasSCS is true.
	SCSBase uint64
	HasSCS  bool
	// HasGCS says the snapshot gives regs.gcspr (in a region of kind
	// "gcs").
	HasGCS bool
	// Memory holds every captured region.
	Memory *mem.Memory
	// Symbols symbolizes code addresses.
	Symbols *Symbolizer
	// Expect is the known call chain, innermost first, by symbol name; nil
	// when the snapshot gives none.
	Expect []string
}

// StackRegions returns the regions of kind "stack", in address order.
func (s *Snapshot) StackRegions() []*mem.Region {
	var out []*mem.Region
	for _, r := range s.Memory.Regions() {
		if r.Kind == KindStack {
			out = append(out, r)
		}
	}
	return out
}

// GCSRegion returns the region holding the Guarded Control Stack (the
// one that contains regs.gcspr), or nil when the snapshot has none.
func (s *Snapshot) GCSRegion() *mem.Region {
	if !s.HasGCS {
		return nil
	}
	return s.Memory.Find(s.Regs.GCSPR)
}

// SCSRegion returns the region holding the shadow call stack (the one that
// contains SCSBase), or nil when the snapshot has none.
func (s *Snapshot) SCSRegion() *mem.Region {
	if !s.HasSCS {
		return nil
	}
	return s.Memory.Find(s.SCSBase)
}

func fieldErr(rule string, addr uint64, field, format string, args ...any) error {
	return errs.Corruptf(rule, addr, "%s: %s", field, fmt.Sprintf(format, args...))
}

func missing(field string) error {
	return fieldErr(RuleMissing, 0, field, "required")
}

// parseHex parses a "0x"-prefixed hexadecimal uint64.
func parseHex(field string, p *string) (uint64, error) {
	if p == nil {
		return 0, missing(field)
	}
	s := *p
	if !strings.HasPrefix(s, "0x") || len(s) < 3 || len(s) > 18 {
		return 0, fieldErr(RuleBadValue, 0, field, "bad hex %q: want 0x and 1 to 16 hex digits", clip(s))
	}
	v, err := strconv.ParseUint(s[2:], 16, 64)
	if err != nil || strings.ContainsAny(s[2:], "+-_") {
		return 0, fieldErr(RuleBadValue, 0, field, "bad hex %q", clip(s))
	}
	return v, nil
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

func build(f *file) (*Snapshot, error) {
	s := &Snapshot{Memory: new(mem.Memory)}
	switch {
	case f.Version == nil:
		return nil, missing("version")
	case *f.Version != Version:
		return nil, fieldErr(RuleBadValue, 0, "version", "version %d, want %d", *f.Version, Version)
	case f.Arch == nil:
		return nil, missing("arch")
	case *f.Arch != "arm64":
		return nil, fieldErr(RuleBadValue, 0, "arch", "arch %q, want \"arm64\"", clip(*f.Arch))
	case f.VABits == nil:
		return nil, missing("va_bits")
	case f.TBI == nil:
		return nil, missing("tbi")
	case f.Regs == nil:
		return nil, missing("regs")
	case f.Symbols == nil:
		return nil, missing("symbols")
	}
	s.VABits, s.TBI = *f.VABits, *f.TBI
	h := ptrauth.Half{VABits: s.VABits, TBI: s.TBI}
	l, err := ptrauth.NewLayoutHalves(h, h, ptrauth.PAuth2)
	if err != nil {
		return nil, fieldErr(RuleBadValue, 0, "va_bits", "%d outside [16, 52]", s.VABits)
	}
	s.Layout = l

	// Registers.
	var hasX18 bool
	for _, g := range []struct {
		name     string
		p        *string
		dst      *uint64
		optional bool
	}{
		{"regs.pc", f.Regs.PC, &s.Regs.PC, false},
		{"regs.sp", f.Regs.SP, &s.Regs.SP, false},
		{"regs.x18", f.Regs.X18, &s.Regs.X18, true},
		{"regs.x29", f.Regs.X29, &s.Regs.X29, false},
		{"regs.x30", f.Regs.X30, &s.Regs.X30, false},
		{"regs.gcspr", f.Regs.GCSPR, &s.Regs.GCSPR, true},
	} {
		if g.p == nil && g.optional {
			continue
		}
		v, err := parseHex(g.name, g.p)
		if err != nil {
			return nil, err
		}
		*g.dst = v
	}
	hasX18 = f.Regs.X18 != nil
	s.HasGCS = f.Regs.GCSPR != nil
	if f.SCSBase != nil {
		v, err := parseHex("scs_base", f.SCSBase)
		if err != nil {
			return nil, err
		}
		s.SCSBase, s.HasSCS = v, true
		if !hasX18 {
			return nil, errs.Corruptf(RuleMissing, 0, "regs.x18: required when scs_base is given")
		}
	}

	// Regions, already decoded and checked one by one while reading.
	if !f.HasRegions {
		return nil, missing("regions")
	}
	if len(f.Regions) == 0 {
		return nil, fieldErr(RuleMissing, 0, "regions", "at least one region is required")
	}
	for i, r := range f.Regions {
		if err := s.Memory.Add(r); err != nil {
			return nil, fieldErr(RuleOverlap, r.Base, fmt.Sprintf("regions[%d]", i), "%v", err)
		}
	}

	// Registers that must point into memory.
	if err := inKind(s.Memory, "regs.sp", s.Regs.SP, KindStack); err != nil {
		return nil, err
	}
	if s.Regs.X29 != 0 { // x29 = 0 is the end of the chain: no frame records
		if err := inKind(s.Memory, "regs.x29", s.Regs.X29, KindStack); err != nil {
			return nil, err
		}
	}
	if s.HasSCS {
		if err := inKind(s.Memory, "scs_base", s.SCSBase, KindSCS); err != nil {
			return nil, err
		}
		// x18 is the next free slot: from scs_base up to the region's end
		// inclusive (a full shadow stack has x18 == end).
		r := s.Memory.Find(s.SCSBase)
		if s.Regs.X18 < s.SCSBase || s.Regs.X18 > r.End() {
			return nil, fieldErr(RuleRegOutside, s.Regs.X18, "regs.x18",
				"%#x outside the shadow call stack [scs_base %#x, %#x]", s.Regs.X18, s.SCSBase, r.End())
		}
	}

	if s.HasGCS {
		if err := inKind(s.Memory, "regs.gcspr", s.Regs.GCSPR, KindGCS); err != nil {
			return nil, err
		}
	}
	// Symbols.
	syms := make([]Symbol, 0, len(*f.Symbols))
	for i, fs := range *f.Symbols {
		field := fmt.Sprintf("symbols[%d]", i)
		if fs.Name == nil {
			return nil, missing(field + ".name")
		}
		if *fs.Name == "" {
			return nil, fieldErr(RuleBadValue, 0, field+".name", "empty name")
		}
		addr, err := parseHex(field+".addr", fs.Addr)
		if err != nil {
			return nil, err
		}
		size, err := parseSize(field+".size", fs.Size, fs.SizeIsString)
		if err != nil {
			return nil, err
		}
		if size > ^uint64(0)-addr {
			return nil, fieldErr(RuleBadValue, addr, field+".size", "%#x+%#x wraps around the address space", addr, size)
		}
		syms = append(syms, Symbol{Name: *fs.Name, Addr: addr, Size: size})
	}
	s.Symbols = NewSymbolizer(syms)
	for i, e := range f.Expect {
		if e == "" {
			return nil, fieldErr(RuleBadValue, 0, fmt.Sprintf("expect[%d]", i), "empty name")
		}
	}
	s.Expect = f.Expect
	return s, nil
}

// newRegion checks one region read from the file (data already decoded
// and within the size limit) and builds it.
func newRegion(i int, fr *fileRegion) (*mem.Region, error) {
	field := fmt.Sprintf("regions[%d]", i)
	switch {
	case fr.Name == nil:
		return nil, missing(field + ".name")
	case fr.Kind == nil:
		return nil, missing(field + ".kind")
	case !fr.HasData:
		return nil, missing(field + ".data")
	}
	base, err := parseHex(field+".base", fr.Base)
	if err != nil {
		return nil, err
	}
	data := fr.Data
	switch {
	case len(data) == 0:
		return nil, fieldErr(RuleBadValue, base, field+".data", "empty region")
	case len(data)%8 != 0:
		return nil, fieldErr(RuleBadValue, base, field+".data", "%d bytes, not a multiple of 8", len(data))
	case base%8 != 0:
		return nil, fieldErr(RuleBadValue, base, field+".base", "%#x not 8-byte aligned", base)
	}
	r, err := mem.NewRegionBytes(*fr.Name, *fr.Kind, base, data)
	if err != nil {
		return nil, fieldErr(RuleBadValue, base, field, "%v", err)
	}
	return r, nil
}

// parseSize parses a symbol size: a JSON number (text) or a hex string.
func parseSize(field string, p *string, isString bool) (uint64, error) {
	if p == nil {
		return 0, missing(field)
	}
	if isString {
		return parseHex(field, p)
	}
	v, err := strconv.ParseUint(*p, 10, 64)
	if err != nil {
		return 0, fieldErr(RuleBadValue, 0, field, "bad size %s: want a non-negative integer or hex string", clip(*p))
	}
	return v, nil
}

// inKind checks that addr lies in a region of the given kind.
func inKind(m *mem.Memory, field string, addr uint64, kind string) error {
	r := m.Find(addr)
	if r == nil {
		return fieldErr(RuleRegOutside, addr, field, "%#x is in no region (want a %q region)", addr, kind)
	}
	if r.Kind != kind {
		return fieldErr(RuleRegOutside, addr, field, "%#x is in region %q of kind %q, want kind %q", addr, r.Name, r.Kind, kind)
	}
	return nil
}
