package scs

import (
	"errors"
	"fmt"

	"github.com/unwindkit/unwindkit/fault"
	"github.com/unwindkit/unwindkit/internal/errs"
	"github.com/unwindkit/unwindkit/ptrauth"
)

// EndMagic is arm64's SCS_END_MAGIC, 0x5f6 + POISON_POINTER_DELTA: the value
// in the last word of every shadow call stack.
const EndMagic uint64 = 0xdead0000000005f6

// DefaultSize is the default shadow call stack size in bytes: one 4 KiB
// page, as in current kernels (SCS_SIZE).
const DefaultSize = 4096

// MinSize is the smallest Config.Size accepted: eight words.
const MinSize = 64

// Errors. ErrNotSupported and ErrCorrupt are unwindkit's shared sentinels.
var (
	// ErrNotSupported is returned when the shadow call stack is disabled.
	// errors.Is(ErrNotSupported, unix.ENOSYS) is true.
	ErrNotSupported = errs.ErrNotSupported
	// ErrCorrupt is wrapped by every *CorruptError.
	ErrCorrupt = errs.ErrCorrupt
	// ErrInterruptedTopHidden reports that an interrupted context's x18 was
	// left where only the frame chain can find it (the OnStack policy's IRQ
	// entry: on the interrupted task stack; see Policy.SavedX18). It is
	// returned with the frames found before that context; it is not
	// corruption.
	ErrInterruptedTopHidden = errors.New("scs: interrupted context's shadow stack pointer is hidden from an SCS-only unwinder")
	// ErrNesting reports a context transition the architecture does not
	// allow (an IRQ inside an IRQ or SDEI, an exit without an entry, a task
	// switch outside task context).
	ErrNesting = errors.New("scs: context transition not allowed")
)

// CorruptError describes one piece of corrupt shadow-stack state: the
// rule that was broken, the address where it was found (the slot, the base
// or the x18 value the rule is about), and detail (the context, the
// stack's bounds). It is [fault.CorruptError], the one type of every
// unwindkit package, so errors.As with a *CorruptError matches every
// corruption error of unwindkit (this package's and the others'), and
// errors.Is(err, [ErrCorrupt]) holds for it:
//
//	var ce *scs.CorruptError
//	if errors.As(err, &ce) && ce.Rule == scs.RuleSCSEndMagicOverwritten { ... }
type CorruptError = fault.CorruptError

// Policy selects where the entry code keeps the interrupted x18. Its
// String is "thread_info", "on-stack" or "per-cpu" ("unknown" for the
// zero value, PolicyUnknown).
type Policy uint8

//go:generate go tool stringer -type=Policy,Context -linecomment -output=scs_string.go

const (
	// PolicyUnknown is the zero value: where the x18 is kept is not known
	// (a dump whose entry code was not read, a kernel without SCS). A
	// Config with it takes ThreadInfo, mainline's policy.
	PolicyUnknown Policy = iota // unknown
	// ThreadInfo is mainline today (since v6.2, "arm64: Stash shadow stack
	// pointer in the task struct on interrupt"): IRQ entry stores the task's x18 in
	// thread_info.scs_sp; SDEI keeps it in its saved registers, found via
	// sdei_active_{normal,critical}_event.
	ThreadInfo // thread_info
	// OnStack is 2022 mainline: IRQ entry pushes x18 on the interrupted
	// stack with stp scs_sp, xzr, [sp, #-16]!, hidden from Save; SDEI
	// keeps it in its saved registers, found via
	// sdei_active_{normal,critical}_event.
	OnStack // on-stack
	// PerCPU is the seed patch: irq_shadow_call_stack_saved_ptr and
	// sdei_shadow_call_stack_{normal,critical}_saved_ptr, reset to 0 on
	// exit.
	PerCPU // per-cpu
	// numPolicies is untyped (iota alone), so stringer does not take it
	// for a Policy.
	numPolicies = iota
)

// Policies lists every Policy, in order.
var Policies = [...]Policy{ThreadInfo, OnStack, PerCPU}

// ParsePolicy returns the Policy whose String is name ("thread_info",
// "on-stack" or "per-cpu").
func ParsePolicy(name string) (Policy, error) {
	for _, p := range Policies {
		if p.String() == name {
			return p, nil
		}
	}
	return 0, fmt.Errorf("scs: unknown policy %q (want thread_info, on-stack or per-cpu)", name)
}

// Context is an execution context on one CPU, in nesting order: a context
// may only be interrupted by a later one. Its String is "task", "irq",
// "sdei-normal" or "sdei-critical".
type Context uint8

const (
	// CtxTask is thread context: the current task's shadow stack.
	CtxTask Context = iota // task
	// CtxIRQ is hard-IRQ context on the per-CPU IRQ shadow stack.
	CtxIRQ // irq
	// CtxSDEINormal is a normal-priority SDEI event on its per-CPU shadow
	// stack.
	CtxSDEINormal // sdei-normal
	// CtxSDEICritical is a critical-priority SDEI event on its per-CPU shadow
	// stack.
	CtxSDEICritical // sdei-critical
	// NumContexts is the number of contexts.
	NumContexts = 4
)

// Config configures a Model.
type Config struct {
	// Size is each shadow call stack's size in bytes, end magic included:
	// a multiple of 8, at least MinSize. 0 means DefaultSize.
	Size uint64
	// Policy says where entry code keeps the interrupted x18.
	// PolicyUnknown (0) means ThreadInfo.
	Policy Policy
	// NumCPU is the number of modelled CPUs; 0 means 1.
	NumCPU int
	// Layout is the VA layout used to strip PACs from entries.
	Layout ptrauth.Layout
	// KeepInterruptedPC makes every entry also store the interrupted PC in
	// a per-CPU variable (per context), so Save can report the
	// interrupted function's frame (the seed's proposed fix).
	KeepInterruptedPC bool
	// Disabled models a kernel without CONFIG_SHADOW_CALL_STACK: nothing is
	// allocated, context transitions cost nothing, Push and Pop and Save
	// return ErrNotSupported.
	Disabled bool
	// Mem is the driver's memory, where the OnStack policy stores the
	// interrupted x18 (the slot passed to EnterIRQ). Required for OnStack,
	// unused otherwise.
	Mem Memory
}

// Memory is the part of the driver's address space the model touches
// outside its own shadow stacks: the interrupted normal stack, for OnStack.
type Memory interface {
	Load(addr uint64) (uint64, bool)
	Store(addr, v uint64) bool
}

func (c Config) withDefaults() (Config, error) {
	if c.Size == 0 {
		c.Size = DefaultSize
	}
	if c.Size%8 != 0 || c.Size < MinSize {
		return c, fmt.Errorf("scs: size %d bytes: want a multiple of 8, at least %d", c.Size, MinSize)
	}
	if c.Policy == PolicyUnknown {
		c.Policy = ThreadInfo
	}
	if c.Policy >= numPolicies {
		return c, fmt.Errorf("scs: unknown policy %d", c.Policy)
	}
	if c.NumCPU == 0 {
		c.NumCPU = 1
	}
	if c.NumCPU < 0 {
		return c, fmt.Errorf("scs: %d CPUs", c.NumCPU)
	}
	if c.Policy.UsesInterruptedStack() && c.Mem == nil && !c.Disabled {
		return c, errors.New("scs: the on-stack policy needs Config.Mem (the interrupted stacks)")
	}
	return c, nil
}
