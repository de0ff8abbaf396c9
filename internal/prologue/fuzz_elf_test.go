package prologue

import (
	"bytes"
	"debug/elf"
	"errors"
	"os"
	"strings"
	"testing"
)

// FuzzNew feeds arbitrary bytes (seeded with the committed test binaries)
// through NewReader and through debug/elf and New: a malformed file is an
// error that names the file, never a panic, and every function reported
// lies inside the file's text and answers CallBefore without panicking.
func FuzzNew(f *testing.F) {
	for _, name := range []string{"clang-pacret.elf", "gcc-pfe.elf", "shapes-stripped.so"} {
		b, err := os.ReadFile("../../testdata/arm64/bin/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("\x7fELF"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		const name = "fuzz.elf"
		if b, err := NewReader(name, bytes.NewReader(data), int64(len(data))); err != nil {
			if !strings.Contains(err.Error(), name) {
				t.Fatalf("error does not name the file: %v", err)
			}
		} else {
			check(t, b)
		}
		ef, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			return
		}
		b, err := New(ef)
		if err != nil {
			if ef.Machine != elf.EM_AARCH64 && !errors.Is(err, ErrNotArm64) {
				t.Fatalf("non-arm64 file: %v", err)
			}
			return
		}
		check(t, b)
	})
}

func check(t *testing.T, b *Binary) {
	for _, fn := range b.Funcs() {
		if got, ok := b.FuncAt(fn.Addr); fn.Size > 0 && (!ok || got.Addr > fn.Addr) {
			t.Fatalf("FuncAt(%#x) = %+v, %v for %s", fn.Addr, got, ok, fn.Name)
		}
		b.CallBefore(fn.Addr + fn.Size)
		b.CallBefore(fn.Addr + 4)
	}
}
