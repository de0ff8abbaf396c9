package needs

import (
	"os"
	"os/exec"
	"testing"
)

// runHelper runs TestHelperMissing of this test binary with CI=ci.
func runHelper(t *testing.T, ci string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperMissing$", "-test.v")
	cmd.Env = append(os.Environ(), "UNWINDKIT_NEEDS_HELPER=1", "CI="+ci)
	return cmd.CombinedOutput()
}
