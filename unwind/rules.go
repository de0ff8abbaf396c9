package unwind

import (
	"github.com/unwindkit/unwindkit/fault"
	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/scs"
)

// CorruptError describes corrupt state: the rule broken, the address
// where it was found, and detail. It is [fault.CorruptError], the one type
// of every unwindkit package (fp.CorruptError and scs.CorruptError are
// the same type), so errors.As with a *CorruptError matches every
// corruption error of unwindkit, whichever package found it, and
// errors.Is(err, [ErrCorrupt]) holds for it. Rule is one of the Rule
// constants below, or of package depot or of a snapshot's loader (all in
// package fault's one list), for their errors.
type CorruptError = fault.CorruptError

// The rules whose breach is corruption, the values of CorruptError.Rule
// for the errors this package returns: the frame-pointer walk's (package
// fp), the shadow call stack's (package scs) and the live Go walk's
// (Callers). They are plain strings, defined once for all unwindkit
// packages (package fault's list), so fp.RuleMisalignedFP ==
// unwind.RuleMisalignedFP.
const (
	RuleMisalignedFP                 = fp.RuleMisalignedFP                 // see fp.RuleMisalignedFP
	RuleFPOutsideStacks              = fp.RuleFPOutsideStacks              // see fp.RuleFPOutsideStacks
	RuleFPNotIncreasing              = fp.RuleFPNotIncreasing              // see fp.RuleFPNotIncreasing
	RuleObjectCrossesStackEnd        = fp.RuleObjectCrossesStackEnd        // see fp.RuleObjectCrossesStackEnd
	RuleStackReentered               = fp.RuleStackReentered               // see fp.RuleStackReentered
	RuleMetaRecordOutsideStacks      = fp.RuleMetaRecordOutsideStacks      // see fp.RuleMetaRecordOutsideStacks
	RuleFinalNotAtTaskPtRegs         = fp.RuleFinalNotAtTaskPtRegs         // see fp.RuleFinalNotAtTaskPtRegs
	RuleBadMetaType                  = fp.RuleBadMetaType                  // see fp.RuleBadMetaType
	RulePtRegsOutsideStacks          = fp.RulePtRegsOutsideStacks          // see fp.RulePtRegsOutsideStacks
	RuleUnrecoverableGraphReturn     = fp.RuleUnrecoverableGraphReturn     // see fp.RuleUnrecoverableGraphReturn
	RuleUnrecoverableKretprobeReturn = fp.RuleUnrecoverableKretprobeReturn // see fp.RuleUnrecoverableKretprobeReturn

	RuleNonMonotonicFP = fault.RuleNonMonotonicFP // Callers: a live frame pointer does not move up the goroutine stack
	RuleFPOutsideStack = fault.RuleFPOutsideStack // Callers: a live frame pointer leaves the goroutine stack

	RuleSCSRegionMissing        = scs.RuleSCSRegionMissing        // see scs.RuleSCSRegionMissing
	RuleMisalignedSCSBase       = scs.RuleMisalignedSCSBase       // see scs.RuleMisalignedSCSBase
	RuleSCSBaseOutsideRegion    = scs.RuleSCSBaseOutsideRegion    // see scs.RuleSCSBaseOutsideRegion
	RuleSCSOutsideRegion        = scs.RuleSCSOutsideRegion        // see scs.RuleSCSOutsideRegion
	RuleSCSTooSmallForEndMagic  = scs.RuleSCSTooSmallForEndMagic  // see scs.RuleSCSTooSmallForEndMagic
	RuleSCSEndMagicOverwritten  = scs.RuleSCSEndMagicOverwritten  // see scs.RuleSCSEndMagicOverwritten
	RuleMisalignedSCSPointer    = scs.RuleMisalignedSCSPointer    // see scs.RuleMisalignedSCSPointer
	RuleSCSPointerBelowBase     = scs.RuleSCSPointerBelowBase     // see scs.RuleSCSPointerBelowBase
	RuleSCSPointerOutsideRegion = scs.RuleSCSPointerOutsideRegion // see scs.RuleSCSPointerOutsideRegion
	RuleBadSCSSegment           = scs.RuleBadSCSSegment           // see scs.RuleBadSCSSegment
	RuleBadSCSView              = scs.RuleBadSCSView              // see scs.RuleBadSCSView
	RuleSCSOverflow             = scs.RuleSCSOverflow             // see scs.RuleSCSOverflow
	RuleSCSUnderflow            = scs.RuleSCSUnderflow            // see scs.RuleSCSUnderflow
)
