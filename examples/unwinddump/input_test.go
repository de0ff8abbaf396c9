package main

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// elfBomb returns a gzip file of n MiB starting with the ELF magic, the
// rest zeros: n concatenated members of 1 MiB (read as one stream).
func elfBomb(t *testing.T, n int) []byte {
	t.Helper()
	member := func(b []byte) []byte {
		var m bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&m, gzip.BestCompression)
		zw.Write(b)
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		return m.Bytes()
	}
	first := make([]byte, 1<<20)
	copy(first, "\x7fELF")
	return append(member(first), bytes.Repeat(member(make([]byte, 1<<20)), n-1)...)
}

// Gzip bombs given as a vmcore, a core and a core's executable are
// rejected while inflating, within a bound of the compressed size: the
// old code read each with io.ReadAll up to 1 GiB and checked the limit
// after (a 271 KB bomb of 256 MiB allocated 600 MB; one of 1 GiB, 64 s
// and 2.7 GB).
func TestGzipBombs(t *testing.T) {
	dir := t.TempDir()
	bomb := filepath.Join(dir, "bomb.gz")
	if err := os.WriteFile(bomb, elfBomb(t, 256), 0o644); err != nil {
		t.Fatal(err)
	}
	core := "../../testdata/cores/cores/gcc-pie-pauth-leaf.core.gz"
	for _, c := range []struct {
		name string
		run  func() error
	}{
		{"vmcore", func() error { return dumpVmcore(&strings.Builder{}, bomb) }},
		{"core", func() error { return dumpCore(&strings.Builder{}, bomb, []string{"exe"}) }},
		{"executable", func() error { return dumpCore(&strings.Builder{}, core, []string{bomb}) }},
	} {
		var a, b runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&a)
		t0 := time.Now()
		err := c.run()
		d := time.Since(t0)
		runtime.ReadMemStats(&b)
		alloc := b.TotalAlloc - a.TotalAlloc
		t.Logf("%s: %v: %d bytes allocated, %v", c.name, err, alloc, d)
		if err == nil || !strings.Contains(err.Error(), "bomb.gz") || !strings.Contains(err.Error(), "decompresses to more than") {
			t.Errorf("%s bomb: %v", c.name, err)
		}
		// The error says the decompression stopped at its limit; the
		// memory is the bound that does not depend on the machine's
		// load (the time is logged, not asserted).
		if alloc > 64<<20 {
			t.Errorf("%s bomb: %d bytes allocated, %v", c.name, alloc, d)
		}
	}
}

// openInput reads an uncompressed file in place and removes the
// temporary file of a compressed one when closed.
func TestOpenInput(t *testing.T) {
	in, err := openInput("main.go", coreRatio)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat("main.go")
	if in.size != st.Size() {
		t.Errorf("size %d, file %d", in.size, st.Size())
	}
	in.close()
	in, err = openInput("../../testdata/cores/cores/gcc-pie-pauth-leaf.core.gz", coreRatio)
	if err != nil {
		t.Fatal(err)
	}
	name := in.ReaderAt.(*os.File).Name()
	if in.size != 126976 {
		t.Errorf("decompressed size %d", in.size)
	}
	if err := in.close(); err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(name); !os.IsNotExist(err) {
		t.Errorf("temporary file %s left: %v", name, err)
	}
	if _, err := openInput("../../testdata", coreRatio); err == nil {
		t.Error("a directory opened")
	}
}

// A gzip input is recognised by its content: a compressed core named
// without .gz unwinds as the .gz does (the old code read it raw and
// failed with bad magic).
func TestGzipByContent(t *testing.T) {
	b, err := os.ReadFile("../../testdata/cores/cores/gcc-pie-pauth-leaf.core.gz")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "core")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	var a, z strings.Builder
	if err := dumpCore(&a, p, []string{"../../testdata/cores/bin/gcc-pie.elf.gz"}); err != nil {
		t.Fatal(err)
	}
	if err := dumpCore(&z, "../../testdata/cores/cores/gcc-pie-pauth-leaf.core.gz", []string{"../../testdata/cores/bin/gcc-pie.elf.gz"}); err != nil {
		t.Fatal(err)
	}
	if strings.ReplaceAll(z.String(), "../../testdata/cores/cores/gcc-pie-pauth-leaf.core.gz", "") != strings.ReplaceAll(a.String(), p, "") || !strings.Contains(a.String(), "main+") {
		t.Errorf("outputs differ:\n%s\n%s", a.String(), z.String())
	}
}
