package fault

// The rules whose breach is corruption: the one list of every
// [CorruptError.Rule] value, each string spelled here and nowhere else.
// The packages that check a rule re-export its constant under the same
// name (fp.RuleMisalignedFP is RuleMisalignedFP).
const (
	// Frame-pointer walk (package fp, after arch/arm64/kernel/stacktrace.c).

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

	// Live Go frame-pointer walk (package unwind/live). A misaligned live
	// frame pointer is RuleMisalignedFP.

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

	// Kernel shadow call stack read from a dump (package unwind/kernel).

	RuleSCSPointerOutsideStack = "scs pointer outside its stack"                   // a dumped x18 is outside [base, base+SCS_SIZE) of its stack
	RulePerCPUSavedX18Zero     = "per-CPU saved x18 is 0 inside call_on_irq_stack" // the seed policy's saved pointer is 0 while its context is live
	RulePtRegsX18AboveSaved    = "pt_regs x18 above the saved x18"                 // pt_regs.regs[18] is above the policy's saved x18 on the same shadow stack

	// Guarded Control Stack (package unwind/gcs); Addr is the entry's or
	// the pointer's address.

	RuleMisalignedGCSPointer    = "misaligned gcs pointer"     // a GCSPR_EL0 value is not 8-byte aligned
	RuleGCSPointerOutsideRegion = "gcs pointer outside region" // GCSPR_EL0 is outside the captured GCS region
	RuleGCSBadEntry             = "gcs bad entry"              // an entry is neither a return address nor a token of the architecture or the kernel
	RuleGCSNoTop                = "gcs no top marker"          // the region ends before the top-of-stack marker 0
	RuleGCSOverflow             = "gcs overflow"               // a push below the stack's base (the guard page)
	RuleGCSUnderflow            = "gcs underflow"              // a pop past the top-of-stack marker
	RuleGCSReturnMismatch       = "gcs return mismatch"        // ret with x30 different from the newest entry (GCS exception)
	RuleGCSBadSignalCap         = "gcs bad signal cap"         // sigreturn found no signal cap token at GCSPR_EL0

	// Stack depot (package depot).

	RuleRecordOverrunsPool = "record overruns its pool" // a stored trace runs past its pool

	// Snapshot documents (package unwind/snapshot); Addr is the byte
	// offset in the document and Detail starts with the field's name.

	RuleSnapshotSyntax     = "snapshot syntax"           // not a JSON document of the right shape
	RuleSnapshotMissing    = "snapshot missing field"    // a required field is absent
	RuleSnapshotBadValue   = "snapshot bad value"        // bad hex, base64, version, arch, va_bits, ...
	RuleSnapshotOverlap    = "snapshot regions overlap"  // two regions share an address
	RuleSnapshotTooLarge   = "snapshot region too large" // a region over the size limit
	RuleSnapshotTotal      = "snapshot too large"        // the regions and strings together pass the total limit
	RuleSnapshotTooMany    = "snapshot too many entries" // too many regions, symbols or expect entries
	RuleSnapshotRegOutside = "snapshot register outside" // sp, x29, x18 or scs_base not where it must point

	// Kernel BTF type information (package unwind/vmcore); Addr is the
	// byte offset in the BTF blob.

	RuleMalformedBTF = "malformed BTF" // a BTF header, type or string is out of bounds or ill-formed
)
