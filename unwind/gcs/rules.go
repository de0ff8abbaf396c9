package gcs

import "github.com/unwindkit/unwindkit/fault"

// The rules of the Guarded Control Stack, the values of a
// *fault.CorruptError's Rule for this package's errors (package fault's
// list, re-exported).
const (
	// RuleMisalignedGCSPointer: GCSPR_EL0 is not 8-byte aligned.
	RuleMisalignedGCSPointer = fault.RuleMisalignedGCSPointer
	// RuleGCSPointerOutsideRegion: GCSPR_EL0 is outside the GCS memory.
	RuleGCSPointerOutsideRegion = fault.RuleGCSPointerOutsideRegion
	// RuleGCSBadEntry: an entry is neither a return address nor a token.
	RuleGCSBadEntry = fault.RuleGCSBadEntry
	// RuleGCSNoTop: the memory ends before the top-of-stack marker.
	RuleGCSNoTop = fault.RuleGCSNoTop
	// RuleGCSOverflow: a push below the GCS's base (its guard page).
	RuleGCSOverflow = fault.RuleGCSOverflow
	// RuleGCSUnderflow: a pop of the top-of-stack marker.
	RuleGCSUnderflow = fault.RuleGCSUnderflow
	// RuleGCSReturnMismatch: ret with x30 other than the newest entry.
	RuleGCSReturnMismatch = fault.RuleGCSReturnMismatch
	// RuleGCSBadSignalCap: sigreturn found no signal cap token.
	RuleGCSBadSignalCap = fault.RuleGCSBadSignalCap
)
