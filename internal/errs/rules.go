package errs

// The rules whose breach is corruption: the one list of every
// CorruptError.Rule value. They are plain strings, so that one corruption
// error compares equal to the constant of whichever public package a
// caller imports. The public packages (fp, scs, depot, unwind) spell each
// value out in their own untyped constants, so that go doc shows it; their
// tests check that each equals the one here.
const (
	// Frame-pointer walk (package fp).

	RuleMisalignedFP                 = "misaligned fp"                    // a frame pointer is not 8-byte aligned
	RuleFPOutsideStacks              = "fp outside stacks"                // a frame record is in no accessible stack
	RuleFPNotIncreasing              = "fp not increasing"                // an object is below one already consumed on its stack
	RuleObjectCrossesStackEnd        = "object crosses stack end"         // a record, meta record or pt_regs runs past its stack's top
	RuleStackReentered               = "stack re-entered"                 // an object is on a stack the walk has left
	RuleMetaRecordOutsideStacks      = "meta record outside stacks"       // a 24-byte meta record is in no accessible stack
	RuleFinalNotAtTaskPtRegs         = "final record not at task pt_regs" // a FINAL meta record anywhere but the task's pt_regs
	RuleBadMetaType                  = "bad meta record type"             // a meta record type other than FINAL and PT_REGS
	RulePtRegsOutsideStacks          = "pt_regs outside stacks"           // the pt_regs of a PT_REGS meta record are in no accessible stack
	RuleUnrecoverableGraphReturn     = "unrecoverable graph return"       // a function-graph trampoline without its return stack entry
	RuleUnrecoverableKretprobeReturn = "unrecoverable kretprobe return"   // a kretprobe trampoline without its instance

	// Live Go frame-pointer walk (unwind.Callers).

	RuleNonMonotonicFP = "non-monotonic fp" // a live frame pointer does not move up the stack
	RuleFPOutsideStack = "fp outside stack" // a live frame pointer leaves the goroutine stack

	// Shadow call stack (package scs).

	RuleSCSRegionMissing        = "scs region missing"          // a segment has no shadow-stack memory
	RuleMisalignedSCSBase       = "misaligned scs base"         // a shadow stack base is not 8-byte aligned
	RuleSCSBaseOutsideRegion    = "scs base outside region"     // a shadow stack base is outside its memory
	RuleSCSOutsideRegion        = "scs outside region"          // a shadow stack of the configured size does not fit its memory
	RuleSCSTooSmallForEndMagic  = "scs too small for end magic" // a shadow stack has no room for SCS_END_MAGIC
	RuleSCSEndMagicOverwritten  = "scs end magic overwritten"   // SCS_END_MAGIC has changed
	RuleMisalignedSCSPointer    = "misaligned scs pointer"      // an x18 value is not 8-byte aligned
	RuleSCSPointerBelowBase     = "scs pointer below base"      // an x18 value is below its stack's base
	RuleSCSPointerOutsideRegion = "scs pointer outside region"  // an x18 value is past its stack's end
	RuleBadSCSSegment           = "bad scs segment"             // a shadow stack segment is malformed
	RuleBadSCSView              = "bad scs view"                // a view's segment count is out of range
	RuleSCSOverflow             = "scs overflow"                // a push would overwrite the end magic
	RuleSCSUnderflow            = "scs underflow"               // a pop below the context's base

	// Stack depot (package depot).

	RuleRecordOverrunsPool = "record overruns its pool" // a stored trace runs past its pool
)
