package scs

// The rules of the shadow call stack, the values of [CorruptError.Rule] for
// this package's corruption errors (plain strings, equal to the same rule's
// constant in every unwindkit package; a test pins them to the one list).
const (
	// RuleSCSRegionMissing: a segment has no shadow-stack memory.
	RuleSCSRegionMissing = "scs region missing"
	// RuleMisalignedSCSBase: a shadow stack base is not 8-byte aligned.
	RuleMisalignedSCSBase = "misaligned scs base"
	// RuleSCSBaseOutsideRegion: a shadow stack base lies outside its memory.
	RuleSCSBaseOutsideRegion = "scs base outside region"
	// RuleSCSOutsideRegion: a shadow stack of the configured size does not
	// fit in its memory.
	RuleSCSOutsideRegion = "scs outside region"
	// RuleSCSTooSmallForEndMagic: a shadow stack has no room for
	// SCS_END_MAGIC.
	RuleSCSTooSmallForEndMagic = "scs too small for end magic"
	// RuleSCSEndMagicOverwritten: SCS_END_MAGIC has changed.
	RuleSCSEndMagicOverwritten = "scs end magic overwritten"
	// RuleMisalignedSCSPointer: an x18 value is not 8-byte aligned.
	RuleMisalignedSCSPointer = "misaligned scs pointer"
	// RuleSCSPointerBelowBase: an x18 value lies below its stack's base.
	RuleSCSPointerBelowBase = "scs pointer below base"
	// RuleSCSPointerOutsideRegion: an x18 value lies past its stack's end.
	RuleSCSPointerOutsideRegion = "scs pointer outside region"
	// RuleBadSCSSegment: a shadow stack segment is malformed.
	RuleBadSCSSegment = "bad scs segment"
	// RuleBadSCSView: a view's segment count is out of range.
	RuleBadSCSView = "bad scs view"
	// RuleSCSOverflow: a push would overwrite the end magic.
	RuleSCSOverflow = "scs overflow"
	// RuleSCSUnderflow: a pop below the context's base.
	RuleSCSUnderflow = "scs underflow"
)
