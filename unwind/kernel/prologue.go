package kernel

import (
	"encoding/binary"
	"fmt"
)

// Prologue says how far the function holding a stopped pc got through
// its prologue, read from its code in the dump. It decides whether the
// caller's return address may be on the shadow call stack but in no
// frame record yet.
type Prologue struct {
	// Func is the function holding the pc, and Off the pc's offset in it.
	Func string
	Off  uint64
	// SCSPushAt is the offset of the executed SCS push
	// (`str x30, [x18], #8`), or -1 when none ran before the pc.
	SCSPushAt int
	// LinkedAt is the offset of the executed instruction that set x29
	// (`mov x29, sp` or `add x29, sp, #n`: the frame record is linked),
	// or -1 when none ran before the pc.
	LinkedAt int
}

// Encodings the prologue check looks for (clang's arm64 prologues with
// -fsanitize=shadow-call-stack).
const (
	insnSCSPush = 0xf800865e   // str x30, [x18], #8
	insnSetX29  = 0x910003fd   // add x29, sp, #imm (mov x29, sp is #0)
	immShMask   = 0x1fff << 10 // the shift bit and imm12 of ADD (immediate)
)

// maxPrologue bounds the code read before a pc: a prologue that has not
// linked its record within 16 instructions is not treated as one.
const maxPrologue = 64

// PrologueAt reads the code from the start of the function holding pc up
// to pc and reports which of the prologue's SCS push and frame-record link
// already ran. pc more than 16 instructions into its function is reported
// with Off > 64 and neither found.
func (k *Kernel) PrologueAt(pc uint64) (Prologue, error) {
	s, ok := k.Sym(pc)
	if !ok {
		return Prologue{}, fmt.Errorf("no symbol holds pc %#x", pc)
	}
	p := Prologue{Func: s.Name, Off: pc - s.Addr, SCSPushAt: -1, LinkedAt: -1}
	if p.Off > maxPrologue || p.Off%4 != 0 {
		return p, nil
	}
	code := make([]byte, p.Off)
	if err := k.mem.ReadVirt(code, s.Addr); err != nil {
		return p, fmt.Errorf("code of %s at %#x: %w", s.Name, s.Addr, err)
	}
	for i := 0; i+4 <= len(code); i += 4 {
		switch w := binary.LittleEndian.Uint32(code[i:]); {
		case w == insnSCSPush && p.SCSPushAt < 0:
			p.SCSPushAt = i
		case w&^uint32(immShMask) == insnSetX29 && p.LinkedAt < 0:
			p.LinkedAt = i
		}
	}
	return p, nil
}

// PushedUnlinked reports whether the prologue pushed x30 on the shadow
// call stack but has not linked its frame record: the caller's return
// address is then on the SCS (and in x30) but in no frame record.
func (p Prologue) PushedUnlinked() bool { return p.SCSPushAt >= 0 && p.LinkedAt < 0 }

// String describes the prologue state.
func (p Prologue) String() string {
	switch {
	case p.Func == "":
		return "unknown"
	case p.Off > maxPrologue:
		return fmt.Sprintf("%s+%#x: past the prologue", p.Func, p.Off)
	case p.PushedUnlinked():
		return fmt.Sprintf("%s+%#x: SCS push at +%#x ran, x29 not set yet", p.Func, p.Off, p.SCSPushAt)
	case p.SCSPushAt >= 0:
		return fmt.Sprintf("%s+%#x: SCS push at +%#x and frame record link at +%#x ran", p.Func, p.Off, p.SCSPushAt, p.LinkedAt)
	case p.LinkedAt >= 0:
		return fmt.Sprintf("%s+%#x: frame record linked at +%#x, no SCS push", p.Func, p.Off, p.LinkedAt)
	}
	return fmt.Sprintf("%s+%#x: no SCS push ran yet", p.Func, p.Off)
}
