package needs

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeTB records what a test would have been told.
type fakeTB struct {
	skipped, failed string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Skipf(format string, args ...any) {
	f.skipped = fmt.Sprintf(format, args...)
}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
}

// TestTool: a tool in PATH is found, its path returned and nothing
// skipped; a missing one skips naming the tool and the package, or fails
// under CI.
func TestTool(t *testing.T) {
	dir := t.TempDir()
	tool := filepath.Join(dir, "unwindkit-needs-tool")
	if err := os.WriteFile(tool, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	for _, ci := range []string{"", "false", "true", "1"} {
		t.Setenv("CI", ci)
		underCI := ci == "true" || ci == "1"
		var f fakeTB
		if got := Tool(&f, "unwindkit-needs-tool", "pkg-a"); got != tool || f.skipped != "" || f.failed != "" {
			t.Errorf("CI=%q: present tool: %q, skipped %q, failed %q; want %q", ci, got, f.skipped, f.failed, tool)
		}
		f = fakeTB{}
		got := Tool(&f, "unwindkit-no-such-tool", "pkg-b")
		msg := f.skipped
		if underCI {
			msg = f.failed
		}
		if got != "" || (f.skipped != "") == underCI || (f.failed != "") != underCI {
			t.Errorf("CI=%q: missing tool: %q, skipped %q, failed %q", ci, got, f.skipped, f.failed)
		}
		for _, want := range []string{"unwindkit-no-such-tool", "Debian package pkg-b"} {
			if !strings.Contains(msg, want) {
				t.Errorf("CI=%q: message %q does not name %q", ci, msg, want)
			}
		}
	}
}

// TestFile: the same for a file.
func TestFile(t *testing.T) {
	present := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(present, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	absent := present + ".absent"
	for _, ci := range []string{"", "true"} {
		t.Setenv("CI", ci)
		var f fakeTB
		if !File(&f, present, "pkg-a") || f.skipped != "" || f.failed != "" {
			t.Errorf("CI=%q: present file: skipped %q, failed %q", ci, f.skipped, f.failed)
		}
		f = fakeTB{}
		if File(&f, absent, "pkg-c") {
			t.Errorf("CI=%q: File(%s) = true", ci, absent)
		}
		msg, other := f.skipped, f.failed
		if ci == "true" {
			msg, other = other, msg
		}
		if other != "" || !strings.Contains(msg, absent) || !strings.Contains(msg, "Debian package pkg-c") {
			t.Errorf("CI=%q: absent file: skipped %q, failed %q", ci, f.skipped, f.failed)
		}
	}
}

// TestGo: the toolchain's go command is found without PATH.
func TestGo(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv("CI", "true")
	var f fakeTB
	got := Go(&f)
	if f.skipped != "" || f.failed != "" {
		t.Fatalf("skipped %q, failed %q", f.skipped, f.failed)
	}
	if fi, err := os.Stat(got); err != nil || fi.IsDir() {
		t.Errorf("Go() = %q: %v", got, err)
	}
}

// TestRealSkip runs a real test in a subprocess (this test binary, with
// -test.run selecting helperMissing): without CI it is skipped and passes,
// with CI=true it fails; both name the package.
func TestRealSkip(t *testing.T) {
	if os.Getenv("UNWINDKIT_NEEDS_HELPER") == "1" {
		return
	}
	for _, ci := range []string{"", "true"} {
		out, err := runHelper(t, ci)
		if _, ok := err.(*exec.ExitError); err != nil && !ok {
			// An arm64 test binary under qemu-aarch64 without binfmt_misc
			// cannot exec itself; TestTool checks the same logic.
			t.Skipf("cannot run the test binary again: %v", err)
		}
		s := string(out)
		if !strings.Contains(s, "Debian package pkg-d") {
			t.Errorf("CI=%q: output does not name the package:\n%s", ci, s)
		}
		if ci == "" && (err != nil || !strings.Contains(s, "--- SKIP: TestHelperMissing")) {
			t.Errorf("CI unset: %v, want a skip and a pass:\n%s", err, s)
		}
		if ci == "true" && (err == nil || !strings.Contains(s, "--- FAIL: TestHelperMissing")) {
			t.Errorf("CI=true: %v, want a failure:\n%s", err, s)
		}
	}
}

// TestHelperMissing is TestRealSkip's subprocess: it needs a tool nobody
// has. Outside that subprocess it does nothing.
func TestHelperMissing(t *testing.T) {
	if os.Getenv("UNWINDKIT_NEEDS_HELPER") != "1" {
		return
	}
	Tool(t, "unwindkit-no-such-tool", "pkg-d")
	t.Error("Tool returned after a missing tool")
}
