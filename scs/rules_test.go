package scs

import (
	"testing"

	"github.com/unwindkit/unwindkit/internal/errs"
)

// TestRulesMatchErrs pins the package's rule strings to the one list in
// internal/errs, which the copy and the model use.
func TestRulesMatchErrs(t *testing.T) {
	for _, r := range [][2]string{
		{RuleSCSRegionMissing, errs.RuleSCSRegionMissing},
		{RuleMisalignedSCSBase, errs.RuleMisalignedSCSBase},
		{RuleSCSBaseOutsideRegion, errs.RuleSCSBaseOutsideRegion},
		{RuleSCSOutsideRegion, errs.RuleSCSOutsideRegion},
		{RuleSCSTooSmallForEndMagic, errs.RuleSCSTooSmallForEndMagic},
		{RuleSCSEndMagicOverwritten, errs.RuleSCSEndMagicOverwritten},
		{RuleMisalignedSCSPointer, errs.RuleMisalignedSCSPointer},
		{RuleSCSPointerBelowBase, errs.RuleSCSPointerBelowBase},
		{RuleSCSPointerOutsideRegion, errs.RuleSCSPointerOutsideRegion},
		{RuleBadSCSSegment, errs.RuleBadSCSSegment},
		{RuleBadSCSView, errs.RuleBadSCSView},
		{RuleSCSOverflow, errs.RuleSCSOverflow},
		{RuleSCSUnderflow, errs.RuleSCSUnderflow},
	} {
		if r[0] != r[1] {
			t.Errorf("scs rule %q, errs has %q", r[0], r[1])
		}
	}
}
