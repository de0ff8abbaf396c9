package main

import (
	"os"
	"testing"
)

// TestSizelessFile checks that a file whose stat size is 0 but which has
// content, as procfs gives /proc/kallsyms, is read whole: unwinddump
// /proc/kcore takes its symbols from /proc/kallsyms, and read by its
// size that gave no symbols.
func TestSizelessFile(t *testing.T) {
	const path = "/proc/kallsyms"
	st, err := os.Stat(path)
	if err != nil || st.Size() != 0 {
		t.Skipf("%s: %v, size %v: not a procfs system", path, err, st)
	}
	in, err := openInput(path, objectRatio)
	if err != nil {
		t.Fatal(err)
	}
	defer in.close()
	if in.size == 0 {
		t.Fatalf("%s read as %d bytes", path, in.size)
	}
	b := make([]byte, 20)
	if _, err := in.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
}
