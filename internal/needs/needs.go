// Package needs lets a test say which optional tool or system file it
// needs, and which Debian package provides it. Where the tool or file is
// missing the test (or subtest) is skipped with a message naming the
// package, so that `go test ./...` passes wherever Go is; under CI (the
// environment variable CI set to true, as .ci/run does after installing
// every package) a missing tool or file fails the test instead, so that
// nothing is skipped silently there.
package needs

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
)

// TB is the part of testing.TB the package uses (a testing.TB is one).
type TB interface {
	Helper()
	Skipf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// CI reports whether the tests run under CI: the environment variable CI
// is a true value of strconv.ParseBool ("true", "1", ...).
func CI() bool {
	ci, err := strconv.ParseBool(os.Getenv("CI"))
	return err == nil && ci
}

// missing skips t, or fails it under CI, saying what is missing and
// which Debian package provides it.
func missing(t TB, what, pkg string, err error) {
	t.Helper()
	if CI() {
		t.Fatalf("%s: %v (Debian package %s; CI=true, so a missing tool or file is a failure: .ci/run installs it)", what, err, pkg)
		return
	}
	t.Skipf("%s: %v (install the Debian package %s to run this test)", what, err, pkg)
}

// Tool returns the path of the command name found in PATH. Where it is
// not found, t is skipped (failed under CI) naming the Debian package pkg
// that provides it, and Tool returns "" (after t.Skipf or t.Fatalf, which
// end the test on a testing.TB).
func Tool(t TB, name, pkg string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		missing(t, "needs "+name, pkg, err)
		return ""
	}
	return path
}

// File checks that the file path exists. Where it does not, t is skipped
// (failed under CI) naming the Debian package pkg that provides it, and
// File returns false.
func File(t TB, path, pkg string) bool {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		missing(t, "needs "+path, pkg, err)
		return false
	}
	return true
}

// Go returns the go command of the toolchain that built the test
// ($GOROOT/bin/go, else go in PATH). Where there is none (a test binary
// copied away from its toolchain), t is skipped (failed under CI).
func Go(t TB) string {
	t.Helper()
	exe := "go"
	if runtime.GOOS == "windows" {
		exe = "go.exe"
	}
	path := filepath.Join(runtime.GOROOT(), "bin", exe)
	if _, err := os.Stat(path); err == nil {
		return path
	}
	path, err := exec.LookPath("go")
	if err != nil {
		missing(t, "needs the go command ("+filepath.Join(runtime.GOROOT(), "bin", exe)+" or in PATH)", "golang-go, or Go from go.dev/dl", err)
		return ""
	}
	return path
}
