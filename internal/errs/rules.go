package errs

// The rules whose breach is corruption, for the packages that build their
// errors here: the one definition of each CorruptError.Rule value they
// use. They are plain strings, so that one corruption error compares equal
// to the constant of whichever public package a caller imports. Package fp
// and package depot define their rules themselves (a public constant's
// value must show in go doc); unwind spells the live walk's rules out and
// its tests check them against these.
const (
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
)
