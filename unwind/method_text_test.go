package unwind_test

import (
	"flag"
	"io"
	"testing"

	"github.com/unwindkit/unwindkit/unwind"
)

// TestMethodText checks that flag.TextVar parses every Method and rejects
// anything else, and that MarshalText round-trips.
func TestMethodText(t *testing.T) {
	for _, want := range []unwind.Method{unwind.MethodAuto, unwind.MethodSCS, unwind.MethodFP} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		var got unwind.Method
		fs.TextVar(&got, "method", unwind.MethodSCS, "technique")
		if err := fs.Parse([]string{"-method", want.String()}); err != nil {
			t.Fatalf("%v: %v", want, err)
		}
		if got != want {
			t.Errorf("-method %s parsed as %v", want, got)
		}
		b, err := want.MarshalText()
		if err != nil || string(b) != want.String() {
			t.Errorf("%v.MarshalText() = %q, %v", want, b, err)
		}
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	m := unwind.MethodFP
	fs.TextVar(&m, "method", unwind.MethodSCS, "technique")
	if err := fs.Parse([]string{"-method", "frame"}); err == nil {
		t.Errorf("-method frame accepted as %v", m)
	}
	if b, err := unwind.Method(9).MarshalText(); err == nil {
		t.Errorf("Method(9).MarshalText() = %q, no error", b)
	}
	if _, err := unwind.ParseMethod("SCS"); err == nil {
		t.Error(`ParseMethod("SCS") accepted a name String never returns`)
	}
}
