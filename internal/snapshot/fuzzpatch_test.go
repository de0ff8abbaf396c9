package snapshot

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/unwindkit/unwindkit/internal/fuzzpatch"
)

// FuzzPatchLoad loads the shipped snapshots of real arm64 programs with a
// few bytes changed (a patch list, internal/fuzzpatch): an error wraps
// ErrCorrupt and comes without a snapshot; a loaded snapshot keeps Load's
// promises (sp in a stack region, x18 in the SCS region, regions apart).
func FuzzPatchLoad(f *testing.F) {
	paths, err := filepath.Glob("../../testdata/arm64/snapshots/*.json")
	if err != nil || len(paths) < 4 {
		f.Fatalf("snapshots: %v, %v", paths, err)
	}
	var bases [][]byte
	for _, p := range paths {
		bases = append(bases, fuzzpatch.Read(f, p))
	}
	for i, b := range bases {
		f.Add(uint8(i), []byte{})
		// An edit at the registers and one at the first region's data.
		for _, key := range []string{`"regs"`, `"data"`, `"symbols"`} {
			if at := bytes.Index(b, []byte(key)); at >= 0 {
				f.Add(uint8(i), fuzzpatch.Edit(uint32(at), b[at:min(at+24, len(b))]))
			}
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, patch []byte) {
		in := fuzzpatch.Apply(bases[int(which)%len(bases)], patch)
		s, err := Load(bytes.NewReader(in))
		checkLoaded(t, s, err)
	})
}
