package snapshot

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/internal/gcscases"
	"github.com/unwindkit/unwindkit/unwind"
)

func loadSnap(t testing.TB, path string) *Snapshot {
	t.Helper()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func names(t testing.TB, s *Snapshot, method unwind.Method) ([]string, []unwind.Frame) {
	t.Helper()
	src, err := s.Source(method)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := collect(src)
	if err != nil {
		t.Fatalf("%v: %v", method, err)
	}
	var out []string
	for _, f := range fs {
		out = append(out, s.Symbolizer().Func(f.PC))
	}
	return out, fs
}

// TestSnapshotsPublicAPI unwinds every committed real capture through
// Load and Source with both techniques: each symbolizes to the
// known chain minus exactly what its rules say it cannot see (the SCS
// copy: the innermost pc, _start because main is not instrumented, a
// leaf's caller whose return address is only in x30, the pc a signal
// interrupted; the FP walk: only the leaf's caller).
func TestSnapshotsPublicAPI(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/arm64/snapshots/*.json")
	if len(files) < 30 {
		t.Fatalf("found %d snapshots, want at least 30", len(files))
	}
	for _, path := range files {
		base := strings.TrimSuffix(filepath.Base(path), ".json")
		scenario := base[strings.LastIndex(base, "-")+1:]
		t.Run(base, func(t *testing.T) {
			s := loadSnap(t, path)
			scsMiss := []string{s.Expect[0], "_start"}
			var fpMiss []string
			switch scenario {
			case "leaf":
				scsMiss = append(scsMiss, "leaf_mid")
				fpMiss = append(fpMiss, "leaf_mid")
			case "signal":
				scsMiss = append(scsMiss, "sig_raise")
			}
			gotFP, fpFrames := names(t, s, unwind.MethodFP)
			if want := gcscases.Without(s.Expect, fpMiss...); !slices.Equal(gotFP, want) {
				t.Errorf("FP\n got %v\nwant %v", gotFP, want)
			}
			gotSCS, scsFrames := names(t, s, unwind.MethodSCS)
			if want := gcscases.Without(s.Expect, scsMiss...); !slices.Equal(gotSCS, want) {
				t.Errorf("SCS\n got %v\nwant %v", gotSCS, want)
			}
			// The explanation lines the two up: every SCS frame is matched
			// in the FP walk; every FP-only frame has a reason.
			cmp := unwind.CompareTraces(s.Symbolizer(), scsFrames, fpFrames)
			for _, r := range cmp.Rows {
				if r.InSCS && !r.InFP {
					t.Errorf("SCS-only frame %s in a fully framed program", s.Symbolizer().Name(r.SCS.PC))
				}
				if r.InFP && !r.InSCS && r.Note == "" {
					t.Errorf("FP-only frame %s without an explanation", s.Symbolizer().Name(r.FP.PC))
				}
			}
			// Auto picks the SCS copy.
			src, _ := s.Source(unwind.MethodAuto)
			if src.Method() != unwind.MethodSCS {
				t.Errorf("auto chose %v", src.Method())
			}
		})
	}
}

func TestSnapshotNoSCS(t *testing.T) {
	f, err := os.ReadFile("../../testdata/arm64/snapshots/clang-nopac-pauth-chain.json")
	if err != nil {
		t.Fatal(err)
	}
	// Drop the scs_base field: the snapshot then has no shadow call stack.
	txt := string(f)
	i := strings.Index(txt, `"scs_base"`)
	if i < 0 {
		t.Fatal("no scs_base in the capture")
	}
	j := strings.Index(txt[i:], ",")
	s, err := Load(strings.NewReader(txt[:i] + txt[i+j+1:]))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Source(unwind.MethodSCS); !errors.Is(err, unwind.ErrNotSupported) {
		t.Fatalf("SCS without scs_base: %v", err)
	}
	if src, err := s.Source(unwind.MethodAuto); err != nil || src.Method() != unwind.MethodFP {
		t.Fatalf("auto without scs: %v %v", src, err)
	}
}

func TestLoadSnapshotErrors(t *testing.T) {
	for _, bad := range []string{"", "{", `{"version": 2}`, `{"version": 1, "arch": "x86_64"}`} {
		if _, err := Load(strings.NewReader(bad)); err == nil {
			t.Errorf("Load(%q) succeeded", bad)
		}
	}
}

// FuzzLoadSnapshot feeds arbitrary bytes (seeded with real captures)
// through the public path a crash-dump tool uses: Load, a Source
// for each method, Frames, and CompareTraces. Nothing may panic; a loaded
// snapshot unwinds to at most as many frames as its memory has words, and
// fails only with ErrCorrupt or ErrNotSupported.
func FuzzLoadSnapshot(f *testing.F) {
	for _, name := range []string{"clang-nopac-pauth-leaf.json", "gcc-pacretb-nopauth-signal.json"} {
		b, err := os.ReadFile("../../testdata/arm64/snapshots/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"version":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Load(bytes.NewReader(data))
		if err != nil {
			return
		}
		var words int
		for _, r := range s.Regions() {
			words += int(r.Size / 8)
		}
		var traces [2][]unwind.Frame
		for i, m := range []unwind.Method{unwind.MethodSCS, unwind.MethodFP} {
			src, err := s.Source(m)
			if err != nil {
				if !errors.Is(err, unwind.ErrNotSupported) {
					t.Fatalf("%v source: %v", m, err)
				}
				continue
			}
			for fr, err := range src.Frames() {
				if err != nil {
					if !errors.Is(err, unwind.ErrCorrupt) {
						t.Fatalf("%v: %v", m, err)
					}
					break
				}
				traces[i] = append(traces[i], fr)
				if len(traces[i]) > words+1 {
					t.Fatalf("%v: %d frames from %d words of memory", m, len(traces[i]), words)
				}
			}
		}
		cmp := unwind.CompareTraces(s.Symbolizer(), traces[0], traces[1])
		if len(cmp.Rows) < max(len(traces[0]), len(traces[1])) {
			t.Fatalf("comparison lost frames: %d rows for %d/%d", len(cmp.Rows), len(traces[0]), len(traces[1]))
		}
		_ = cmp.String()
	})
}

func collect(src *unwind.Source) ([]unwind.Frame, error) {
	var out []unwind.Frame
	for f, err := range src.Frames() {
		if err != nil {
			return out, err
		}
		out = append(out, f)
	}
	return out, nil
}
