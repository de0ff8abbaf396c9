// Package gcsview is the copy over a Guarded Control Stack (arm64
// FEAT_GCS) that the front door (package unwind: NewGCSSource) and
// package unwind/gcs both use: the View of one thread's GCS, Save (the
// buffer-filling copy) and Entries (every return address with its slot and
// its signal depth). Package unwind/gcs documents the GCS it follows.
package gcsview

import (
	"encoding/binary"
	"iter"

	"github.com/unwindkit/unwindkit/fault"
	"github.com/unwindkit/unwindkit/internal/errs"
)

// Token values (arch/arm64/include/asm/sysreg.h, the Arm ARM's GCS cap
// entries).
const (
	// CapAddrMask selects bits 63:12 of a cap token: the address it is
	// stored at (GCS_CAP_ADDR_MASK).
	CapAddrMask uint64 = ^uint64(0xfff)
	// CapValidToken is the low 12 bits of a valid cap token
	// (GCS_CAP_VALID_TOKEN).
	CapValidToken = 0x1
	// CapInProgressToken is the low 12 bits of the token GCSSS1 leaves
	// while a switch is in progress (GCS_CAP_IN_PROGRESS_TOKEN).
	CapInProgressToken = 0x5
	// EntrySize is the size of one GCS entry, 8 bytes.
	EntrySize = 8
)

// View is one thread's GCS: Data holds the memory from Base on
// (little-endian, Data[0] the byte at Base, read and never written),
// GCSPR is GCSPR_EL0. Disabled: no GCS.
type View struct {
	Disabled bool
	Data     []byte
	Base     uint64
	GCSPR    uint64
}

// Kind classifies one entry of a GCS.
type Kind uint8

// Entry kinds.
const (
	// KindReturn is a return address pushed by bl or blr (or by the
	// kernel: the sigreturn trampoline).
	KindReturn Kind = iota
	// KindTop is the top-of-stack marker 0.
	KindTop
	// KindSignalCap is the signal cap token of a signal frame.
	KindSignalCap
	// KindCap is a valid cap token: the top of a stack not in use.
	KindCap
	// KindInProgress is the in-progress token of a stack switch.
	KindInProgress
	// KindBad is none of the above (not 4-byte aligned).
	KindBad
)

// Classify returns the kind of the value v stored at addr.
func Classify(v, addr uint64) Kind {
	switch {
	case v == 0:
		return KindTop
	case v&CapAddrMask != addr&CapAddrMask:
		if v&3 != 0 {
			return KindBad
		}
		return KindReturn
	}
	// v names its own slot's page: a token (no return address points
	// into a GCS page, which is not executable).
	switch v &^ CapAddrMask {
	case 0:
		return KindSignalCap
	case CapValidToken:
		return KindCap
	case CapInProgressToken:
		return KindInProgress
	}
	return KindBad
}

// start checks v's pointer against its memory: the byte offset of GCSPR
// in Data, or the error.
func (v *View) start() (int, error) {
	if v.GCSPR%8 != 0 {
		return 0, errs.Corruptf(fault.RuleMisalignedGCSPointer, v.GCSPR, "GCSPR_EL0 %#x", v.GCSPR)
	}
	if v.Base%8 != 0 || v.GCSPR < v.Base || v.GCSPR-v.Base >= uint64(len(v.Data))&^7 {
		return 0, errs.Corruptf(fault.RuleGCSPointerOutsideRegion, v.GCSPR, "GCSPR_EL0 %#x outside [%#x, %#x)",
			v.GCSPR, v.Base, v.Base+uint64(len(v.Data))&^7)
	}
	return int(v.GCSPR - v.Base), nil
}

// entryErr is the error for an entry of kind k (KindBad) at addr, or for
// the memory's end (k KindTop, addr past the last slot).
func (v *View) entryErr(k Kind, w, addr uint64) error {
	if k == KindTop {
		return errs.Corruptf(fault.RuleGCSNoTop, addr, "entries from GCSPR_EL0 %#x end at %#x (offset %#x) without the top marker",
			v.GCSPR, addr, addr-v.Base)
	}
	return errs.Corruptf(fault.RuleGCSBadEntry, addr, "entry %#x at offset %#x from GCSPR_EL0 %#x", w, addr-v.GCSPR, v.GCSPR)
}

