package tracegen

import (
	"fmt"
	"slices"
	"testing"
)

// TestKernel checks what the depot's tests rely on: n distinct traces of
// depth aligned kernel-text frames, the same for the same seed.
func TestKernel(t *testing.T) {
	a, b := Kernel(500, 8, 3), Kernel(500, 8, 3)
	seen := map[string]bool{}
	for i, tr := range a {
		if len(tr) != 8 || !slices.Equal(tr, b[i]) {
			t.Fatalf("trace %d: %x, again %x", i, tr, b[i])
		}
		key := fmt.Sprint(tr)
		for _, pc := range tr {
			if pc < KernelText || pc >= KernelText+1<<24 || pc%4 != 0 {
				t.Fatalf("trace %d: frame %#x", i, pc)
			}
		}
		if seen[key] {
			t.Fatalf("trace %d repeats an earlier one", i)
		}
		seen[key] = true
	}
}
