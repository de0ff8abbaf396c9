package prologue

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/internal/fuzzpatch"
)

// FuzzPatchNew scans the committed arm64 test binaries with a few bytes
// changed (a patch list, internal/fuzzpatch, seeded at the ELF, program
// and section headers and each section's start): a malformed file is an
// error naming the file, never a panic, and every function found answers
// FuncAt and CallBefore.
func FuzzPatchNew(f *testing.F) {
	paths, err := filepath.Glob(binDir + "/*.[es][lo]*")
	if err != nil || len(paths) < 10 {
		f.Fatalf("committed binaries: %v, %v", paths, err)
	}
	var bases [][]byte
	for _, p := range paths {
		bases = append(bases, fuzzpatch.Read(f, p))
	}
	for i, b := range bases {
		for _, s := range fuzzpatch.Seeds(b, 12) {
			f.Add(uint8(i), s)
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, patch []byte) {
		data := fuzzpatch.Apply(bases[int(which)%len(bases)], patch)
		const name = "fuzz.elf"
		b, err := NewReader(name, bytes.NewReader(data), int64(len(data)))
		if err != nil {
			if !strings.Contains(err.Error(), name) {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		check(t, b)
	})
}
