package vmcore

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
)

func realVmcore(b *testing.B) *Vmcore {
	f, err := os.Open("../../testdata/vmcores/debian-6.12.111+deb12-va48.vmcore.gz")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		b.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		b.Fatal(err)
	}
	v, err := Load("bench", bytes.NewReader(raw), int64(len(raw)))
	if err != nil {
		b.Fatal(err)
	}
	return v
}

// BenchmarkKallsyms decodes the 115,440 symbols of a real 6.12 kernel from
// the tables in its vmcore (through the page tables), beside parsing the
// same symbols as /proc/kallsyms text: the baseline a tool without the
// tables would have.
func BenchmarkKallsyms(b *testing.B) {
	v := realVmcore(b)
	syms, err := v.Kallsyms()
	if err != nil {
		b.Fatal(err)
	}
	var sb strings.Builder
	for _, s := range syms {
		fmt.Fprintf(&sb, "%016x %c %s\n", s.Addr, s.Type, s.Name)
	}
	text := sb.String()
	b.Run("dump", func(b *testing.B) {
		for b.Loop() {
			if _, err := v.Kallsyms(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("text", func(b *testing.B) {
		for b.Loop() {
			if _, err := ParseKallsyms(strings.NewReader(text)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkTranslate walks the 4-level tables of the real 48-bit dump
// for one kernel address.
func BenchmarkTranslate(b *testing.B) {
	v := realVmcore(b)
	va := v.CPUs[0].Regs.SP
	for b.Loop() {
		if _, err := v.Translate(va); err != nil {
			b.Fatal(err)
		}
	}
}
