package fp

import (
	"fmt"

	"github.com/unwindkit/unwindkit/internal/errs"
)

// ErrCorrupt is wrapped by every corruption error of this package, each a
// *[CorruptError] naming the rule and the address. It is the same value in
// every unwindkit package.
var ErrCorrupt = errs.ErrCorrupt

// ErrUnreliable is returned (wrapped, with the address) by a reliable walk
// that meets something a reliable trace may not contain: an exception
// boundary, an unrecovered return trampoline, an end other than FINAL, or
// a consumer that stopped the walk (a full store included, see [Save]).
// It is not corruption: the same stack walks fine without
// [Config.Reliable]. It is the same value in every unwindkit package.
var ErrUnreliable = errs.ErrUnreliable

func unreliable(addr uint64, format string, args ...any) error {
	return fmt.Errorf("%w: %s at %#x", ErrUnreliable, fmt.Sprintf(format, args...), addr)
}

// CorruptError describes one piece of corruption: the rule that was
// broken, the address where it was found, and detail. errors.As with a
// *CorruptError matches every corruption error of unwindkit (this
// package's and the others'), and errors.Is(err, [ErrCorrupt]) holds for
// it:
//
//	var ce *fp.CorruptError
//	if errors.As(err, &ce) && ce.Rule == fp.RuleFPNotIncreasing { ... }
type CorruptError struct {
	// Rule is the broken rule: one of the Rule constants of this package
	// (for errors from other unwindkit packages, one of theirs).
	Rule string
	// Addr is where the corruption was found.
	Addr uint64
	// Detail is optional extra context.
	Detail string
}

// Error implements error, in the same words as every unwindkit package.
func (e *CorruptError) Error() string {
	return (&errs.CorruptError{Rule: e.Rule, Addr: e.Addr, Detail: e.Detail}).Error()
}

// Unwrap returns [ErrCorrupt].
func (e *CorruptError) Unwrap() error { return ErrCorrupt }

func init() { errs.RegisterAs[CorruptError]() }

// The rules of the walk, the values of [CorruptError.Rule]. Each is
// checked in one place of the walk (named after the kernel function that
// checks it).
const (
	// RuleMisalignedFP: a frame pointer is not 8-byte aligned.
	RuleMisalignedFP = "misaligned fp"
	// RuleFPOutsideStacks: a frame record lies in no accessible stack.
	RuleFPOutsideStacks = "fp outside stacks"
	// RuleFPNotIncreasing: an object lies below the end of one already
	// consumed on the same stack (a loop or a backward step).
	RuleFPNotIncreasing = "fp not increasing"
	// RuleObjectCrossesStackEnd: a record, meta record or pt_regs starts
	// in a stack but runs past its top.
	RuleObjectCrossesStackEnd = "object crosses stack end"
	// RuleStackReentered: an object lies on a stack the walk has left.
	RuleStackReentered = "stack re-entered"
	// RuleMetaRecordOutsideStacks: a {0, 0} record's 24-byte meta record
	// lies in no accessible stack.
	RuleMetaRecordOutsideStacks = "meta record outside stacks"
	// RuleFinalNotAtTaskPtRegs: a FINAL meta record anywhere but the
	// task's pt_regs ([Config.TaskPtRegs]).
	RuleFinalNotAtTaskPtRegs = "final record not at task pt_regs"
	// RuleBadMetaType: a meta record of a type other than [MetaFinal]
	// and [MetaPtRegs].
	RuleBadMetaType = "bad meta record type"
	// RulePtRegsOutsideStacks: the pt_regs around a PT_REGS meta record
	// lie in no accessible stack.
	RulePtRegsOutsideStacks = "pt_regs outside stacks"
	// RuleUnrecoverableGraphReturn: a function-graph trampoline lr with
	// no matching, readable graph return stack entry.
	RuleUnrecoverableGraphReturn = "unrecoverable graph return"
	// RuleUnrecoverableKretprobeReturn: a kretprobe trampoline lr with no
	// matching, readable kretprobe instance.
	RuleUnrecoverableKretprobeReturn = "unrecoverable kretprobe return"
)