// Save copies the return addresses of v's GCS into store, innermost
// first, after removing exactly skip of them (stack_trace_save's skip:
// tokens are not frames), and returns how many it stored: at most
// len(store); a full store is not an error. It reads the entries from
// GCSPR_EL0 up, each once, passes over signal cap tokens (the entry
// before one, the sigreturn trampoline, is a return address like the
// others) and stops at the top marker or at a valid or in-progress cap.
//
// A disabled View gives errs.ErrNotSupported. A bad pointer, a bad entry or
// memory that ends before the marker gives the entries stored so far and
// a *fault.CorruptError naming the rule and the address.
func Save(v *View, store []uint64, skip int) (int, error) {
	if v.Disabled {
		return 0, errs.ErrNotSupported
	}
	i, err := v.start()
	if err != nil || len(store) == 0 {
		return 0, err
	}
	d := v.Data[:len(v.Data)&^7]
	addr := v.GCSPR
	out := store // the part of store not written yet
	for i < len(d) {
		// Eight, then four return addresses at a time while nothing is
		// left to skip and all pass the test of the common case, a filter
		// (whatever fails it is classified one entry at a time below): no
		// value less 4 has bits 1:0 or 63:56 set (4-byte aligned, not 0,
		// a user address) and none lies in the two pages the slots may be
		// in (a token names its own slot's page; GCS pages hold no code).
		for skip == 0 && len(out) >= 8 && i+64 <= len(d) {
			p := (*[64]byte)(d[i : i+64])
			a, c := binary.LittleEndian.Uint64(p[:8]), binary.LittleEndian.Uint64(p[8:16])
			e, f := binary.LittleEndian.Uint64(p[16:24]), binary.LittleEndian.Uint64(p[24:32])
			g, h := binary.LittleEndian.Uint64(p[32:40]), binary.LittleEndian.Uint64(p[40:48])
			x, y := binary.LittleEndian.Uint64(p[48:56]), binary.LittleEndian.Uint64(p[56:])
			lo := addr &^ 0xfff
			if ((a-4)|(c-4)|(e-4)|(f-4)|(g-4)|(h-4)|(x-4)|(y-4))&(3|^uint64(1<<56-1)) != 0 ||
				a-lo < 2<<12 || c-lo < 2<<12 || e-lo < 2<<12 || f-lo < 2<<12 ||
				g-lo < 2<<12 || h-lo < 2<<12 || x-lo < 2<<12 || y-lo < 2<<12 {
				break
			}
			o := (*[8]uint64)(out)
			o[0], o[1], o[2], o[3], o[4], o[5], o[6], o[7] = a, c, e, f, g, h, x, y
			out = out[8:]
			i, addr = i+64, addr+64
			if len(out) == 0 {
				return len(store), nil
			}
		}
		for skip == 0 && len(out) >= 4 && i+32 <= len(d) {
			p := (*[32]byte)(d[i : i+32])
			a, c := binary.LittleEndian.Uint64(p[:8]), binary.LittleEndian.Uint64(p[8:16])
			e, f := binary.LittleEndian.Uint64(p[16:24]), binary.LittleEndian.Uint64(p[24:])
			lo := addr &^ 0xfff
			if ((a-4)|(c-4)|(e-4)|(f-4))&(3|^uint64(1<<56-1)) != 0 ||
				a-lo < 2<<12 || c-lo < 2<<12 || e-lo < 2<<12 || f-lo < 2<<12 {
				break
			}
			o := (*[4]uint64)(out)
			o[0], o[1], o[2], o[3] = a, c, e, f
			out = out[4:]
			i, addr = i+32, addr+32
			if len(out) == 0 {
				return len(store), nil
			}
		}
		if i >= len(d) {
			break
		}
		w := binary.LittleEndian.Uint64(d[i:])
		i, addr = i+8, addr+8
		if w&3 != 0 || w == 0 || (w^(addr-8)) < 1<<12 {
			switch k := Classify(w, addr-8); k {
			case KindSignalCap:
				continue
			case KindTop, KindCap, KindInProgress:
				return len(store) - len(out), nil
			case KindBad:
				return len(store) - len(out), v.entryErr(k, w, addr-8)
			}
		}
		if skip > 0 {
			skip--
			continue
		}
		out[0] = w
		if out = out[1:]; len(out) == 0 {
			return len(store), nil
		}
	}
	return len(store) - len(out), v.entryErr(KindTop, 0, addr)
}

// Entry is one return address of a GCS: PC, its slot Addr, Signal the
// number of signal cap tokens between GCSPR_EL0 and the slot, SigReturn
// whether it is a signal handler's return address (the next entry is a
// signal cap).
type Entry struct {
	PC, Addr  uint64
	Signal    int
	SigReturn bool
}

// Entries yields the entries Save copies, innermost first, each with a
// nil error; a copy that fails ends with one last pair (Entry{}, err), the
// error Save returns.
func Entries(v *View) iter.Seq2[Entry, error] {
	return func(yield func(Entry, error) bool) {
		if v.Disabled {
			yield(Entry{}, errs.ErrNotSupported)
			return
		}
		i, err := v.start()
		if err != nil {
			yield(Entry{}, err)
			return
		}
		d := v.Data[:len(v.Data)&^7]
		sig := 0
		for addr := v.GCSPR; i < len(d); i, addr = i+8, addr+8 {
			w := binary.LittleEndian.Uint64(d[i:])
			switch k := Classify(w, addr); k {
			case KindSignalCap:
				sig++
				continue
			case KindTop, KindCap, KindInProgress:
				return
			case KindBad:
				yield(Entry{}, v.entryErr(k, w, addr))
				return
			}
			e := Entry{PC: w, Addr: addr, Signal: sig}
			if i+16 <= len(d) {
				e.SigReturn = Classify(binary.LittleEndian.Uint64(d[i+8:]), addr+8) == KindSignalCap
			}
			if !yield(e, nil) {
				return
			}
		}
		yield(Entry{}, v.entryErr(KindTop, 0, v.Base+uint64(len(d))))
	}
}
