package kcapture_test

import (
	"os"
	"testing"

	"github.com/unwindkit/unwindkit/internal/kcapture"
)

// FuzzParseExpected parses arbitrary expected.json and matches its traces.
func FuzzParseExpected(f *testing.F) {
	for _, p := range []string{"../../testdata/kernel/deb-6.1/expected.json", "../../testdata/kernel/deb-6.12/expected.json"} {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"stops":[{"name":"x","trace":3}],"traces":[]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := kcapture.ParseExpected(b)
		if err != nil {
			return
		}
		for _, s := range e.Stops {
			s.SPEL0()
			if s.Trace >= 0 {
				kcapture.MatchPrinted(e.Traces[s.Trace].Frames, e.Traces[s.Trace].Frames)
			}
		}
	})
}
