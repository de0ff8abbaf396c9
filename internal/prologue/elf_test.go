package prologue

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/internal/errs"
)

// shapeNames are the functions of testdata/arm64/src/shapes.S; local_helper
// is local (in .symtab only).
var shapeNames = []string{"sp_frame", "xzr_not_frame", "orr_xzr_not_frame", "pacia_sp", "pacib_sp",
	"pacia_x16", "nops_then_bti", "bti_in_body", "local_helper"}

// TestAssembledShapes scans prologues assembled from shapes.S: register 31
// read as xzr (not sp) in "mov x29, xzr", the non-hint pacia/pacib x30, sp,
// and a BTI after patchable-entry NOPs.
func TestAssembledShapes(t *testing.T) {
	b, err := Open(binDir + "/shapes.elf")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		want func(f Func) bool
		what string
	}{
		{"sp_frame", func(f Func) bool { return f.FrameRecord && f.Sign == KeyNone && !f.BTI }, "frame record"},
		{"xzr_not_frame", func(f Func) bool { return !f.FrameRecord && f.Calls == 1 }, "no frame record (x29 = xzr)"},
		{"orr_xzr_not_frame", func(f Func) bool { return !f.FrameRecord && f.Calls == 1 }, "no frame record (x29 = xzr)"},
		{"pacia_sp", func(f Func) bool { return f.Sign == KeyA && f.Auth == KeyA && f.FrameRecord && f.Unknown == 0 },
			"signed and authenticated with key A"},
		{"pacib_sp", func(f Func) bool { return f.Sign == KeyB && f.Auth == KeyB && f.FrameRecord && f.Unknown == 0 },
			"signed and authenticated with key B"},
		{"pacia_x16", func(f Func) bool { return f.Sign == KeyNone && f.Auth == KeyNone && f.Unknown == 0 },
			"x30 not signed (x16 is)"},
		{"nops_then_bti", func(f Func) bool { return f.BTI && f.EntryNOPs == 2 && f.Sign == KeyA && f.FrameRecord },
			"BTI after 2 entry NOPs, key A, frame record"},
		{"bti_in_body", func(f Func) bool { return !f.BTI && f.FrameRecord }, "no entry BTI"},
	}
	for _, tt := range tests {
		f, ok := b.Func(tt.name)
		if !ok {
			t.Errorf("no function %s", tt.name)
			continue
		}
		if !tt.want(f) {
			t.Errorf("%s: %+v; want %s", tt.name, f, tt.what)
		}
	}
}

// TestDynsym: a stripped shared library has only .dynsym; an unstripped one
// has both tables, and each function is reported once.
func TestDynsym(t *testing.T) {
	count := func(path string) map[string]int {
		t.Helper()
		b, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		n := map[string]int{}
		for _, f := range b.Funcs() {
			n[f.Name]++
		}
		return n
	}
	stripped := count(binDir + "/shapes-stripped.so")
	both := count(binDir + "/shapes.so")
	for _, name := range shapeNames {
		if both[name] != 1 {
			t.Errorf("shapes.so (.symtab and .dynsym): %s reported %d times, want once", name, both[name])
		}
		want := 1
		if name == "local_helper" {
			want = 0
		}
		if stripped[name] != want {
			t.Errorf("shapes-stripped.so (.dynsym only): %s reported %d times, want %d", name, stripped[name], want)
		}
	}
	if len(both) != len(shapeNames) || len(stripped) != len(shapeNames)-1 {
		t.Errorf("functions: %d in shapes.so, %d in shapes-stripped.so; want %d, %d", len(both), len(stripped),
			len(shapeNames), len(shapeNames)-1)
	}
	// The same code is scanned the same way from either table.
	bs, _ := Open(binDir + "/shapes-stripped.so")
	bb, _ := Open(binDir + "/shapes.so")
	for _, f := range bs.Funcs() {
		g, _ := bb.Func(f.Name)
		if f != g {
			t.Errorf("%s: %+v from .dynsym, %+v from .symtab", f.Name, f, g)
		}
	}
}

// TestNoFuncSymbols: a file with neither table says so.
func TestNoFuncSymbols(t *testing.T) {
	path := binDir + "/shapes-nosyms.elf"
	_, err := Open(path)
	if err == nil || !errors.Is(err, ErrNoFuncSymbols) || !strings.Contains(err.Error(), path) ||
		!strings.Contains(err.Error(), "no function symbols") {
		t.Fatalf("Open(%s) = %v; want an error naming the file and saying it has no function symbols", path, err)
	}
}

// TestBadFiles: every malformed file fails with an error that names the
// file and says what is wrong.
func TestBadFiles(t *testing.T) {
	good, err := os.ReadFile(binDir + "/shapes.elf")
	if err != nil {
		t.Fatal(err)
	}
	patch := func(off int, v ...byte) []byte {
		b := bytes.Clone(good)
		copy(b[off:], v)
		return b
	}
	le16 := func(v uint16) []byte { return binary.LittleEndian.AppendUint16(nil, v) }
	le64 := func(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
	shoff := binary.LittleEndian.Uint64(good[0x28:])
	tests := []struct {
		name     string
		data     []byte
		want     []string // substrings of the error, besides the path
		sentinel error
	}{
		{"empty", nil, []string{"empty file"}, errs.ErrCorrupt},
		{"text", []byte("# not an ELF file\n"), []string{"not an ELF file"}, errs.ErrCorrupt},
		{"magic only", []byte("\x7fELF"), []string{"truncated", "offset 0x4"}, errs.ErrCorrupt},
		{"half header", good[:40], []string{"truncated", "offset 0x28", "ELF header"}, errs.ErrCorrupt},
		{"32-bit", patch(4, 1), []string{"ELFCLASS32"}, errs.ErrCorrupt},
		{"big-endian", patch(5, 2), []string{"big-endian"}, errs.ErrCorrupt},
		{"x86-64", patch(18, le16(62)...), []string{"EM_X86_64", "want EM_AARCH64"}, ErrNotArm64},
		{"no section headers", good[:shoff], []string{"truncated", "section header"}, errs.ErrCorrupt},
		{"section headers far away", patch(0x28, le64(1<<40)...), []string{"section header", "past the end"}, errs.ErrCorrupt},
		{"truncated text", good[:0x200], []string{"truncated"}, errs.ErrCorrupt},
		{"bad shentsize", patch(0x3a, le16(7)...), []string{"entry size 7", "offset 0x3a"}, errs.ErrCorrupt},
	}
	dir := t.TempDir()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "_"))
			if err := os.WriteFile(path, tt.data, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Open(path)
			if err == nil {
				t.Fatal("Open succeeded")
			}
			msg := err.Error()
			if !strings.Contains(msg, path) {
				t.Errorf("error does not name the file: %v", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not say %q", msg, w)
				}
			}
			if !errors.Is(err, tt.sentinel) {
				t.Errorf("error %v is not %v", err, tt.sentinel)
			}
		})
	}
}
