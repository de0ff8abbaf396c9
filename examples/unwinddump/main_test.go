package main

import (
	"strings"
	"testing"
)

func TestDumpSignal(t *testing.T) {
	var b strings.Builder
	if err := dump(&b, "../../testdata/arm64/snapshots/gcc-pacret-pauth-signal.json"); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"SCS copy: 6 frames; FP walk: 9 frames",
		"sigreturn_tramp",
		"scs sees  6 of 9: missing capture, sig_raise, _start",
		"fp  sees  9 of 9: missing nothing",
		"only FP: the walk's start pc",
		"only FP: the function that saved it did not push on the SCS",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestDumpBadFile(t *testing.T) {
	var b strings.Builder
	if err := dump(&b, "../../testdata/README.md"); err == nil {
		t.Fatal("dump of a non-snapshot succeeded")
	}
}
