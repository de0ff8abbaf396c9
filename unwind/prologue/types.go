package prologue

import (
	"github.com/unwindkit/unwindkit/internal/prologue"
)

// Key is the pointer-authentication key an instruction signs or
// authenticates the return address with.
type Key uint8

// The keys a function signs or authenticates its return address with.
const (
	KeyNone Key = iota // no signing or authentication
	KeyA               // IA key: paciasp, autiasp, retaa
	KeyB               // IB key: pacibsp, autibsp, retab
)

// String returns "-", "A" or "B".
func (k Key) String() string {
	switch k {
	case KeyA:
		return "A"
	case KeyB:
		return "B"
	}
	return "-"
}

// FuncShape is what the scanner found in one function.
type FuncShape struct {
	// Name, Addr and Size are the function's symbol: its code is
	// [Addr, Addr+Size). Size is the symbol's st_size (to the next
	// symbol when 0), cut at the next function symbol and at its
	// section's end, so spans never overlap (Binary.Notes counts the
	// cuts).
	Name string
	Addr uint64
	Size uint64
	// SCSPush: the function has the shadow call stack push
	// "str x30, [x18], #8".
	SCSPush bool
	// SCSPop: the function has the shadow call stack pop
	// "ldr x30, [x18, #-8]!".
	SCSPop bool
	// Sign is the key of the first instruction that signs x30
	// (paciasp/pacibsp with SP as modifier, paciaz/pacibz with zero).
	Sign Key
	// Auth is the key of the first instruction that authenticates x30
	// (autiasp/autibsp, autiaz/autibz, retaa/retab).
	Auth Key
	// SignBeforePush: x30 is signed before it is pushed on the shadow
	// call stack, so the SCS entries carry the PAC and must be stripped.
	SignBeforePush bool
	// FrameRecord: stores x29 and x30 as a pair at sp (stp x29, x30,
	// [sp, #off] or [sp, #-n]!) and sets x29 to sp or sp+off.
	FrameRecord bool
	// BTI: the function starts with a BTI landing pad.
	BTI bool
	// EntryNOPs is the number of NOPs at the entry (after a BTI), as
	// -fpatchable-function-entry leaves them.
	EntryNOPs int
	// FtraceMovX9: "mov x9, x30" among the first instructions, the
	// patched-in ftrace entry sequence (mov x9, x30; bl ftrace_caller).
	FtraceMovX9 bool
	// Calls counts bl, blr and the authenticated blraa/blrab(z); a
	// function without calls is a leaf.
	Calls int
	// Unknown counts words neither arm64asm nor the PAC matcher decode.
	Unknown int
}

// Leaf reports whether f makes no calls.
func (f FuncShape) Leaf() bool { return f.Calls == 0 }

func shape(f prologue.Func) FuncShape {
	return FuncShape{
		Name: f.Name, Addr: f.Addr, Size: f.Size,
		SCSPush: f.SCSPush, SCSPop: f.SCSPop,
		Sign: Key(f.Sign), Auth: Key(f.Auth), SignBeforePush: f.SignBeforePush,
		FrameRecord: f.FrameRecord, BTI: f.BTI, EntryNOPs: f.EntryNOPs,
		FtraceMovX9: f.FtraceMovX9, Calls: f.Calls, Unknown: f.Unknown,
	}
}

func wrap(b *prologue.Binary, err error) (*Binary, error) {
	if err != nil {
		return nil, err
	}
	fs := b.Funcs()
	out := &Binary{b: b, funcs: make([]FuncShape, len(fs))}
	for i, f := range fs {
		out.funcs[i] = shape(f)
	}
	return out, nil
}

// Funcs returns the functions in address order. The slice must not be
// modified.
func (b *Binary) Funcs() []FuncShape { return b.funcs }

// Func returns the first function named name.
func (b *Binary) Func(name string) (FuncShape, bool) {
	f, ok := b.b.Func(name)
	return shape(f), ok
}

// FuncAt returns the function containing pc.
func (b *Binary) FuncAt(pc uint64) (FuncShape, bool) {
	f, ok := b.b.FuncAt(pc)
	return shape(f), ok
}

// Word returns the instruction word at pc (4-byte aligned, in an
// executable section).
func (b *Binary) Word(pc uint64) (uint32, bool) { return b.b.Word(pc) }

// CallSite describes the instruction before a return address.
type CallSite struct {
	// Ret is the return address (PAC already stripped).
	Ret uint64
	// Call: the instruction at Ret-4 is bl, blr, blraa, blrab, blraaz or
	// blrabz.
	Call bool
	// Insn is that instruction in GNU syntax, "" if undecodable.
	Insn string
	// Target is bl's target; 0 for an indirect call or no call.
	Target uint64
	// Func is the function containing Ret-4, "" if none.
	Func string
}

// CallBefore decodes the instruction before the return address ret, as a
// reliable unwinder checks that a return address follows a call. It fails
// if ret is misaligned or ret-4 is not in an executable section.
func (b *Binary) CallBefore(ret uint64) (CallSite, error) {
	cs, err := b.b.CallBefore(ret)
	return CallSite(cs), err
}

// SymbolTables names the symbol tables the functions came from: ".symtab",
// ".dynsym" or ".symtab and .dynsym".
func (b *Binary) SymbolTables() string { return b.b.SymbolTables() }

// Notes says where the scan departed from the file's symbol tables:
// function symbols whose st_size runs over the next function symbol
// (their spans are cut at it, so no code is scanned twice), and names
// longer than 4096 bytes (cut to 4096).
func (b *Binary) Notes() []string { return b.b.Notes() }
