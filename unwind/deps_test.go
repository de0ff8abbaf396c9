package unwind_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/internal/needs"
)

const module = "github.com/unwindkit/unwindkit"

// goList returns the packages pkg links (go list -deps), itself included.
func goList(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command(needs.Go(t), "list", "-deps", "-f", "{{.ImportPath}}", pkg).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, ee.Stderr)
		}
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, pkg) {
		t.Fatalf("go list -deps %s does not list the package itself: %q", pkg, deps)
	}
	return deps
}

// heavy is what a program that only wants live Go stack traces (or the
// front door's Save and Frames) must not link: ELF and DWARF reading, the
// instruction decoder, JSON, and the products above the front door.
func heavy(dep string) bool {
	switch {
	case dep == "debug/elf", dep == "debug/dwarf", dep == "encoding/json",
		strings.HasPrefix(dep, "golang.org/x/arch/"):
		return true
	case strings.HasPrefix(dep, module+"/unwind/"):
		return true // the machine model, snapshots, the prologue scanner
	}
	return false
}

// TestDepsLive checks that a program importing unwind/live links none of
// debug/elf, golang.org/x/arch, encoding/json or the machine model: only
// the runtime's own packages, the live unwinder's internals and package
// fault, the leaf that defines the errors every package shares (its
// CorruptError is what a broken chain returns).
func TestDepsLive(t *testing.T) {
	pkg := module + "/unwind/live"
	deps := goList(t, pkg)
	for _, d := range deps {
		if d != pkg && heavy(d) {
			t.Errorf("%s links %s", pkg, d)
		}
		if strings.HasPrefix(d, module+"/") && d != pkg && d != module+"/fault" &&
			!strings.HasPrefix(d, module+"/internal/") {
			t.Errorf("%s links the public package %s; it needs only its internals", pkg, d)
		}
	}
	if !slices.Contains(deps, module+"/internal/live") {
		t.Errorf("%s does not link internal/live: %q", pkg, deps)
	}
}

// TestDepsFrontDoor checks that the front door links none of the heavy
// packages and never imports one of its subpackages (no upward import).
func TestDepsFrontDoor(t *testing.T) {
	pkg := module + "/unwind"
	deps := goList(t, pkg)
	for _, d := range deps {
		if heavy(d) {
			t.Errorf("%s links %s", pkg, d)
		}
	}
	for _, want := range []string{module + "/scs", module + "/fp"} {
		if !slices.Contains(deps, want) {
			t.Errorf("%s does not link %s: %q", pkg, want, deps)
		}
	}
}

// TestDepsLayering checks that nothing imports upward: the packages below
// the front door link neither it nor its subpackages, and each subpackage
// of unwind links no sibling (each product has its own room).
func TestDepsLayering(t *testing.T) {
	for _, low := range []string{"ptrauth", "percpu", "scs", "fp", "depot"} {
		pkg := module + "/" + low
		for _, d := range goList(t, pkg) {
			if d == module+"/unwind" || strings.HasPrefix(d, module+"/unwind/") {
				t.Errorf("%s links %s (upward import)", pkg, d)
			}
		}
	}
	subs := []string{"live", "machine", "snapshot", "prologue"}
	for _, s := range subs {
		pkg := module + "/unwind/" + s
		for _, d := range goList(t, pkg) {
			if d != pkg && strings.HasPrefix(d, module+"/unwind/") {
				t.Errorf("%s links its sibling %s", pkg, d)
			}
		}
	}
}
