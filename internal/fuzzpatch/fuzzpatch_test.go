package fuzzpatch

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

func TestApply(t *testing.T) {
	base := []byte("0123456789")
	cat := func(rs ...[]byte) []byte { return bytes.Join(rs, nil) }
	tests := []struct {
		name  string
		patch []byte
		want  string
	}{
		{"empty", nil, "0123456789"},
		{"short record ignored", []byte{1, 0, 0, 0}, "0123456789"},
		{"one edit", Edit(2, []byte("ab")), "01ab456789"},
		{"offset modulo the length", Edit(12, []byte("x")), "01x3456789"},
		{"clipped at the end", Edit(8, []byte("wxyz")), "01234567wx"},
		{"data shorter than n", []byte{3, 0, 0, 0, 5, 'q'}, "012q456789"},
		{"two edits", cat(Edit(0, []byte("a")), Edit(9, []byte("b"))), "a12345678b"},
		{"truncate", []byte{4, 0, 0, 0, 0}, "0123"},
		{"truncate then edit", cat([]byte{4, 0, 0, 0, 0}, Edit(5, []byte("z"))), "0z23"},
		{"truncate to nothing", cat([]byte{0, 0, 0, 0, 0}, Edit(0, []byte("z"))), ""},
	}
	for _, tt := range tests {
		got := Apply(base, tt.patch)
		if string(got) != tt.want {
			t.Errorf("%s: Apply = %q, want %q", tt.name, got, tt.want)
		}
	}
	if string(base) != "0123456789" {
		t.Errorf("base changed: %q", base)
	}
	var many []byte
	for i := range MaxEdits + 1 {
		many = append(many, Edit(uint32(i), []byte{'x'})...)
	}
	if got := Apply(make([]byte, 2*MaxEdits), many); bytes.Count(got, []byte{'x'}) != MaxEdits {
		t.Errorf("%d records applied, want MaxEdits (%d)", bytes.Count(got, []byte{'x'}), MaxEdits)
	}
	if got := Apply(nil, Edit(0, []byte("x"))); len(got) != 0 {
		t.Errorf("Apply on an empty base = %q", got)
	}
}

type fakeTB struct{ failed string }

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
}

func TestRead(t *testing.T) {
	dir := t.TempDir()
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write([]byte("inflated"))
	zw.Close()
	os.WriteFile(filepath.Join(dir, "a.gz"), z.Bytes(), 0o644)
	os.WriteFile(filepath.Join(dir, "b"), []byte("plain"), 0o644)
	os.WriteFile(filepath.Join(dir, "c.gz"), []byte("not gzip"), 0o644)
	var f fakeTB
	if got := Read(&f, filepath.Join(dir, "a.gz")); string(got) != "inflated" || f.failed != "" {
		t.Errorf("a.gz: %q, %q", got, f.failed)
	}
	if got := Read(&f, filepath.Join(dir, "b")); string(got) != "plain" || f.failed != "" {
		t.Errorf("b: %q, %q", got, f.failed)
	}
	for _, name := range []string{"c.gz", "absent"} {
		f = fakeTB{}
		if Read(&f, filepath.Join(dir, name)); f.failed == "" {
			t.Errorf("%s: no failure", name)
		}
	}
}

// TestSeeds: on a real ELF file there are seeds beyond the empty patch,
// each leaves the file as it is, and none is longer than a record.
func TestSeeds(t *testing.T) {
	base := Read(t, "../../testdata/arm64/bin/clang-pacret.elf")
	seeds := Seeds(base, 100)
	if len(seeds) < 10 || len(seeds) > maxSeeds {
		t.Fatalf("%d seeds", len(seeds))
	}
	for i, s := range seeds {
		if len(s) > 5+255 {
			t.Errorf("seed %d: %d bytes", i, len(s))
		}
		if !bytes.Equal(Apply(base, s), base) {
			t.Errorf("seed %d changes the file", i)
		}
	}
	if got := Seeds(base, 3); len(got) != 3 {
		t.Errorf("Seeds(base, 3): %d seeds", len(got))
	}
	if got := Seeds([]byte("not ELF"), 10); len(got) != 1 || len(got[0]) != 0 {
		t.Errorf("Seeds of a non-ELF file: %q", got)
	}
}
