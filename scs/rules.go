package scs

import "github.com/unwindkit/unwindkit/internal/errs"

// The rules of the shadow call stack, the values of [CorruptError.Rule] for
// this package's corruption errors (plain strings, defined once for all
// unwindkit packages, so they compare equal whichever package's constant
// a caller uses).
const (
	// RuleSCSRegionMissing: a segment has no shadow-stack memory.
	RuleSCSRegionMissing = errs.RuleSCSRegionMissing
	// RuleMisalignedSCSBase: a shadow stack base is not 8-byte aligned.
	RuleMisalignedSCSBase = errs.RuleMisalignedSCSBase
	// RuleSCSBaseOutsideRegion: a shadow stack base lies outside its memory.
	RuleSCSBaseOutsideRegion = errs.RuleSCSBaseOutsideRegion
	// RuleSCSOutsideRegion: a shadow stack of the configured size does not
	// fit in its memory.
	RuleSCSOutsideRegion = errs.RuleSCSOutsideRegion
	// RuleSCSTooSmallForEndMagic: a shadow stack has no room for
	// SCS_END_MAGIC.
	RuleSCSTooSmallForEndMagic = errs.RuleSCSTooSmallForEndMagic
	// RuleSCSEndMagicOverwritten: SCS_END_MAGIC has changed.
	RuleSCSEndMagicOverwritten = errs.RuleSCSEndMagicOverwritten
	// RuleMisalignedSCSPointer: an x18 value is not 8-byte aligned.
	RuleMisalignedSCSPointer = errs.RuleMisalignedSCSPointer
	// RuleSCSPointerBelowBase: an x18 value lies below its stack's base.
	RuleSCSPointerBelowBase = errs.RuleSCSPointerBelowBase
	// RuleSCSPointerOutsideRegion: an x18 value lies past its stack's end.
	RuleSCSPointerOutsideRegion = errs.RuleSCSPointerOutsideRegion
	// RuleBadSCSSegment: a shadow stack segment is malformed.
	RuleBadSCSSegment = errs.RuleBadSCSSegment
	// RuleBadSCSView: a view's segment count is out of range.
	RuleBadSCSView = errs.RuleBadSCSView
	// RuleSCSOverflow: a push would overwrite the end magic.
	RuleSCSOverflow = errs.RuleSCSOverflow
	// RuleSCSUnderflow: a pop below the context's base.
	RuleSCSUnderflow = errs.RuleSCSUnderflow
)
