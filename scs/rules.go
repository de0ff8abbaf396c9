package scs

import "github.com/unwindkit/unwindkit/fault"

// The rules of the shadow call stack, the values of [CorruptError.Rule] for
// this package's corruption errors (plain strings: package fault's list,
// re-exported, so each equals the same rule's constant in every unwindkit
// package).
const (
	// RuleSCSRegionMissing: a segment has no shadow-stack memory.
	RuleSCSRegionMissing = fault.RuleSCSRegionMissing
	// RuleMisalignedSCSBase: a shadow stack base is not 8-byte aligned.
	RuleMisalignedSCSBase = fault.RuleMisalignedSCSBase
	// RuleSCSBaseOutsideRegion: a shadow stack base lies outside its memory.
	RuleSCSBaseOutsideRegion = fault.RuleSCSBaseOutsideRegion
	// RuleSCSOutsideRegion: a shadow stack of the configured size does not
	// fit in its memory.
	RuleSCSOutsideRegion = fault.RuleSCSOutsideRegion
	// RuleSCSTooSmallForEndMagic: a shadow stack has no room for
	// SCS_END_MAGIC.
	RuleSCSTooSmallForEndMagic = fault.RuleSCSTooSmallForEndMagic
	// RuleSCSEndMagicOverwritten: SCS_END_MAGIC has changed.
	RuleSCSEndMagicOverwritten = fault.RuleSCSEndMagicOverwritten
	// RuleMisalignedSCSPointer: an x18 value is not 8-byte aligned.
	RuleMisalignedSCSPointer = fault.RuleMisalignedSCSPointer
	// RuleSCSPointerBelowBase: an x18 value lies below its stack's base.
	RuleSCSPointerBelowBase = fault.RuleSCSPointerBelowBase
	// RuleSCSPointerOutsideRegion: an x18 value lies past its stack's end.
	RuleSCSPointerOutsideRegion = fault.RuleSCSPointerOutsideRegion
	// RuleBadSCSSegment: a shadow stack segment is malformed.
	RuleBadSCSSegment = fault.RuleBadSCSSegment
	// RuleBadSCSView: a view's segment count is out of range.
	RuleBadSCSView = fault.RuleBadSCSView
	// RuleSCSOverflow: a push would overwrite the end magic.
	RuleSCSOverflow = fault.RuleSCSOverflow
	// RuleSCSUnderflow: a pop below the context's base.
	RuleSCSUnderflow = fault.RuleSCSUnderflow
)
