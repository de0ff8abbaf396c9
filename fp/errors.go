package fp

import (
	"fmt"

	"github.com/unwindkit/unwindkit/fault"
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
// broken, the address where it was found, and detail. It is
// [fault.CorruptError], the one type of every unwindkit package, so
// errors.As with a *CorruptError matches every corruption error of
// unwindkit (this package's and the others'), and errors.Is(err,
// [ErrCorrupt]) holds for it:
//
//	var ce *fp.CorruptError
//	if errors.As(err, &ce) && ce.Rule == fp.RuleFPNotIncreasing { ... }
type CorruptError = fault.CorruptError

// The rules of the walk, the values of [CorruptError.Rule] (package
// fault's list, re-exported). Each is checked in one place of the walk
// (named after the kernel function that checks it).
const (
	// RuleMisalignedFP: a frame pointer is not 8-byte aligned.
	RuleMisalignedFP = fault.RuleMisalignedFP
	// RuleFPOutsideStacks: a frame record lies in no accessible stack.
	RuleFPOutsideStacks = fault.RuleFPOutsideStacks
	// RuleFPNotIncreasing: an object lies below the end of one already
	// consumed on the same stack (a loop or a backward step).
	RuleFPNotIncreasing = fault.RuleFPNotIncreasing
	// RuleObjectCrossesStackEnd: a record, meta record or pt_regs starts
	// in a stack but runs past its top.
	RuleObjectCrossesStackEnd = fault.RuleObjectCrossesStackEnd
	// RuleStackReentered: an object lies on a stack the walk has left.
	RuleStackReentered = fault.RuleStackReentered
	// RuleMetaRecordOutsideStacks: a {0, 0} record's 24-byte meta record
	// lies in no accessible stack.
	RuleMetaRecordOutsideStacks = fault.RuleMetaRecordOutsideStacks
	// RuleFinalNotAtTaskPtRegs: a FINAL meta record anywhere but the
	// task's pt_regs ([Config.TaskPtRegs]).
	RuleFinalNotAtTaskPtRegs = fault.RuleFinalNotAtTaskPtRegs
	// RuleBadMetaType: a meta record of a type other than [MetaFinal]
	// and [MetaPtRegs].
	RuleBadMetaType = fault.RuleBadMetaType
	// RulePtRegsOutsideStacks: the pt_regs around a PT_REGS meta record
	// lie in no accessible stack.
	RulePtRegsOutsideStacks = fault.RulePtRegsOutsideStacks
	// RuleUnrecoverableGraphReturn: a function-graph trampoline lr with
	// no matching, readable graph return stack entry.
	RuleUnrecoverableGraphReturn = fault.RuleUnrecoverableGraphReturn
	// RuleUnrecoverableKretprobeReturn: a kretprobe trampoline lr with no
	// matching, readable kretprobe instance.
	RuleUnrecoverableKretprobeReturn = fault.RuleUnrecoverableKretprobeReturn
)
