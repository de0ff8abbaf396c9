package vmcore

import (
	"bytes"
	"testing"
)

// trimmedSynth returns a small synthetic vmcore: what reading the stack and
// the kallsyms tables needs.
func trimmedSynth(t testing.TB, o synthOpts) []byte {
	s := newSynth(o)
	v, err := loadBytes(s.bytes())
	if err != nil {
		t.Fatal(err)
	}
	v.RecordReads(true)
	v.ReadVirt64(s.stackVA + stackSize - 16)
	v.Kallsyms()
	var out bytes.Buffer
	if err := v.WriteTrimmed(&out, v.PagesToRanges(v.PagesRead())); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func FuzzLoad(f *testing.F) {
	f.Add(trimmedSynth(f, synthOpts{pageShift: 12, vaBits: 48}))
	f.Add(trimmedSynth(f, synthOpts{pageShift: 12, vaBits: 52, vaActual: 52, lpa2: true, ramBase: 0x000f_0000_4000_0000}))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := loadBytes(b)
		if err != nil {
			return
		}
		v.RecordReads(true)
		for _, c := range v.CPUs {
			v.ReadVirt64(c.Regs.SP)
			v.Translate(c.Regs.X[29])
		}
		v.Kallsyms()
		var out bytes.Buffer
		if err := v.WriteTrimmed(&out, v.PagesToRanges(v.PagesRead())); err != nil {
			return
		}
		if _, err := loadBytes(out.Bytes()); err != nil {
			t.Fatalf("trimmed copy of a loadable vmcore does not load: %v", err)
		}
	})
}
