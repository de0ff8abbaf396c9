package snapshot

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"

	"github.com/unwindkit/unwindkit/internal/errs"
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
		if err != nil {
			if s != nil {
				t.Fatal("snapshot with error")
			}
			if !errors.Is(err, errs.ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		if r := s.Memory.Find(s.Regs.SP); r == nil || r.Kind != KindStack {
			t.Fatalf("sp %#x not in a stack region", s.Regs.SP)
		}
		if s.HasSCS {
			r := s.SCSRegion()
			if r == nil || r.Kind != KindSCS || s.Regs.X18 < s.SCSBase || s.Regs.X18 > r.End() {
				t.Fatalf("x18 %#x / scs_base %#x inconsistent with %v", s.Regs.X18, s.SCSBase, r)
			}
		}
		rs := s.Memory.Regions()
		for i := 1; i < len(rs); i++ {
			if rs[i-1].End() > rs[i].Base {
				t.Fatalf("regions overlap: %v %v", rs[i-1], rs[i])
			}
		}
	})
}
